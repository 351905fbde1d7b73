"""Paper 10: the orthogonal residual update -- exact properties, peers (vit-pytorch, x-transformers), bad input."""

import importlib.util
import math
import random
import time
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


# ------------------------------------------------------------------ the GPU study's stages, on the CPU
def _study_models(stream_dtype):
    """Both arms of the bf16 study from the same initial weights, built as the GPU study builds them."""
    from companion.ortho_residual.study import same_start

    cfg = LlamaConfig(vocab=256, d=48, n_layers=2, n_heads=3, n_kv_heads=1, ffn=96, max_len=33)
    return same_start(cfg, 0, {c: {"methods": "feature", "coef_dtype": c, "stream_dtype": stream_dtype}
                               for c in ("float32", "input")}, "cpu")


@pytest.mark.parametrize("autocast", [True, False])
def test_coef_dtype_modes_differ_with_a_bf16_stream(autocast):
    """With a bf16 residual stream the official bf16 coefficient and the fp32 one give different models
    (under bf16 autocast, as on the GPU, and without it); with the default fp32 stream under autocast the two
    arms compute the same thing, which is what made the first recorded study void."""
    from companion.ortho_residual.scale import GPU_PROFILE

    ids = torch.randint(0, 256, (4, 33), generator=torch.Generator().manual_seed(1))
    amp = torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast)
    outs, dtypes = {}, {}
    for coef, model in _study_models(GPU_PROFILE["bf16_stream"]).items():
        with torch.no_grad(), amp, recording(model, keep_inputs=True) as conns:
            outs[coef] = model(ids).float()
        dtypes[coef] = {c.inputs[0][0].dtype for c in conns} | {c.inputs[0][1].dtype for c in conns}
    assert dtypes == {"float32": {torch.bfloat16}, "input": {torch.bfloat16}}
    assert (outs["float32"] - outs["input"]).abs().max() > 1e-3
    if autocast:  # the old study's setting: fp32 stream under autocast, identical arms
        with torch.no_grad(), amp:
            same = {coef: m(ids).float() for coef, m in _study_models("float32").items()}
        assert torch.equal(same["float32"], same["input"])


def test_stream_dtype_default_unchanged_and_checked():
    cfg = LlamaConfig(vocab=256, d=16, n_layers=1, n_heads=2, n_kv_heads=2, ffn=32, max_len=9)
    torch.manual_seed(0)
    a = LlamaDecoder(cfg)
    b = LlamaDecoder(cfg, stream_dtype="float32")
    b.load_state_dict(a.state_dict())
    ids = torch.randint(0, 256, (2, 9))
    with torch.no_grad():
        assert torch.equal(a(ids), b(ids))
    with pytest.raises(ParameterError, match="stream_dtype"):
        LlamaDecoder(cfg, stream_dtype="float16")


def _ctx(left_s=math.inf, **profile):
    """A stage context on the smoke profile (with ``profile`` changes) that has ``left_s`` seconds."""
    from companion.core.stages import StageContext
    from companion.ortho_residual.scale import SMOKE_PROFILE

    return StageContext(profile={**SMOKE_PROFILE, **profile}, device="cpu", log=lambda *a: None, results={},
                        until=time.perf_counter() + left_s)


def test_flattened_known_cases():
    from companion.ortho_residual.study import flattened

    assert not flattened([3.0, 2.0], 2, 0.01)  # not enough evaluations for the window yet
    assert flattened([3.0, 2.0, 1.995], 1, 0.01)  # 0.25 % better than one evaluation earlier
    assert not flattened([3.0, 2.0, 1.97], 1, 0.01)  # 1.5 % better
    assert not flattened([2.0, 1.99, 1.97], 2, 0.01)  # 1.5 % better than two evaluations earlier
    assert flattened([2.0, 2.1, 2.2], 1, 0.01)  # worse counts as flat


def _lm_run(**kw):
    from companion.ortho_residual.study import _config, _text, same_start, train_lm

    ctx = _ctx()
    p = ctx.profile
    model = same_start(_config(p["lm_model"], p["seq_len"]), 0, {"linear": {"methods": "linear"}}, "cpu")["linear"]
    return train_lm(model, _text(ctx), batch=2, seq_len=p["seq_len"], lr=1e-3, seed=1, device=torch.device("cpu"),
                    eval_every=2, val_batches=1, log=lambda *a: None, **kw)


def test_train_lm_stops_at_steps_flat_or_time():
    run = _lm_run(steps=5)
    assert run["stop"] == "steps" and run["steps"] == 5 and len(run["loss"]) == 5 and run["val_steps"] == [2, 4, 5]
    flat = _lm_run(steps=50, flat=(1, 10.0))  # any change under 1000 % is flat: stops at the second evaluation
    assert flat["stop"] == "flat" and flat["steps"] == 4 and flat["val_steps"] == [2, 4]
    timed = _lm_run(steps=50, max_seconds=0.0)  # past the time at the first evaluation
    assert timed["stop"] == "time" and timed["steps"] == 2


