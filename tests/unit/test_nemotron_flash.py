"""companion.nemotron_flash: operators against their recurrences and fla's references, the cached decoder,
weight normalisation, the depth-width budget and law, the search's mutation, the harness and the explorer."""

import math
import random

import plotly.graph_objects as go
import pytest
import torch
import torch.nn.functional as F

from companion.core import ParameterError
from companion.nemotron_flash import PAPER
from companion.nemotron_flash.depth_width import (
    DEPTH_WIDTH_GRID,
    check_on_budget,
    fit_scaling_law,
    llama_config,
    non_embedding_params,
    scaling_law,
    width_for_depth,
)
from companion.nemotron_flash.experiments import fla_naive, operator_equivalence
from companion.nemotron_flash.explorer import ExplorerData, explorer_controls, explorer_view
from companion.nemotron_flash.frontier import composed_ms, pareto_front, stage_layer_types
from companion.nemotron_flash.latency import decode_seconds, decode_step_ms, make_decode_step
from companion.nemotron_flash.model import HybridConfig, HybridLM
from companion.nemotron_flash.operators import (
    attention,
    delta_rule,
    delta_rule_chunked,
    delta_rule_recurrent,
    scalar_decay_chunked,
    scalar_decay_recurrent,
    window_mask,
)
from companion.nemotron_flash.search import (
    FACTORS,
    NF_PATTERN,
    Genome,
    Stage,
    aging_evolution,
    differing_factors,
    mutate,
    random_genome,
)
from companion.nemotron_flash.weightnorm import WeightNorm, max_norm_error, weight_roles


def test_identity():
    assert PAPER.notebook == "15_nemotron_flash"


def _inputs(B=2, T=29, H=2, K=8, V=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=g, dtype=torch.float64)
    k = F.normalize(torch.randn(B, T, H, K, generator=g, dtype=torch.float64), dim=-1)
    v = torch.randn(B, T, H, V, generator=g, dtype=torch.float64)
    beta = torch.rand(B, T, H, generator=g, dtype=torch.float64)
    gl = -0.5 * torch.rand(B, T, H, generator=g, dtype=torch.float64)
    S0 = torch.randn(B, H, K, V, generator=g, dtype=torch.float64)
    return q, k, v, beta, gl, S0


# ------------------------------------------------------------------------------------------ operators
def test_delta_rule_step_is_the_papers_equation():
    """S_t = α S (I − β k kᵀ) + β v kᵀ in the paper's V×K orientation (ours is its transpose)."""
    q, k, v, beta, g, S0 = _inputs(B=1, T=1, H=1)
    o, S = delta_rule_recurrent(q, k, v, beta, g, initial_state=S0)
    P = S0[0, 0].T.float()  # V x K
    kk, vv, b, a = k[0, 0, 0].float(), v[0, 0, 0].float(), beta[0, 0, 0].float(), g[0, 0, 0].exp().float()
    want = a * P @ (torch.eye(8) - b * torch.outer(kk, kk)) + b * torch.outer(vv, kk)
    assert torch.allclose(S[0, 0].T, want, atol=1e-6)
    assert torch.allclose(o[0, 0, 0], want @ q[0, 0, 0].float() * 8 ** -0.5, atol=1e-6)


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("chunk", [1, 5, 8, 64])
def test_delta_rule_chunked_equals_recurrent(gated, chunk):
    q, k, v, beta, g, S0 = _inputs()
    g = g if gated else None
    o1, s1 = delta_rule_recurrent(q, k, v, beta, g, initial_state=S0)
    o2, s2 = delta_rule_chunked(q, k, v, beta, g, initial_state=S0, chunk_size=chunk)
    assert (o1 - o2).abs().max() < 1e-5 and (s1 - s2).abs().max() < 1e-5


@pytest.mark.parametrize("chunk", [3, 16])
def test_scalar_decay_chunked_equals_recurrent(chunk):
    q, k, v, _, g, S0 = _inputs()
    o1, s1 = scalar_decay_recurrent(q, k, v, g, initial_state=S0, scale=1.0)
    o2, s2 = scalar_decay_chunked(q, k, v, g, initial_state=S0, scale=1.0, chunk_size=chunk)
    assert (o1 - o2).abs().max() < 1e-5 and (s1 - s2).abs().max() < 1e-5


