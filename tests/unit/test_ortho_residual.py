"""Paper 10: the orthogonal residual update -- exact properties, peers (vit-pytorch, x-transformers), bad input."""

import importlib.util
import random
from pathlib import Path

import pytest
import torch
from torch import nn

from companion.core import ParameterError
from companion.ortho_residual import (
    LlamaConfig,
    LlamaDecoder,
    OrthogonalResidual,
    PreActBlock,
    TinyViT,
    block_methods,
    connection_stats,
    decompose,
    orthogonal_component,
    projection_coefficient,
    recording,
    residual_update,
    wrap_timm_block,
)
from companion.ortho_residual.experiments import perp_cosine, precision_table

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

shapes = st.tuples(st.integers(1, 4), st.integers(1, 7), st.integers(2, 48))


def _pair(shape, seed, dtype=torch.float32, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(shape, generator=g, dtype=torch.float64)).to(dtype), torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


@settings(max_examples=40, deadline=None)
@given(shapes, st.integers(0, 10**6), st.floats(0.1, 30.0))
def test_orthogonal_in_fp32(shape, seed, scale):
    x, f = _pair(shape, seed, scale=scale)
    p = orthogonal_component(x, f)
    # <x, f_perp> / (||x|| ||f||) (|cos(x, f_perp)| times ||f_perp|| / ||f|| <= 1, so an f almost parallel
    # to x, whose f_perp is pure rounding, does not make the check ill-conditioned); eps leaves an exact
    # eps / (||x||^2 + eps) of it (test_eps_residual_cosine_is_exact), allowed for here
    xd, pd = x.double(), p.double()
    cos = (xd * pd).sum(-1) / (xd.norm(dim=-1) * f.double().norm(dim=-1))
    assert (cos.abs() - 1e-6 / xd.pow(2).sum(-1)).max().item() < 1e-5


@settings(max_examples=40, deadline=None)
@given(shapes, st.integers(0, 10**6))
def test_pythagoras(shape, seed):
    x, f = _pair(shape, seed, torch.float64)
    # eps adds an exact 2 eps <x,f> / (||x||^2 + eps) to ||x_{n+1}||^2 (see test_eps_residual_cosine_is_exact);
    # the identity itself is checked with a negligible eps
    out = residual_update(x, f, mode="feature", eps=1e-12)
    p = orthogonal_component(x, f, eps=1e-12)
    lhs, rhs = out.pow(2).sum(-1), x.pow(2).sum(-1) + p.pow(2).sum(-1)
    assert torch.allclose(lhs, rhs, rtol=1e-5, atol=0)
    assert torch.allclose(decompose(x, f, eps=1e-12)[0] + p, f, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4), st.integers(2, 40), st.integers(0, 10**6))
def test_global_equals_feature_for_one_vector(b, d, seed):
    x, f = _pair((b, d), seed, torch.float64)
    assert torch.equal(orthogonal_component(x, f, mode="global"), orthogonal_component(x, f, mode="feature"))
    x3, f3 = _pair((b, 3, d), seed, torch.float64)  # tokens x features: G projects the flattened sample
    flat = orthogonal_component(x3.reshape(b, -1), f3.reshape(b, -1), mode="feature").reshape(b, 3, d)
    assert torch.allclose(orthogonal_component(x3, f3, mode="global"), flat, atol=1e-12)


def test_zero_stream_returns_f():
    f = torch.randn(3, 5, 8)
    for mode in ("feature", "global"):
        assert torch.equal(orthogonal_component(torch.zeros_like(f), f, mode=mode), f)
        assert torch.equal(residual_update(torch.zeros_like(f), f, mode=mode), f)


def test_eps_residual_cosine_is_exact():
    # <x, f_perp> = eps <x, f> / (||x||^2 + eps) exactly (float64)
    x, f = _pair((4, 6), 1, torch.float64, scale=1e-3)
    p = orthogonal_component(x, f, coef_dtype="float64", eps=1e-6)
    n2, dot = x.pow(2).sum(-1), (x * f).sum(-1)
    assert torch.allclose((x * p).sum(-1), 1e-6 * dot / (n2 + 1e-6), rtol=1e-9, atol=1e-18)


