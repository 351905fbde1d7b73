"""SeerAttention's two GPU studies (paper 01): the planted decoder, the stage bodies on tiny inputs, the shared
timing helpers, and the committed results in the stage-runner layout."""

import re

import pytest
import torch

from companion.core import ParameterError
from companion.core.stages import StageContext, stage_states
from companion.models.attention import attention_session, dense_attention
from companion.seer_attention import scale, scale_kernel, study
from companion.seer_attention.data import byte_windows
from companion.seer_attention.kernel_bench import naive_pooled, rel_err
from companion.seer_attention.ops import block_mass_map
from companion.seer_attention.synthetic import BOS, VERTICAL_MARKER, planted_decoder, with_bos
from companion.seer_attention.timing import attention_flops, flex_block_mask, sdpa_causal, time_call


def test_planted_heads_show_their_patterns():
    model, names = planted_decoder(num_layers=1, num_heads=4, head_dim=32, max_position=2048, rope_theta=1e6)
    assert names == ["local (narrow)", "A-shape (sink + local)", "slash (offset 1024)", "vertical (document boundaries)"]
    ids = with_bos(byte_windows(1, 1536, seed=2))
    assert ids[0, 0] == BOS and bool((ids == VERTICAL_MARKER).any())
    maps = {}

    def handler(*, layer, q, k, v, causal, scaling, **kw):
        maps[layer] = block_mass_map(q, k, block_size=64, causal=True, sm_scale=scaling)[0]
        return dense_attention(q, k, v, causal, scaling)

    with torch.no_grad(), attention_session(model, handler):
        model(input_ids=ids)
    m = maps[0]
    rows = slice(18, 24)  # late query blocks
    near = lambda h, lo, hi: float(sum(torch.diagonal(m[h], -o)[18 - o:24 - o].sum() for o in range(lo, hi + 1)) / 6)  # noqa: E731
    assert near(0, 0, 1) > 0.8  # local: the diagonal band
    assert float(m[1, rows, 0].mean()) > 0.2 and near(1, 0, 1) > 0.3  # A-shape: sink + band
    assert near(2, 15, 17) > 0.6  # slash: ~1024 tokens = 16 blocks back
    marker_blocks = sorted({int(i) // 64 for i in torch.nonzero(ids[0] == VERTICAL_MARKER)[:, 0]} | {0})
    assert float(m[3, rows][:, marker_blocks].sum(-1).mean()) > 0.7  # vertical: the document boundaries


def _ctx(**changes):
    profile = {**scale.SMOKE_PROFILE, "impl": "reference", "sparsities": [0.5], "lengths": [320], **changes}
    return StageContext(profile=profile, device="cpu", log=lambda *a: None, results={})


def test_distil_and_mask_stages_on_a_tiny_decoder():
    ctx = _ctx()
    out = study.distil(ctx)
    assert {r["method"] for r in out["recall"]} >= {"gate", "gate (no block RoPE)", "oracle", "a-shape"}
    assert {r["length"] for r in out["recall"]} == {"train_len", "long"}
    assert out["long_len"] == 512 and out["gate_params"] > 0 and set(ctx.shared) == {"model", "gates"}
    rows = study.mask_densities(ctx)
    masks = ctx.shared["masks"][320]
    assert set(masks) == {"gate threshold 0.002", "gate top-k 90% sparse"}
    assert all(m.shape == (1, 2, 5, 5) and m.dtype == torch.bool for m in masks.values())
    assert all(0 < r["density"] <= 1 and len(r["per_head"]) == 2 for r in rows)


def test_a_stage_without_its_inputs_says_which_stages_to_run():
    with pytest.raises(RuntimeError, match="distil,mask_densities,timings"):
        study.mask_densities(_ctx())
    with pytest.raises(RuntimeError, match="distil,mask_densities,timings"):
        study.timings(_ctx())


def test_time_attention_times_the_peers_first_and_checks_the_kernel():
    g = torch.Generator().manual_seed(0)
    mask = torch.rand(1, 2, 5, 5, generator=g).lt(0.5) | torch.eye(5, dtype=torch.bool)
    rows = study.time_attention({"random": mask.tril()}, 320, heads=4, head_dim=32, block_size=64, dense=("flash", "math"),
                                flex=False, impl="reference", device="cpu", dtype=torch.float32, log=lambda *a: None)
    assert [r["backend"] for r in rows] == ["SDPA flash", "SDPA math", study.KERNEL]
    assert rows[-1]["max_abs_err_vs_masked_sdpa"] < 1e-5 and rows[-1]["ms"] > 0
    assert rows[-1]["speedup_vs_dense"] == pytest.approx(min(r["ms"] for r in rows[:2]) / rows[-1]["ms"])


def test_a_wrong_profile_value_names_its_key():
    with pytest.raises(ParameterError, match="dense"):
        study.timings(StageContext(profile={**scale.GPU_PROFILE, "dense": ["fa3"]}, device="cpu", log=print, results={},
                                   shared={"masks": {}}))
    with pytest.raises(ParameterError, match="dtype"):
        study.distil(_ctx(dtype="fp8"))


def _block_mask_case(n=96, block=32, seed=1):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(1, 2, n // block, n // block, generator=g) < 0.5) | torch.eye(n // block, dtype=torch.bool)
    return mask & torch.ones(n // block, n // block, dtype=torch.bool).tril()


def test_flex_block_mask_keeps_the_blocks_the_diagonal_partial():
    """The kept blocks below the diagonal are full blocks (no mask_mod), the diagonal the only partial ones."""
    mask = _block_mask_case()
    bm = flex_block_mask(mask, 32, 96)
    assert torch.equal(bm.to_dense().bool(), mask)
    assert torch.equal(bm.kv_num_blocks, torch.ones(1, 2, 3, dtype=torch.int32))
    assert torch.equal(bm.full_kv_num_blocks, mask.sum(-1, dtype=torch.int32) - 1)


@pytest.mark.gpu
def test_flex_block_mask_is_the_same_attention_on_cuda():
    """Compiled FlexAttention with our BlockMask equals SDPA with the block mask expanded to tokens, causal."""
    from torch.nn.attention.flex_attention import flex_attention

    n, block = 512, 128
    mask = _block_mask_case(n, block).cuda()
    q, k, v = (torch.randn(1, 2, n, 64, device="cuda") for _ in range(3))
    out = torch.compile(flex_attention)(q, k, v, block_mask=flex_block_mask(mask, block, n))
    tok = mask.repeat_interleave(block, -2).repeat_interleave(block, -1) & torch.ones(n, n, dtype=torch.bool, device="cuda").tril()
    torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=tok), atol=2e-3, rtol=2e-3)


def test_timing_helpers_on_the_cpu():
    q = torch.randn(1, 2, 64, 16)
    ms, how = time_call(lambda: sdpa_causal("math")(q, q, q), "cpu")
    assert ms > 0 and how == "wall clock, one call (CPU)"
    assert attention_flops(32, 128, 8192, 0.1) == pytest.approx(4 * 32 * 128 * 8192 ** 2 / 2 * 0.1)


def test_naive_pooled_map_is_the_reference():
    from companion_kernels.block_sparse import pooled_attention_map

    g = torch.Generator().manual_seed(2)
    q, k = (torch.randn(1, 2, 100, 16, generator=g) for _ in range(2))
    ref = pooled_attention_map(q, k, block_size=32, impl="reference")
    torch.testing.assert_close(naive_pooled(q, k, 32), ref, atol=1e-6, rtol=1e-5)
    assert rel_err(ref, ref) == 0 and rel_err(2 * ref, ref) == pytest.approx(1.0)


@pytest.mark.parametrize("module, stages, added", [
    (scale, ("distil", "mask_densities", "timings"), {}),
    (scale_kernel, ("sweep", "main", "pooled", "backward_sweep", "backward"), {})])
def test_recorded_results_in_the_stage_layout(module, stages, added):
    """The committed run holds every stage it ran, done, on the GPU profile; ``added``: the stages added to the
    study since (with their profile keys), which the next run records."""
    rec = module.recorded()
    new_keys = {key for keys in added.values() for key in keys}
    assert rec["profile"] == {k: v for k, v in module.GPU_PROFILE.items() if k not in new_keys}
    assert stage_states(rec) == dict.fromkeys(stages, "done") and rec["complete"] and all(s in rec for s in stages)
    assert tuple(s.name for s in module.STAGES) == stages + tuple(added)


def test_rope_summary_reads_the_recorded_study():
    text = study.rope_summary(scale.recorded())
    assert re.search(r"trained at 8192 tokens keeps 0\.\d{3} of the attention mass at 32768 tokens", text), text
    unfinished = {**scale.recorded(), "stages": {"distil": {"state": "unfinished"}}}
    assert study.rope_summary(unfinished) is None


@pytest.mark.gpu
def test_gpu_timing_path_on_cuda():
    from companion_kernels.block_sparse import random_block_mask

    masks = {"random 50%": random_block_mask(1, 4, 32, 0.5, device="cuda")}
    rows = study.time_attention(masks, 2048, heads=8, head_dim=128, block_size=64, flex=True, log=lambda *a: None)
    assert [r["backend"] for r in rows] == ["SDPA flash", "SDPA cuDNN", study.FLEX, study.KERNEL]
    assert rows[-1]["max_abs_err_vs_masked_sdpa"] < 2e-2 and rows[-1]["ms"] > 0


def test_kernel_study_summary_and_figure():
    """The notebook's line and figure on the kernel study: the recorded forward rows (one line per length), and
    forward + backward once its stage holds rows (dashed), else the command that records it."""
    from companion.seer_attention.figures import kernel_study_figure

    recorded = scale_kernel.recorded()
    fwd = [r["speedup_vs_flex"] for r in recorded["main"]["rows"] if r.get("speedup_vs_flex")]
    run = {**recorded, "backward": None, "runs": [{"stages": ["main"], "ended": "2026-12-04 11:50 UTC"}]}
    text = scale_kernel.summary(run)
    assert f"forward (2026-12-04 11:50 UTC) runs at {min(fwd):.2f}–{max(fwd):.2f}×" in text
    assert "forward + backward not recorded yet" in text
    assert len(kernel_study_figure(run).data) == len({r["n"] for r in run["main"]["rows"]})
    back = [{"n": 8192, "density": 0.1, "density_actual": 0.1, "speedup_vs_flex": 1.3},
            {"n": 8192, "density": 0.5, "density_actual": 0.5, "speedup_vs_flex": 0.9}]
    runs = run["runs"] + [{"stages": ["backward"], "ended": "2026-12-05 12:37 UTC"}]
    text = scale_kernel.summary({**run, "backward": back, "runs": runs})
    assert text.endswith("forward + backward (2026-12-05 12:37 UTC) at 0.90–1.30× its speed.")
    fig = kernel_study_figure({**run, "backward": back})
    assert fig.data[-1].line.dash == "dash" and list(fig.data[-1].y) == [1.3, 0.9]
    bwd = [r["speedup_vs_flex"] for r in recorded["backward"]]  # the committed run holds the backward
    assert f"at {min(bwd):.2f}–{max(bwd):.2f}× its speed." in scale_kernel.summary(recorded)