@pytest.mark.skipif(fla_naive() is None, reason="fla-core not installed")
def test_ours_match_fla_naive_references():
    res = operator_equivalence(T=37, chunk_size=8, seed=1)["ops"]
    for name in ("deltanet", "gated_deltanet", "mamba2_ssd"):
        assert res[name]["vs_fla"] < 1e-5, (name, res[name])
        assert res[name]["chunked_vs_recurrent"] < 1e-5


@pytest.mark.skipif(fla_naive() is None, reason="fla-core not installed")
def test_chunked_matches_fla_naive_chunk_forms():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("fla")
    path = Path(list(spec.submodule_search_locations)[0]) / "ops" / "gated_delta_rule" / "naive.py"
    ms = importlib.util.spec_from_file_location("_nf_test_gdn", path)
    mod = importlib.util.module_from_spec(ms)
    ms.loader.exec_module(mod)
    q, k, v, beta, g, S0 = _inputs(T=40)
    o_ref, s_ref = mod.naive_chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=16, initial_state=S0,
                                                    output_final_state=True)
    o, s = delta_rule_chunked(q, k, v, beta, g, initial_state=S0, chunk_size=16)
    assert (o - o_ref).abs().max() < 1e-5 and (s - s_ref).abs().max() < 1e-5


def test_delta_rule_dispatch_and_bad_input():
    q, k, v, beta, g, _ = _inputs()
    o, _ = delta_rule(q.float(), k.float(), v.float(), beta.float(), impl="recurrent")
    o2, _ = delta_rule(q.float(), k.float(), v.float(), beta.float(), impl="chunked")
    assert torch.allclose(o, o2, atol=1e-5)
    with pytest.raises(ParameterError, match="impl"):
        delta_rule(q, k, v, beta, impl="fla")  # CPU tensors
    with pytest.raises(ParameterError, match="impl"):
        delta_rule(q, k, v, beta, impl="triton")
    with pytest.raises(ParameterError, match="chunk_size"):
        delta_rule_chunked(q, k, v, beta, chunk_size=0)
    with pytest.raises(ValueError, match="beta"):
        delta_rule_chunked(q, k, v, beta[:, :3])


def test_attention_window_and_gqa():
    m = window_mask(4, 4, window=2)
    assert m.tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 6, h, 4, generator=g) for h in (4, 2, 2))
    ref = attention(q, k.repeat_interleave(2, 2), v.repeat_interleave(2, 2), window=3)
    assert torch.allclose(attention(q, k, v, window=3), ref, atol=1e-6)
    with pytest.raises(ParameterError, match="window"):
        attention(q, k, v, window=0)


# ---------------------------------------------------------------------------------------------- model
def _small(**kw):
    base = dict(vocab_size=40, hidden_size=32, layer_types=("deltanet", "f", "gdn", "m2", "a", "f"), kq_head_dim=8,
                v_head_dim=8, mamba_headdim=8, mamba_d_state=8, chunk_size=4)
    base.update(kw)
    return HybridConfig(**base)


@pytest.mark.parametrize("kw", [dict(), dict(window=3, num_memory_tokens=2), dict(kq_norm=True, num_kv_heads=2,
                                                                                   logits_norm=True)])
def test_cached_decoding_equals_full_forward(kw):
    torch.manual_seed(0)
    cfg = _small(**kw)
    m = HybridLM(cfg).double().eval()
    ids = torch.randint(0, 40, (2, 10))
    with torch.no_grad():
        full = m(ids)
        cache = m.init_cache(2, 10 + cfg.num_memory_tokens, dtype=torch.float64)
        out = [m(ids[:, :4], cache)] + [m(ids[:, t:t + 1], cache) for t in range(4, 10)]
    assert int(cache.pos) == 10 + cfg.num_memory_tokens
    assert (torch.cat(out, 1) - full).abs().max() < 1e-5


def test_meta_tokens_leave_length_and_change_output():
    torch.manual_seed(0)
    ids = torch.randint(0, 40, (1, 7))
    plain = HybridLM(_small())
    torch.manual_seed(0)
    meta = HybridLM(_small(num_memory_tokens=5))
    assert plain(ids).shape == meta(ids).shape == (1, 7, 40)
    assert meta.memory_tokens.shape == (5, 32)


