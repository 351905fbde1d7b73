"""Fused HRA op (paper 02 HyperET): Triton kernel vs the PyTorch oracle, the closed form, and bad input.

On the CPU the kernel runs in the Triton interpreter (TRITON_INTERPRET=1, fp32/fp16, small odd sizes);
the tests marked ``gpu`` run compiled in bf16 at ViT-L width. Outputs and partial sums are pre-filled
with NaN so unwritten elements are caught.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit decorates the kernels

from companion_kernels.hra import closed_form, hra_fused, hra_reference  # noqa: E402
from companion_kernels.hra import triton as hra_triton  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
CASES = [("diagonal", 1, 13), ("banded", 5, 13), ("banded", 3, 7), ("block", 4, 12), ("block", 3, 9)]


def _inputs(kind, k, n, g=2, r=5, row_norm=0.64, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w0 = torch.randn(g, r, n, generator=gen)
    w0 = w0 / w0.norm(dim=-1, keepdim=True) * row_norm
    w0[0, 0] = 0.0  # an all-zero row: output 0, no NaN
    coef = 0.3 * torch.randn(g, k, n, generator=gen)
    if kind == "block":
        idx = torch.arange(n)
        coef[:, idx % k, idx] += 1.0
    else:
        coef[:, (k - 1) // 2] += 1.0
    return w0.to(DEV, dtype), coef.to(DEV)


def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


REGIMES = [(0.01, 0.64), (1.0, 1.5), (1.0, 6.4)]  # (c, row norm): guards inactive, inactive, active


@pytest.mark.parametrize("kind,k,n,r,c,row_norm",
                         [case + (5,) + regime for case in CASES for regime in REGIMES] + [("banded", 5, 13, 70, 1.0, 6.4)])
def test_forward_and_gradient_match_reference(kind, k, n, r, c, row_norm):
    """Output and coefficient gradient against the float64 oracle, guards inactive and active. r = 5 rows: one
    program a matrix; r = 70: five forward programs of 16 rows and two backward programs of 64, the last of each
    ragged (every row written, every program's partial sum stored and summed)."""
    w0, coef = _inputs(kind, k, n, r=r, row_norm=row_norm)
    out = torch.full_like(w0, float("nan"))
    hra_triton.hra_forward(w0, coef.contiguous(), kind == "block", c**0.5, out=out)
    assert torch.isfinite(out).all()
    ref = hra_reference(w0.double(), coef.double(), kind, c)
    # with guards active (√c‖w‖ = 6.4) fp32 loses digits in artanh(tanh(·)) near the boundary
    tol = 1e-5 if c * row_norm**2 < 4 else 2e-3
    assert _rel(out, ref) < tol

    grad_out = torch.randn(w0.shape, generator=torch.Generator().manual_seed(1)).to(DEV)
    part = torch.full(hra_triton.partial_shape(w0, k), float("nan"), device=DEV)
    grad = hra_triton.hra_backward(w0, coef.contiguous(), grad_out, kind == "block", c**0.5, part=part)
    assert torch.isfinite(part).all()
    cref = coef.double().requires_grad_()
    (hra_reference(w0.double(), cref, kind, c) * grad_out.double()).sum().backward()
    assert _rel(grad, cref.grad) < tol  # banded: entries outside the matrix get zero gradient in both


@pytest.mark.parametrize("kind,k,n", CASES[:2] + CASES[3:4])
def test_fp16_input_and_the_closed_form_identity(kind, k, n):
    w0, coef = _inputs(kind, k, n, dtype=torch.float16)
    out = hra_fused(w0, coef, kind=kind, c=0.01, impl="triton")
    assert out.dtype == torch.float16
    exact = closed_form(w0.double(), coef.double(), kind)
    assert _rel(out, exact) < 2e-3  # fp16 output rounding
    out32 = hra_fused(w0.float(), coef, kind=kind, c=0.01, impl="triton")
    assert _rel(out32, exact) < 1e-5  # the identity log0(M ⊗ exp0(w)) = Mw, fp32


def test_autograd_through_api_and_2d_input():
    w0, coef = _inputs("banded", 5, 11, g=1, r=6)
    coef2 = coef[0].clone().requires_grad_()
    out = hra_fused(w0[0], coef2, kind="banded", c=0.01, impl="triton")
    assert out.shape == w0[0].shape
    out.pow(2).sum().backward()
    cref = coef[0].double().clone().requires_grad_()
    hra_reference(w0[:1].double(), cref[None], "banded", 0.01).pow(2).sum().backward()
    assert _rel(coef2.grad, cref.grad) < 1e-5


def test_reference_impl_and_auto():
    w0, coef = _inputs("diagonal", 1, 9)
    a = hra_fused(w0, coef, kind="diagonal", impl="reference")
    b = hra_fused(w0, coef, kind="diagonal", impl="auto")
    assert _rel(a, b) < 1e-5


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        ({"kind": "triangular"}, ValueError, "kind"),
        ({"kind": "diagonal", "c": 0.0}, ValueError, "c="),
        ({"kind": "diagonal", "c": -1.0}, ValueError, "c="),
        ({"kind": "diagonal", "impl": "cuda"}, ValueError, "impl"),
        ({"kind": "banded"}, ValueError, "odd"),
        ({"kind": "block"}, ValueError, "divide"),
    ],
)
def test_bad_arguments(kwargs, exc, match):
    w0 = torch.zeros(3, 9, device=DEV)
    coef = torch.ones(2 if kwargs["kind"] in ("banded", "block") else 1, 9, device=DEV)
    with pytest.raises(exc, match=match):
        hra_fused(w0, coef, **kwargs)