def test_channel_axis_for_conv_maps():
    x, f = _pair((2, 5, 3, 3), 2, torch.float64)
    p = orthogonal_component(x, f, dim=1, eps=1e-15)
    assert (x * p).sum(1).abs().max() < 1e-10
    manual = orthogonal_component(x.permute(0, 2, 3, 1), f.permute(0, 2, 3, 1), eps=1e-15).permute(0, 3, 1, 2)
    assert torch.allclose(p, manual, atol=1e-12)


def test_official_coefficient_dtype_is_bf16():
    x, f = _pair((4, 64), 3, torch.bfloat16)
    assert projection_coefficient(x, f, coef_dtype="input").dtype == torch.bfloat16
    assert projection_coefficient(x, f).dtype == torch.float32
    assert projection_coefficient(x, f, coef_dtype="float64").dtype == torch.float64
    rows = {r["precision"]: r["mean"] for r in precision_table(*_pair((256, 64), 4, scale=20.0))}
    assert rows["fp64"] < 1e-9 and rows["fp32"] < 1e-5 and rows["bf16"] > 10 * rows["fp32"]


def test_linear_bit_for_bit_and_prob_zero():
    assert block_methods(6, prob=0.0) == ["linear"] * 6
    assert block_methods(6, prob=1.0, mode="global") == ["global"] * 6
    assert block_methods(4, pattern=[1, 3]) == ["linear", "feature", "linear", "feature"]
    rng = random.Random(5)
    assert block_methods(8, prob=0.5, seed=5) == ["feature" if rng.random() < 0.5 else "linear" for _ in range(8)]
    torch.manual_seed(0)
    a = TinyViT(methods=block_methods(6, prob=0.0))
    torch.manual_seed(0)
    b = TinyViT(methods="linear")
    x = torch.randn(3, 1, 8, 8)
    assert torch.equal(a(x), b(x))
    # a linear add is exactly x + f
    xs, fs = _pair((2, 5, 8), 6)
    assert torch.equal(OrthogonalResidual("linear")(xs, fs), xs + fs)


def _load_vit_pytorch():
    """vit-pytorch's module file, loaded directly (its package __init__ imports torchvision)."""
    spec = importlib.util.find_spec("vit_pytorch")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("vit-pytorch not installed")
    pytest.importorskip("einops")
    path = Path(list(spec.submodule_search_locations)[0]) / "simple_vit_orthog_residual_update.py"
    if not path.exists():
        pytest.skip("this vit-pytorch has no simple_vit_orthog_residual_update")
    s = importlib.util.spec_from_file_location("_vit_orthog", path)
    mod = importlib.util.module_from_spec(s)
    s.loader.exec_module(mod)
    return mod


def test_matches_vit_pytorch_in_fp64():
    mod = _load_vit_pytorch()
    lin = nn.Linear(16, 16).double()
    peer = mod.OrthogonalResidualUpdate(lin, dim=16, double_precision=True)
    ours = OrthogonalResidual("feature", coef_dtype="float64", eps=1e-300)
    for seed in range(5):
        x = _pair((3, 7, 16), seed, torch.float64)[0]
        with torch.no_grad():
            assert torch.allclose(peer(x), ours(x, lin(x)), atol=1e-6, rtol=0)
            _, o = peer.orthog_proj(lin(x), x)
            assert torch.allclose(o, orthogonal_component(x, lin(x), coef_dtype="float64"), atol=1e-6)


def test_global_matches_x_transformers():
    xt = pytest.importorskip("x_transformers.x_transformers")
    for seed in range(5):
        x, f = _pair((3, 5, 12), seed, torch.float64)
        assert torch.allclose(xt.orthog_project(f, x), orthogonal_component(x, f, mode="global", coef_dtype="float64"),
                              atol=1e-6)


class _FakeTimmBlock(nn.Module):
    """The attributes and forward of ``timm.models.vision_transformer.Block`` (timm not required)."""

    def __init__(self, d=16):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.ls1 = self.ls2 = self.drop_path1 = self.drop_path2 = nn.Identity()

    def forward(self, x):
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x))))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


