"""The one-GPU (H100 or H200) rate–distortion study of paper 05 (4DGCPro) on the trained 3-D pipeline, and the reader of its
committed results. No plotly import.

The 2-D CPU pipeline's three RD comparisons (:mod:`companion.gaussian_video.experiments`), rerun on the 3-D pipeline
of :mod:`companion.gaussian_video.train3d` with seeds 0, 1 and 2 (each the scene's seed and the model's), stage by
stage in order of importance (bodies in :mod:`companion.gaussian_video.rd3d`):

1. ``rate_term``: per seed a keyframe of frame 0 with the full recipe and one with λ_rate_key = 0 (no rate term in
   L_key), each an RD curve over l = 1..L (bytes of layers ≤ l, held-out PSNR of c^l from the decoded model):
   the BD-rate of "no rate term" against "full" on the monotone envelopes (paper: +32.73 %);
2. ``progressive``: from those full keyframes, per seed the worst step in l of the held-out PSNR, the base layer's
   share of the bytes and its PSNR gap to all layers (paper: High/Mid/Low 29.47/28.68/27.69 dB at 1.31/0.66/0.33 MB);
3. ``grouping``: per seed a 6-frame sequence with the jump at frame 3, coded with motion-aware grouping, fixed groups
   of 5 and fixed groups of 1 (every frame a keyframe; those already coded are reused): the BD-rate of each fixed
   grouping against motion-aware (paper: group size 1 +48.37 %).

The profile: the scene of :mod:`~companion.gaussian_video.scale_train3d` scaled down so that three seeds fit, 25,000
ground-truth Gaussians, 32 cameras at 256² of which every 4th is held out (24 training views), the keyframe recipe of
that study (L1 + 0.2·D-SSIM, 3DGS density control on its schedule scaled to the run, L = 6, 3 cameras per step) at
600 steps (the last 90 with the rate term; 3DGS's schedule scaled to 600: densify from step 10 every 2 steps until
300, opacity reset every 60), starting from 15,000 points (the SfM-like 60 % of the centres) and capped at 20,000
Gaussians (4/3 of the start, as that study's 80,000 of 60,000).

Time plan on one H200, estimated from the 3-D study's recorded run (88–93 ms per keyframe step at 60,000–80,000
Gaussians, 512², L = 6, 3 cameras; 23.5 ms of it the forward + backward of the 6 progressive renders of one camera;
1.5–1.9 s per inter-frame of 40 + 40 steps), assuming a step's render cost scales with Gaussians × pixels (here about
1/13 of that run's): 10–12 s a keyframe, ``rate_term`` ≈ 130–145 s (``needs_s`` 150), ``grouping`` (7 keyframes and
8 inter-frames a seed: motion-aware 0 and 3, fixed groups of 5 at 0 and 5, fixed groups of 1 at 1, 2 and 4 when the
jump is detected at 3) ≈ 85–100 s a seed (``needs_s`` 280), 431 s of ``DEADLINE_S`` = 480 s. **Measured** on an
H100 (2026-12-05, gsplat prebuilt): the estimate was 3× short, a 600-step keyframe takes 29–43 s (48–72 ms a step:
the fixed cost per step dominates at this size), so ``rate_term`` took 159 s for 3 seeds and ``grouping`` 284–296 s
a seed: one seed fits a call after ``rate_term``, and each further seed needs a call of its own (the recorded
seeds 1 and 2 each ran so, seed 2 as ``--stages grouping --resume benchmarks/results/gaussian_video_rd3d.json``: 217
s). A stage stops starting seeds once the time left is less than its longest seed so far; finished seeds are kept
(``seeds`` of ``seeds_planned``), and the claims judge the seeds recorded.

Not reproduced: the paper's scenes and training length (12,000 + 1,500 keyframe steps; here 600, 90 of them with the
rate term), its hash grid + MLP motion model (a dense grid), H.264 (constriction's ANS), its sequence lengths (6
frames here). Run it with ``python -m companion.bench gaussian_video_rd3d`` (``--smoke``: a tiny CPU run with the
torch renderer).
"""

from __future__ import annotations

from companion.core.stages import Stage, study_functions
from companion.gaussian_video import rd3d as R
from companion.gaussian_video import scale_train3d as T
from companion.gaussian_video import train3d as E

RESULTS_NAME = "gaussian_video_rd3d"
DEADLINE_S = 480
KEY_STEPS = 600
GPU_PROFILE = {
    "backend": "gsplat",
    "scene": {"n_gt": 25_000, "n_parts": 12, "n_frames": 6, "n_cameras": 32, "width": 256, "test_every": 4,
              "jump_at": 3, "jump": 0.04, "layout": "separated"},
    # the 3-D study's keyframe recipe (scale_train3d.GPU_PROFILE["train"]) at 600 steps, 15 % of them with the rate
    # term as there, 3DGS's schedule scaled to 600, capped at 4/3 of the 15,000 starting points
    "train": {**T.GPU_PROFILE["train"], "key_steps": KEY_STEPS, "rd_steps": 90, **E.schedule_3dgs(KEY_STEPS),
              "max_gaussians": 20_000},
    "seeds": [0, 1, 2],
}
SMOKE_PROFILE = {
    **GPU_PROFILE, "backend": "torch",
    "scene": {**T.SMOKE_PROFILE["scene"], "n_frames": 6, "jump_at": 3},
    "train": T.SMOKE_PROFILE["train"],
    "seeds": [0],  # the seed loop and its deadline stop are unit-tested (tests/unit/test_gaussian_video_rd3d.py)
}
STAGES = (
    Stage("rate_term", R.rate_term_stage, needs_s=150),  # includes gsplat's compile on first use (about 70 s)
    Stage("progressive", R.progressive_stage, needs_s=1),
    Stage("grouping", R.grouping_stage, needs_s=280),
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)