def test_lm_seeds_train_both_rules_to_the_pilots_steps():
    from companion.core.stages import StageContext
    from companion.ortho_residual.study import RULES, lm_seed

    ctx = _ctx(seed=4)
    first = lm_seed(0, ctx)
    assert first["seed"] == 4 and first["stop"] in ("flat", "steps", "time")
    assert first["linear"]["steps"] == first["feature"]["steps"] == first["steps"] <= ctx.profile["max_steps"]
    assert first["linear"]["val_steps"][-1] == first["steps"] and first["linear"]["val_loss"] == first["linear"]["val_curve"][-1]
    ctx.results["lm_seed0"] = {**first, "steps": 3}  # a later seed uses lm_seed0's step count, whatever it is
    later = lm_seed(2, ctx)
    assert later["seed"] == 6 and later["steps"] == 3 and all(later[m]["steps"] == 3 for m in RULES)
    assert later["linear"]["curve_loss"] != later["feature"]["curve_loss"]
    alone = StageContext(profile=ctx.profile, device="cpu", log=lambda *a: None, results={})
    with pytest.raises(RuntimeError, match="lm_seed0"):
        lm_seed(1, alone)


def test_bf16_seed_runs_two_different_arms_on_a_bf16_stream():
    from companion.ortho_residual.study import COEF_ARMS, bf16_seed

    ctx = _ctx(seed=3)
    out = bf16_seed(1, ctx)
    assert out["seed"] == 4 and out["stream_dtype"] == "bfloat16"
    assert all(out[c]["steps"] == ctx.profile["bf16_steps"] for c in COEF_ARMS)
    assert out["loss_diff_max"] > 0  # the two arms are not numerically the same
    # the bf16 coefficient leaves a larger parallel residue than the fp32 one on the same kind of stream
    assert out["input"]["cos_perp_max"] > out["float32"]["cos_perp_max"]


def test_vit_digits_stage_and_deadline():
    from companion.ortho_residual.study import RULES, vit_digits

    out = vit_digits(_ctx())
    assert [len(out["runs"][m]) for m in RULES] == [2, 2] and out["n_train"] + out["n_test"] == 1797
    assert all(0 <= r["test_acc"] <= 1 for m in RULES for r in out["runs"][m])
    short = vit_digits(_ctx(left_s=-1.0))  # the first seed always runs; the next only while time is left
    assert [len(short["runs"][m]) for m in RULES] == [1, 1]


def test_digits_upsampled():
    from companion.ortho_residual.experiments import digits_data

    small, big = digits_data(0), digits_data(0, image_size=32)
    assert big["x_train"].shape[1:] == (1, 32, 32) and torch.equal(small["y_test"], big["y_test"])
    assert abs(big["x_train"].mean()) < 0.05  # standardised after the upsampling
    with pytest.raises(ParameterError, match="image_size"):
        digits_data(0, image_size=4)


@pytest.mark.parametrize("stage, key, value", [
    ("bf16_seed", "bf16_stream", "float16"),
    ("lm_seed", "flat_window", 3),
])
def test_bad_profile_values(stage, key, value):
    from companion.ortho_residual import study

    with pytest.raises(ParameterError, match=rf"parameter {key}="):
        getattr(study, stage)(0, _ctx(**{key: value}))
    with pytest.raises(ParameterError, match="parameter compile_backend="):
        study.step_time_compiled(_ctx(compile_backend="tvm"))


def test_step_time_stages_share_their_models():
    from companion.ortho_residual.study import RULES, step_time_eager

    ctx = _ctx()
    t = step_time_eager(ctx)
    models = ctx.shared["timing_models"]
    assert set(models) == set(RULES) and t["overhead_pct"] == round(100 * (t["feature"] / t["linear"] - 1), 2)
    step_time_eager(ctx)
    assert ctx.shared["timing_models"] is models


def test_spikes():
    from companion.ortho_residual.study import SPIKE_FACTOR, SPIKE_WINDOW, spikes

    flat = [1.0] * (SPIKE_WINDOW + 5)
    assert spikes(flat) == 0
    assert spikes(flat[:SPIKE_WINDOW] + [1.01 * SPIKE_FACTOR] + flat[:4]) == 1
    assert spikes(flat[:SPIKE_WINDOW] + [0.99 * SPIKE_FACTOR] + flat[:4]) == 0
    assert spikes([1.0, 100.0]) == 0  # no window before it yet


def test_precision_check():
    from companion.ortho_residual.experiments import BF16_FACTOR, precision_check

    tab = lambda bf: [{"precision": "fp64", "mean": 1e-12, "max": 1e-12}, {"precision": "fp32", "mean": 1e-8, "max": 1e-8},  # noqa: E731
                      {"precision": "bf16", "mean": bf, "max": bf}, {"precision": "bf16_fp32coef", "mean": 1e-5, "max": 1e-5}]
    assert precision_check(tab(1.1 * BF16_FACTOR * 1e-8))["ok"]
    assert not precision_check(tab(0.9 * BF16_FACTOR * 1e-8))["ok"]
    assert "fp32 1.0e-08" in precision_check(tab(1e-3))["text"]


def test_gpu_figure_per_seed_and_absent():
    from companion.ortho_residual.figures import gpu_figure

    assert gpu_figure(None).layout.title.text == "GPU study: not recorded"
    assert gpu_figure({"training": {}}).layout.title.text == "GPU study: not recorded"  # the earlier layout
    arm = lambda v: {"val_steps": [100, 200], "val_curve": [2.0, v], "val_loss": v}  # noqa: E731
    gpu = {"device": "H200", "runs": [{"stages": ["lm_seed0", "lm_seed1"], "ended": "today"}],
           **{f"lm_seed{k}": {"seed": k, "steps": 200, "linear": arm(1.5), "feature": arm(1.4)} for k in range(2)}}
    fig = gpu_figure(gpu)
    assert "H200, today" in fig.layout.title.text
    curves = [t for t in fig.data if t.mode == "lines"]
    assert len(curves) == 4 and [t.name for t in curves[:2]] == ["linear, seed 0", "feature, seed 0"]
