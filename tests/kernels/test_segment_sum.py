"""Segment sum (gather–message–scatter, paper 13 HollowFlow): the CSR Triton kernel against ``index_add_``.

On the CPU the kernel runs in the Triton interpreter (TRITON_INTERPRET=1) on small ragged inputs with
empty segments, odd widths, unsorted receivers, float32 and float64, with the sorting plan and with the
sort-free plan of receivers already sorted; the ``gpu`` tests run compiled.
Outputs are pre-filled with NaN so unwritten elements are caught. The last test checks that NoBGNN gives
the same velocity and hollow divergence with either aggregation.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit decorates the kernels

from companion_kernels.segment_sum import Plan, plan, segment_sum, segment_sum_reference, sorted_csr_plan  # noqa: E402
from companion_kernels.segment_sum import triton as ss_triton  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def _ragged(E, size, F, dtype, seed=0, used=None, V=None):
    """Random receivers in [0, used) (so rows used..size-1 are empty), unsorted, plus a few empty rows inside."""
    g = torch.Generator().manual_seed(seed)
    used = size if used is None else used
    rows = torch.randint(0, used, (E,), generator=g)
    rows[rows == 1] = 2  # receiver 1 gets nothing
    values = torch.randn(V or E, F, generator=g, dtype=torch.float64).to(dtype)
    gather = torch.randint(0, V, (E,), generator=g) if V else None
    return values.to(DEV), rows.to(DEV), (gather.to(DEV) if V else None)


def _index_add(values, rows, size, gather=None):
    src = values if gather is None else values[gather]
    return torch.zeros(size, values.shape[1], dtype=values.dtype, device=values.device).index_add_(0, rows, src)


def test_plan_is_the_stable_csr_layout():
    rows = torch.tensor([2, 0, 2, 4, 0, 2])
    p = plan(rows, 6)
    assert p.perm.tolist() == [1, 4, 0, 2, 5, 3]  # stable: ties keep the edge order
    assert p.offsets.tolist() == [0, 2, 2, 5, 5, 6, 6]  # receivers 1, 3, 5 are empty


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("E,size,used,F", [(1, 1, 1, 1), (57, 23, 17, 13), (200, 40, 40, 67), (300, 9, 9, 131)])
def test_kernel_matches_index_add(dtype, E, size, used, F):
    values, rows, _ = _ragged(E, size, F, dtype, used=used)
    p = plan(rows, size)
    out = torch.full((size, F), float("nan"), dtype=dtype, device=DEV)
    ss_triton.segment_sum_csr(values, p.perm, p.offsets, size, out=out)
    ref = _index_add(values, rows, size)
    assert torch.isfinite(out).all()
    assert (out[used:] == 0).all() and (size < 2 or (out[1] == 0).all())  # empty segments: exact zeros
    assert (out - ref).abs().max().item() <= TOL[dtype] * max(1.0, ref.abs().max().item())


def test_row_strided_values_and_output():
    """values and out as column slices of wider NaN-filled buffers (row strides 16 and 20, not F = 13): the kernel
    reads and writes each with its own row stride and leaves the columns outside the slices untouched."""
    values, rows, _ = _ragged(57, 23, 13, torch.float64, seed=10, used=17)
    wide = torch.full((57, 16), float("nan"), dtype=torch.float64, device=DEV)
    wide[:, :13] = values
    out = torch.full((23, 20), float("nan"), dtype=torch.float64, device=DEV)
    p = plan(rows, 23)
    ss_triton.segment_sum_csr(wide[:, :13], p.perm, p.offsets, 23, out=out[:, :13])
    ref = _index_add(values, rows, 23)
    assert (out[:, :13] - ref).abs().max().item() <= 1e-12 and out[:, 13:].isnan().all()
    assert (segment_sum(wide[:, :13], rows, 23, impl="triton") - ref).abs().max().item() <= 1e-12


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("E,size,used,F", [(0, 5, 5, 3), (1, 1, 1, 1), (57, 23, 17, 13), (300, 9, 9, 131)])
def test_sort_free_plan_matches_index_add_and_the_sorting_plan(dtype, E, size, used, F):
    """Receivers already sorted: the plan without a sort (perm None, which the kernel skips) sums as index_add_
    and gives the sorting plan's bits (its perm is then the identity), empty rows inside and at the end exact zeros."""
    values, rows, _ = _ragged(E, size, F, dtype, used=used)
    rows = rows.sort().values
    p, sorting = plan(rows, size, presorted=True), plan(rows, size)
    assert p.perm is None and torch.equal(sorting.perm, torch.arange(E, device=DEV))
    assert torch.equal(p.offsets, sorting.offsets) and torch.equal(sorted_csr_plan(rows, size).offsets, p.offsets)
    out = torch.full((size, F), float("nan"), dtype=dtype, device=DEV)
    ss_triton.segment_sum_csr(values, None, p.offsets, size, out=out)
    ref = _index_add(values, rows, size)
    assert torch.equal(out, ss_triton.segment_sum_csr(values, sorting.perm, sorting.offsets, size))
    assert (out[torch.bincount(rows, minlength=size) == 0] == 0).all()
    assert (out - ref).abs().max().item() <= TOL[dtype] * max(1.0, ref.abs().max().item())