def test_logits_norm_divides_by_head_row_norms():
    torch.manual_seed(0)
    m = HybridLM(_small(logits_norm=True))
    ids = torch.randint(0, 40, (1, 5))
    out = m(ids)
    m.cfg.logits_norm = False
    raw = m(ids)
    assert torch.allclose(out, raw / m.lm_head.weight.norm(dim=1), atol=1e-6)


@pytest.mark.parametrize("bad,match", [
    (dict(layer_types=("deltanet", "x")), "layer_types"),
    (dict(kq_head_dim=7), "kq_head_dim"),
    (dict(window=0), "window"),
    (dict(num_memory_tokens=-1), "num_memory_tokens"),
    (dict(chunk_size=0), "chunk_size"),
    (dict(mamba_headdim=5), "mamba_headdim"),
    (dict(num_kv_heads=3), "num_kv_heads"),
])
def test_config_bad_input(bad, match):
    with pytest.raises(ParameterError, match=match):
        _small(**bad)


def test_unknown_layer_type_lists_known_ones():
    with pytest.raises(ParameterError) as err:
        _small(layer_types=("mlp",))
    assert "'deltanet'" in str(err.value) and "'m2'" in str(err.value)
    assert _small(layer_types=("m", "f")).layer_types == ("m2", "f")  # the released alias


# --------------------------------------------------------------------------------------- weight norm
def test_weight_norm_roles_and_unit_norms_after_a_step():
    torch.manual_seed(0)
    m = HybridLM(_small(logits_norm=True))
    roles = weight_roles(m)
    assert roles["layers.4.op.q"][1] == 1 and roles["layers.4.op.o"][1] == 0  # reads: rows, writes: columns
    assert roles["layers.1.op.down"][1] == 0 and roles["lm_head"][1] == 1 and "embed" not in roles
    assert "embed" in weight_roles(m, exempt="none") and "lm_head" not in weight_roles(m, exempt="embedding_and_head")
    wn = WeightNorm(m)
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    m.loss(torch.randint(0, 40, (2, 9))).backward()
    wn.step(opt)
    assert wn.error() < 1e-6
    assert float(m.layers[4].op.o.weight.detach().norm(dim=0).sub(1).abs().max()) < 1e-6


def test_weight_norm_before_step_drifts():
    torch.manual_seed(0)
    m = HybridLM(_small())
    wn = WeightNorm(m, placement="before_step")
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    m.loss(torch.randint(0, 40, (2, 9))).backward()
    wn.step(opt)
    assert max_norm_error(wn.roles) > 1e-4
    with pytest.raises(ParameterError, match="placement"):
        WeightNorm(m, placement="sometimes")


# --------------------------------------------------------------------------------------- depth-width
def test_grid_is_on_budget_and_off_budget_is_refused():
    budget = non_embedding_params(llama_config(2, 256))
    for depth, width in DEPTH_WIDTH_GRID:
        check_on_budget(depth, width, budget)
    with pytest.raises(ParameterError, match="budget"):
        check_on_budget(16, 256, budget)
    w = width_for_depth(8, budget)
    assert abs(non_embedding_params(llama_config(8, w)) / budget - 1) < 0.05


def test_scaling_law_recovers_a_known_law():
    true = dict(L0=1.0, a=0.8, alpha=0.6, b=4.0, beta=0.7, c=30.0, gamma=0.35)
    runs = [{"depth": D, "width": W, "tokens": float(N),
             "loss": float(scaling_law((D, W, N), *true.values()))}
            for D in (1, 2, 4, 8) for W in (32, 64, 128) for N in (1e4, 3e4, 1e5, 3e5)]
    fit = fit_scaling_law(runs)
    assert fit["test_ppl_rel_error_max"] < 1e-3 and fit["n_test"] == 12
    with pytest.raises(ParameterError, match="holdout"):
        fit_scaling_law(runs, holdout="random")


# -------------------------------------------------------------------------------------------- search
def test_child_differs_from_parent_in_one_factor():
    rng = random.Random(0)
    for _ in range(200):
        g = random_genome(rng)
        assert len(differing_factors(g, mutate(g, rng))) == 1
    assert NF_PATTERN.layer_types()[:4] == ("deltanet", "f", "m2", "f")