def _timm_blocks():
    blocks = [_FakeTimmBlock()]
    try:
        from timm.models.vision_transformer import Block
        blocks.append(Block(16, 4))
    except ImportError:
        pass
    return blocks


@pytest.mark.parametrize("block", _timm_blocks(), ids=lambda b: type(b).__name__)
def test_timm_wrapper(block):
    block.eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        assert torch.allclose(wrap_timm_block(block, "linear")(x), block(x), atol=1e-6)
        w = wrap_timm_block(block, "feature")
        with recording(w) as conns:
            w(x)
    assert len(conns) == 2 and all(c.stats[0]["cos_x_update"] < 1e-5 for c in conns)
    with pytest.raises(ParameterError, match="block"):
        wrap_timm_block(nn.Linear(3, 3))


def test_models_record_every_add_and_never_shrink():
    torch.manual_seed(0)
    vit = TinyViT(methods="feature")
    with torch.no_grad(), recording(vit) as conns:
        vit(torch.randn(4, 1, 8, 8))
    assert len(conns) == 12
    assert all(c.stats[0]["growth_min"] > -1e-5 and c.stats[0]["shrink_share"] == 0 for c in conns)
    lm = LlamaDecoder(LlamaConfig(d=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn=64, max_len=16), methods="global")
    with torch.no_grad(), recording(lm) as conns:
        lm(torch.randint(0, 256, (2, 16)))
    assert len(conns) == 4 and all(c.stats[0]["cos_x_update"] < 1e-5 for c in conns)
    blk = PreActBlock(3, 6, 2, "feature", eps=1e-12)  # small shortcut norms: keep eps out of the check
    with torch.no_grad(), recording(blk) as conns:
        y = blk(torch.randn(2, 3, 8, 8))
    assert y.shape == (2, 6, 4, 4) and conns[0].stats[0]["cos_x_update"] < 1e-4


def test_stats_match_definitions():
    x, f = _pair((2, 3, 8), 9)
    s = connection_stats(x, f)
    par, perp = decompose(x, f)
    x2 = x.pow(2).sum(-1)
    assert s["rho_par"] == pytest.approx((par.pow(2).sum(-1) / x2).mean().item(), rel=1e-5)
    assert s["rho_ortho"] == pytest.approx((perp.pow(2).sum(-1) / x2).mean().item(), rel=1e-5)
    assert s["cos_x_out"] == pytest.approx(torch.nn.functional.cosine_similarity(x, f, dim=-1).mean().item(), abs=1e-6)
    assert perp_cosine(x, f, precision="fp64")["max"] < 1e-6


@pytest.mark.parametrize("call, name", [
    (lambda x, f: orthogonal_component(x, f, eps=0.0), "eps"),
    (lambda x, f: orthogonal_component(x, f, eps=-1e-6), "eps"),
    (lambda x, f: orthogonal_component(x, f, mode="cosine"), "mode"),
    (lambda x, f: orthogonal_component(x, f, dim=3), "dim"),
    (lambda x, f: orthogonal_component(x, f[..., :3]), "f"),
    (lambda x, f: orthogonal_component(x, f, coef_dtype="float16"), "coef_dtype"),
    (lambda x, f: block_methods(4, prob=1.5), "prob"),
    (lambda x, f: block_methods(4, prob=-0.1), "prob"),
    (lambda x, f: block_methods(4, pattern=[0, 4]), "pattern"),
    (lambda x, f: OrthogonalResidual("feature", eps=0), "eps"),
    (lambda x, f: OrthogonalResidual("sideways"), "mode"),
    (lambda x, f: OrthogonalResidual(coef_dtype="half"), "coef_dtype"),
    (lambda x, f: TinyViT(methods=["feature"] * 3, depth=6), "methods"),
])
def test_bad_input(call, name):
    x, f = _pair((2, 3, 4), 0)
    with pytest.raises(ParameterError, match=rf"parameter {name}"):
        call(x, f)