def test_bad_tensors():
    w0 = torch.zeros(2, 3, 8, device=DEV)
    with pytest.raises(ValueError, match="leading dimension"):
        hra_fused(w0, torch.ones(3, 1, 8, device=DEV), kind="diagonal")
    with pytest.raises(ValueError, match="width"):
        hra_fused(w0, torch.ones(2, 1, 7, device=DEV), kind="diagonal")
    with pytest.raises(ValueError, match="K=1"):
        hra_fused(w0, torch.ones(2, 3, 8, device=DEV), kind="diagonal")
    with pytest.raises(TypeError, match="floating-point"):
        hra_fused(w0.long(), torch.ones(2, 1, 8, device=DEV), kind="diagonal")
    with pytest.raises(ValueError, match="contiguous"):
        hra_fused(torch.zeros(2, 8, 3, device=DEV).transpose(1, 2), torch.ones(2, 1, 8, device=DEV), kind="diagonal", impl="triton")
    with pytest.raises(TypeError, match="float64"):
        hra_fused(w0.double(), torch.ones(2, 1, 8, device=DEV), kind="diagonal", impl="triton")
    with pytest.raises(ValueError, match=r"\[R, n\]"):
        hra_fused(torch.zeros(8, device=DEV), torch.ones(1, 8, device=DEV), kind="diagonal")


def test_triton_impl_needs_cuda_or_interpreter(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        hra_fused(torch.zeros(2, 4), torch.ones(1, 4), kind="diagonal", impl="triton")


@pytest.mark.gpu
@pytest.mark.parametrize("kind,k", [("diagonal", 1), ("block", 4), ("banded", 5)])
def test_gpu_bf16_vit_l_width(kind, k):
    w0, coef = _inputs(kind, k, 1024, g=4, r=300, dtype=torch.bfloat16)
    coef = coef.requires_grad_()
    out = hra_fused(w0, coef, kind=kind, c=0.01, impl="triton")
    ref = hra_reference(w0.float(), coef, kind, 0.01)
    assert _rel(out, ref) < 1.5e-2
    g = torch.randn_like(ref)
    out.float().mul(g).sum().backward()
    gk, coef.grad = coef.grad.clone(), None
    ref.mul(g).sum().backward()
    assert _rel(gk, coef.grad) < 1.5e-2
