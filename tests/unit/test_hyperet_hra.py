"""HRA module: the exact identity log0(M ⊗ exp0(w)) = Mw, parametrisations, counts, placement, bad input."""

from __future__ import annotations

import pytest
import torch

from companion.core import ParameterError
from companion.hyperet import HRA, hra_weight, structured_param_count
from companion.hyperet.vit import QVAdapter, adaptable_vit, attach_adapters, encoder_param_count
from companion.models.tiny import TinyViT

STRUCTS = [("diagonal", {}), ("block", {"block_size": 4}), ("banded", {"bandwidth": 2}), ("full", {}), ("scalar", {})]


def _randomise(m: HRA, scale=0.3, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        m.weight.add_(scale * torch.randn(m.weight.shape, generator=g))
    return m


def _w0(rows, n, row_norm, dtype=torch.float64, seed=1):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, n, generator=g, dtype=dtype)
    return w / w.norm(dim=-1, keepdim=True) * row_norm


@pytest.mark.parametrize("structure,kw", STRUCTS)
@pytest.mark.parametrize("c", [1e-3, 0.01, 1.0])
def test_identity_hra_equals_w0_wsT(structure, kw, c):
    m = _randomise(HRA(32, structure, c=c, **kw).double())
    w0 = _w0(24, 32, 0.64)  # CLIP-like row norm
    expected = w0 @ m.dense().T
    torch.testing.assert_close(m(w0), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("structure,kw", STRUCTS[:3])
def test_identity_in_fp32_within_1e_5(structure, kw):
    m = _randomise(HRA(64, structure, c=0.01, **kw))
    w0 = _w0(64, 64, 0.64, dtype=torch.float32)
    rel = (m(w0) - w0 @ m.dense().T).norm() / (w0 @ m.dense().T).norm()
    assert rel < 1e-5


def test_guards_break_the_identity_only_for_large_sqrt_c_times_norm():
    m = _randomise(HRA(32, "diagonal", c=1.0).double())
    small, large = _w0(16, 32, 0.64), _w0(16, 32, 6.4)
    err = lambda w: ((m(w) - w @ m.dense().T).norm() / (w @ m.dense().T).norm()).item()  # noqa: E731
    assert err(small) < 1e-12
    assert err(large) > 0.1  # √c‖Mw‖ ≳ 3.8: the projection to (1 − 1e-3)/√c clips the radius
    unguarded = HRA(32, "diagonal", c=1.0, guards=False).double()
    unguarded.load_state_dict(m.state_dict())
    mid = _w0(16, 32, 3.0)  # inside the exact range of fp64 tanh/artanh
    torch.testing.assert_close(unguarded(mid), mid @ m.dense().T, rtol=1e-6, atol=1e-8)


def test_gradients_equal_the_euclidean_twin():
    w0 = _w0(40, 32, 0.64)
    grads = []
    for geometry in ("hyperbolic", "euclidean"):
        m = _randomise(HRA(32, "diagonal", geometry=geometry).double())
        (m(w0) * torch.linspace(-1, 1, 32, dtype=torch.float64)).sum().backward()
        grads.append(m.weight.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-10, atol=1e-12)


def test_matches_geoopt_chain():
    geoopt = pytest.importorskip("geoopt")
    ball = geoopt.PoincareBall(c=0.01)
    m = _randomise(HRA(16, "banded", bandwidth=1).double())
    w0 = _w0(10, 16, 0.64)
    peer = ball.logmap0(ball.mobius_matvec(m.dense().detach(), ball.expmap0(w0)))
    torch.testing.assert_close(m(w0).detach(), peer, rtol=1e-5, atol=1e-6)


def test_block_size_one_and_bandwidth_zero_equal_diagonal_and_scalar_equals_omega_identity():
    w0 = _w0(12, 8, 0.64)
    diag = _randomise(HRA(8, "diagonal").double())
    block = HRA(8, "block", block_size=1).double()
    band = HRA(8, "banded", bandwidth=0).double()
    with torch.no_grad():
        block.weight.copy_(diag.weight.view(8, 1, 1))
        band.weight.copy_(diag.weight)
    torch.testing.assert_close(block(w0), diag(w0))
    torch.testing.assert_close(band(w0), diag(w0))
    scalar = HRA(8, "scalar").double()
    as_diag = HRA(8, "diagonal").double()
    with torch.no_grad():
        scalar.weight.fill_(1.7)
        as_diag.weight.fill_(1.7)
    torch.testing.assert_close(scalar(w0), as_diag(w0), rtol=1e-12, atol=1e-12)  # Eq. 6 = Eq. 9 with W_s = ωI


def test_identity_init_leaves_w0_unchanged():
    w0 = _w0(20, 16, 0.64)
    for structure, kw in STRUCTS:
        torch.testing.assert_close(HRA(16, structure, **kw).double()(w0), w0, rtol=1e-12, atol=1e-12)


def test_parameter_counts_match_the_paper():
    n = 1024
    assert structured_param_count(n, "diagonal") == 1024
    assert structured_param_count(n, "block", block_size=4) == 4096
    assert structured_param_count(n, "banded", bandwidth=2) == 5114
    assert structured_param_count(n, "full") == n * n
    for structure, kw in STRUCTS:
        assert HRA(48, structure, **kw).num_params == structured_param_count(48, structure, **kw)
    # CLIP ViT-L/14: 24 blocks × {q, v} × diagonal = 49,152 parameters ("0.05M")
    assert 24 * 2 * structured_param_count(1024, "diagonal") == 49152


def test_hra_weight_function_and_fused_format_agree():
    m = _randomise(HRA(12, "block", block_size=3).double())
    w0 = _w0(7, 12, 0.64)
    torch.testing.assert_close(hra_weight(w0, m.dense(), 0.01), m(w0))
    for structure, kw in STRUCTS[:3]:
        eager = _randomise(HRA(12, structure, **({"block_size": 3} if structure == "block" else kw)))
        fused = HRA(12, structure, impl="fused", **({"block_size": 3} if structure == "block" else kw))
        fused.load_state_dict(eager.state_dict())
        w = _w0(9, 12, 0.64, dtype=torch.float32)
        torch.testing.assert_close(fused(w), eager(w), rtol=1e-5, atol=1e-6)  # CPU: the kernel's reference path


def test_placement_on_q_and_v_only():
    torch.manual_seed(0)
    vit = adaptable_vit((1, 8, 8), patch=2, dim=16, depth=2, heads=2)
    n_trainable = attach_adapters(vit, "hra", structure="diagonal")
    assert n_trainable == 2 * 2 * 16
    attn = vit.blocks[0].attn
    assert isinstance(attn.qv_adapter, QVAdapter)
    with torch.no_grad():
        attn.qv_adapter.adapter_q.weight.mul_(2.0)
    w, w0 = attn.effective_weight(), attn.in_proj_weight
    torch.testing.assert_close(w[16:32], w0[16:32])  # k untouched
    torch.testing.assert_close(w[32:], w0[32:], rtol=1e-5, atol=1e-6)  # v at identity init
    torch.testing.assert_close(w[:16], 2 * w0[:16], rtol=1e-5, atol=1e-6)  # q scaled column-wise by ω = 2
    share = n_trainable / encoder_param_count(vit)
    assert share < 0.02
    assert all(not p.requires_grad for n, p in vit.named_parameters() if "qv_adapter" not in n)
    with pytest.raises(ParameterError, match="QVAttention"):
        attach_adapters(TinyViT((1, 8, 8), patch=2, dim=16, depth=1, heads=2), "hra")  # the plain shared ViT


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"n": 10, "structure": "block", "block_size": 4}, "block_size"),
        ({"n": 10, "structure": "banded", "bandwidth": -1}, "bandwidth"),
        ({"n": 10, "structure": "banded", "bandwidth": 10}, "bandwidth"),
        ({"n": 10, "c": 0.0}, "c="),
        ({"n": 10, "c": -0.5}, "c="),
        ({"n": 10, "structure": "triangular"}, "structure"),
        ({"n": 10, "geometry": "spherical"}, "geometry"),
        ({"n": 10, "structure": "full", "impl": "fused"}, "impl"),
    ],
)
def test_bad_input(kwargs, match):
    with pytest.raises(ParameterError, match=match):
        HRA(**kwargs)


def test_bad_w0_shape():
    with pytest.raises(ParameterError, match="w0"):
        HRA(8)(torch.zeros(3, 9))


def test_vit_l_count_comes_from_the_placement_on_a_vit_l_shaped_encoder():
    """The claims row's 49,152 is counted by attaching the adapters to a ViT-L/14-shaped encoder (meta device), so a
    placement that adapted k as well, or every block twice, or a W_s of the wrong size would change it."""
    from companion.hyperet.vit import vit_l_adapter_params

    diag, encoder = vit_l_adapter_params("hra", structure="diagonal")
    assert diag == 24 * 2 * 1024 == 49_152 and abs(encoder - 304e6) / 304e6 < 0.01  # CLIP ViT-L/14's vision tower
    assert vit_l_adapter_params("hra", structure="block", block_size=4)[0] == 196_608
    assert vit_l_adapter_params("hra", structure="banded", bandwidth=2)[0] == 245_472