def test_aging_evolution_ages_out_and_respects_the_limit():
    calls = []

    def fitness(g):
        calls.append(g)
        return float(len(g.layer_types()))  # fewer layers = fitter

    res = aging_evolution(fitness, lambda g: float(len(g.layer_types())), population=8, sample=3, cycles=10,
                          latency_limit=14, seed=0)
    assert len(res["history"]) == 18 and len(res["population"]) == 8
    assert [m["cycle"] for m in res["population"]] == list(range(3, 11))  # the oldest died
    assert res["best"]["latency_ms"] <= 14 and len(calls) == res["n_evaluated"] - sum(
        1 for g in {m["genome"] for m in res["history"]} if len(g.layer_types()) > 14)
    assert res["best_per_cycle"] == sorted(res["best_per_cycle"], reverse=True)
    with pytest.raises(ParameterError, match="sample"):
        aging_evolution(fitness, fitness, population=4, sample=5)
    with pytest.raises(ParameterError, match="mix"):
        Stage(mix=("rwkv",))


# ----------------------------------------------------------------------------------- harness, explorer
def test_harness_on_cpu_and_refuses_gpu_without_one():
    torch.manual_seed(0)
    m = HybridLM(_small()).eval()
    r = decode_step_ms(m, batch=2, context=6, cpu_reps=1)
    assert r["ms"] > 0 and r["mode"] == "eager"
    d = decode_seconds(m, n_tokens=10, points=2, cpu_reps=1)
    assert d["contexts"] == [0, 9] and d["seconds"] > 0
    if not torch.cuda.is_available():
        with pytest.raises(ParameterError, match="device"):
            make_decode_step(m, batch=1, context=4, device="cuda")


def test_pareto_front_and_composition():
    assert pareto_front([1, 2, 3, 4], [5, 3, 4, 1]) == [0, 1, 3]
    assert pareto_front([1, 2, 3], [1, 2, 3], maximize_x=True) == [2, 1, 0]
    table = {"rows": [{"op": o, "width": 8, "context": 1, "batch": 1, "ms": ms} for o, ms in
                      (("a", 2.0), ("f", 1.0), ("deltanet", 0.5), ("m2", 0.25))],
             "head": [{"width": 8, "batch": 1, "ms": 0.1}]}
    lt = stage_layer_types(3, "a", "deltanet", "m2")
    assert lt == ("a", "f", "deltanet", "f", "m2", "f")
    assert composed_ms(table, lt, 8, 1, 1) == pytest.approx(0.1 + 2 + 0.5 + 0.25 + 3)
    with pytest.raises(ParameterError, match="depth"):
        stage_layer_types(2, "a", "a", "a")


def _explorer_data(h200=True):
    from companion.nemotron_flash.frontier import EXPLORER_BATCHES, EXPLORER_CONTEXTS, TIMED_OPS

    runs = []
    for d, w in ((3, 16), (6, 8), (12, 8)):
        for pat in (("a", "a", "a"), ("deltanet", "a", "m2")):
            runs.append({"budget": 100_000, "depth": d, "width": w, "early": pat[0], "middle": pat[1], "late": pat[2],
                         "params": 1000, "steps": 3, "loss": 3.0 - 0.1 * d + 0.05 * (pat[0] == "a")})
    rows = [{"op": o, "width": w, "context": c, "batch": b, "ms": (1 + c / 1000 if o == "a" else 1.0)}
            for o in TIMED_OPS for w in (8, 16) for c in EXPLORER_CONTEXTS for b in EXPLORER_BATCHES]
    table = {"rows": rows, "head": [{"width": w, "batch": b, "ms": 0.1} for w in (8, 16) for b in EXPLORER_BATCHES]}
    return ExplorerData(runs=runs, tables={"cpu": table, "h200": table if h200 else None})