def test_sort_free_plan_with_gather_forward_and_backward():
    """The identity plan with a gather (the kernel then reads values[gather[e]]): forward and backward as index_add_."""
    values, rows, gather = _ragged(70, 19, 5, torch.float64, seed=8, used=15, V=23)
    rows = rows.sort().values
    v1, v2 = values.clone().requires_grad_(True), values.clone().requires_grad_(True)
    out = segment_sum(v1, rows, 19, gather=gather, plan=plan(rows, 19, presorted=True), impl="triton")
    ref = _index_add(v2, rows, 19, gather)
    go = torch.randn(19, 5, generator=torch.Generator().manual_seed(9), dtype=torch.float64).to(DEV)
    (g1,), (g2,) = torch.autograd.grad(out, v1, go), torch.autograd.grad(ref, v2, go)
    assert (out - ref).abs().max().item() <= 1e-12 and (g1 - g2).abs().max().item() <= 1e-12


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("with_gather", [False, True])
def test_forward_and_backward_match_autograd_through_index_add(dtype, with_gather):
    E, size, F, V = 90, 31, 7, (25 if with_gather else None)
    values, rows, gather = _ragged(E, size, F, dtype, seed=1, used=27, V=V)
    v1 = values.clone().requires_grad_(True)
    v2 = values.clone().requires_grad_(True)
    out = segment_sum(v1, rows, size, gather=gather, impl="triton")
    ref = _index_add(v2, rows, size, gather)
    assert out.shape == (size, F) and (out - ref).abs().max().item() <= TOL[dtype] * 10
    go = torch.randn(size, F, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(DEV, dtype)
    (g1,) = torch.autograd.grad(out, v1, go)
    (g2,) = torch.autograd.grad(ref, v2, go)
    assert (g1 - g2).abs().max().item() <= TOL[dtype] * 10
    # batched VJPs (the brute-force divergence uses is_grads_batched)
    gos = torch.randn(3, size, F, generator=torch.Generator().manual_seed(3), dtype=torch.float64).to(DEV, dtype)
    out = segment_sum(v1, rows, size, gather=gather, impl="triton")
    (b1,) = torch.autograd.grad(out, v1, gos, is_grads_batched=True)
    ref = _index_add(v2, rows, size, gather)
    (b2,) = torch.autograd.grad(ref, v2, gos, is_grads_batched=True)
    assert (b1 - b2).abs().max().item() <= TOL[dtype] * 10


def test_plan_reuse_reference_path_and_auto():
    values, rows, _ = _ragged(40, 12, 5, torch.float64, seed=4)
    p = plan(rows, 12)
    ref = _index_add(values, rows, 12)

    def same(a, b):  # bit for bit where index_add_ adds in order (the CPU); CUDA's adds with atomics, in any order
        return torch.equal(a, b) if DEV == "cpu" else torch.allclose(a, b, rtol=0, atol=1e-12)

    assert same(segment_sum(values, rows, 12, plan=p, impl="triton"), ref)
    assert same(segment_sum(values, rows, 12, impl="reference"), ref)
    assert same(segment_sum_reference(values, rows, 12), ref)
    assert same(segment_sum(values, rows, 12, impl="auto"), ref)


def test_empty_edge_list_gives_zeros():
    values = torch.zeros(0, 4, device=DEV)
    rows = torch.zeros(0, dtype=torch.long, device=DEV)
    out = segment_sum(values, rows, 5, impl="triton")
    assert out.shape == (5, 4) and (out == 0).all()


def test_double_backward_raises_clearly():
    values, rows, _ = _ragged(20, 6, 3, torch.float64, seed=5)
    v = values.requires_grad_(True)
    out = segment_sum(v, rows, 6, impl="triton")
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(out.pow(2).sum(), v, create_graph=True)


def test_bad_input_gives_clear_errors():
    values, rows, _ = _ragged(20, 6, 3, torch.float32, seed=6)
    with pytest.raises(ValueError, match=r"rows has entries in \[0, 5\] but must lie in \[0, 3\]"):
        segment_sum(values, rows, 4, impl="triton")
    with pytest.raises(ValueError, match="rows has entries"):
        segment_sum(values, rows - 1, 6, impl="reference")
    with pytest.raises(ValueError, match="rows has entries"):
        plan(rows, 5)
    with pytest.raises(TypeError, match="rows has dtype torch.float32"):
        segment_sum(values, rows.float(), 6)
    with pytest.raises(TypeError, match="values must be a floating-point tensor"):
        segment_sum(values.long(), rows, 6)
    with pytest.raises(ValueError, match=r"values must be 2-D \[E, F\]"):
        segment_sum(values[:, 0], rows, 6)
    with pytest.raises(ValueError, match="rows has 19 entries but must have 20"):
        segment_sum(values, rows[:-1], 6)
    with pytest.raises(ValueError, match="gather has entries in"):
        segment_sum(values, rows, 6, gather=torch.full_like(rows, 20))
    with pytest.raises(ValueError, match="gather has 19 entries but must have 20"):
        segment_sum(values, rows, 6, gather=rows[:-1])
    with pytest.raises(ValueError, match="size=-1 is not allowed"):
        segment_sum(values, rows, -1)
    with pytest.raises(ValueError, match="impl='cuda' is not allowed"):
        segment_sum(values, rows, 6, impl="cuda")
    with pytest.raises(ValueError, match="does not fit rows"):
        segment_sum(values, rows, 7, plan=plan(rows, 6), impl="triton")
    with pytest.raises(TypeError, match="plan must be a Plan"):
        segment_sum(values, rows, 6, plan=(1, 2), impl="triton")
    with pytest.raises(ValueError, match=r"presorted=True but rows is not sorted: rows\[\d+\] = \d+ < rows"):
        plan(rows, 6, presorted=True)
    with pytest.raises(TypeError, match="presorted must be a bool"):
        plan(rows, 6, presorted=1)
    with pytest.raises(ValueError, match="perm identity, offsets"):
        segment_sum(values, rows, 7, plan=plan(rows.sort().values, 6, presorted=True), impl="triton")
    assert isinstance(plan(rows, 6), Plan)


def test_nobgnn_same_velocity_and_hollow_divergence_with_the_kernel():
    """NoBGNN with aggregate='segment_sum' (the kernel) equals aggregate='index_add' (float64, 1e-10)."""
    from companion.hollowflow.divergence import divergence_hollow
    from companion.hollowflow.nobgnn import NoBGNN

    torch.manual_seed(0)
    a = NoBGNN(hidden=8, steps=2, k=3).double().to(DEV)
    b = NoBGNN(hidden=8, steps=2, k=3, aggregate="segment_sum", segment_impl="triton").double().to(DEV)
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 9, 3, dtype=torch.float64).to(DEV)
    assert (a(x, 0.3) - b(x, 0.3)).abs().max().item() < 1e-10
    (ba, da), (bb, db) = divergence_hollow(a, x, 0.3), divergence_hollow(b, x, 0.3)
    assert (ba - bb).abs().max().item() < 1e-10 and (da - db).abs().max().item() < 1e-10


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("presorted", [False, True])
def test_gpu_compiled_matches_index_add(dtype, presorted):
    values, rows, _ = _ragged(100_000, 20_000, 67, torch.float32, seed=7, used=19_000)
    values = values.to(dtype)
    rows = rows.sort().values if presorted else rows
    p = plan(rows, 20_000, presorted=True) if presorted else None  # the compiled kernel without the perm load
    out = segment_sum(values, rows, 20_000, plan=p, impl="triton")
    ref = _index_add(values.float(), rows, 20_000)
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    assert (out.float() - ref).abs().max().item() <= tol * max(1.0, ref.abs().max().item())