def test_explorer_view_is_pure_and_controls_match():
    data = _explorer_data()
    fig, readout = explorer_view(data, depth=6, early="deltanet", middle="a", late="m2")
    again, _ = explorer_view(data, depth=6, early="deltanet", middle="a", late="m2")
    assert isinstance(fig, go.Figure) and fig.to_json() == again.to_json()
    assert "Pareto front" in readout and "depth 6" in readout
    names = {t.name for t in fig.data}
    assert {"Pareto front", "chosen", "Attention", "DeltaNet", "Mamba2", "FFN"} <= names
    controls = explorer_controls(data)
    assert set(controls) == {"budget", "depth", "early", "middle", "late", "context", "batch", "device", "metric"}
    explorer_view(data, **{k: c.value for k, c in controls.items()})
    _, r2 = explorer_view(data, metric="throughput", batch=16, depth=3, early="a", middle="a", late="a")
    assert "tokens/s" in r2
    _, r3 = explorer_view(data, depth=3, early="m2", middle="m2", late="m2")
    assert "no cached run" in r3
    with pytest.raises(ParameterError):
        explorer_view(data, context=77)
    with pytest.raises(ParameterError):
        explorer_view(data, early="rwkv")


def test_explorer_says_when_h200_not_recorded():
    fig, readout = explorer_view(_explorer_data(h200=False), device="h200")
    assert "not recorded yet" in readout and any("not recorded yet" in a.text for a in fig.layout.annotations)


def test_genome_bad_input():
    with pytest.raises(ParameterError, match="stages"):
        Genome((Stage(),))
    assert len(FACTORS) == 9 and math.isfinite(len(NF_PATTERN.label()))


def test_load_released_fails_clearly_offline(tmp_path):
    from companion.models.loading import ModelUnavailableError
    from companion.nemotron_flash import load_released

    with pytest.raises(ModelUnavailableError, match="does not exist"):
        load_released(str(tmp_path / "missing"))
    with pytest.raises(ModelUnavailableError, match="offline"):
        load_released(str(tmp_path))  # an empty folder: no config
    with pytest.raises(ParameterError):
        load_released("")


def test_load_released_loads_a_local_folder_and_hf_generate_is_timed(tmp_path):
    from companion.nemotron_flash import load_released
    from companion.nemotron_flash.scale import SMOKE_PROFILE
    from companion.nemotron_flash.study import hf_generate_ms, hf_qwen3, shape_config

    torch.manual_seed(0)
    hf_qwen3(shape_config(SMOKE_PROFILE["transformer"])).save_pretrained(tmp_path)
    model = load_released(str(tmp_path))
    assert model.config.num_hidden_layers == 4
    assert math.isfinite(hf_generate_ms(model, prompt=4, new_tokens=4, device=torch.device("cpu")))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="fla's Triton kernels need CUDA")
@pytest.mark.parametrize("gated", [False, True])
def test_ours_match_fla_triton_kernels_on_gpu(gated):  # pragma: no cover - GPU only
    pytest.importorskip("fla")
    q, k, v, beta, g, S0 = (x.float().cuda() for x in _inputs(B=1, T=200, H=2, K=64, V=64))
    o_ref, s_ref = delta_rule(q, k, v, beta, g if gated else None, initial_state=S0, impl="chunked")
    o, s = delta_rule(*(x.bfloat16() for x in (q, k, v, beta)), g if gated else None, initial_state=S0, impl="fla")
    assert (o.float() - o_ref).abs().max() / o_ref.abs().max() < 3e-2


def test_study_shapes_and_the_fla_stage_on_a_cpu():
    """The GPU study's models come from the profile's shapes (blocks cycling through the pattern); a wrong shape
    fails with a ParameterError naming the field; the fla stage records that it needs CUDA."""
    from companion.core.stages import StageContext
    from companion.nemotron_flash.scale import GPU_PROFILE, SMOKE_PROFILE
    from companion.nemotron_flash.study import fla_vs_ours, shape_config

    nf = shape_config(GPU_PROFILE["hybrid"])
    assert "".join(t[0] for t in nf.layer_types) == "dfmfafmf" * 6 and nf.hidden_size == 2048
    qwen = shape_config(GPU_PROFILE["transformer"])
    assert qwen.layer_types == ("a", "f") * 28 and qwen.num_heads == 16 and qwen.num_kv_heads == 8
    with pytest.raises(ParameterError, match="num_kv_heads"):
        shape_config({**SMOKE_PROFILE["transformer"], "num_kv_heads": 3})
    ctx = StageContext(profile=SMOKE_PROFILE, device="cpu", log=lambda *a: None, results={})
    assert fla_vs_ours(ctx) == {"skipped": "fla's Triton kernels need CUDA"}
