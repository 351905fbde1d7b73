"""Start a new paper on the package shape: ``python -m companion.new NN slug "Title" [options]``.

    python -m companion.new 20 sparse_moe "A Paper on Sparse Mixtures of Experts" \\
        --arxiv 2501.01234 --code https://github.com/owner/sparse-moe

creates, in the repository (or ``--root DIR``, a folder laid out like it):

* ``companion/<slug>/``: ``__init__.py`` (the paper's identity ``PAPER`` and a docstring naming its title,
  venue, arXiv id and code), a method module (``--module``, default ``method``), ``explorer.py``
  (``explorer_view`` / ``explorer_controls``), ``claims.py`` (``claim_rows`` and one named threshold) and
  ``scale.py`` (the GPU study: profiles, ``STAGES``, ``run_scale_up`` and ``recorded()``);
* ``tests/unit/test_<slug>_claims.py`` (the threshold just inside and just outside) and
  ``tests/unit/test_<slug>.py`` (the method's known truth, the explorer without a browser);
* ``notebooks/NN_<slug>.ipynb``: the parameters cell (tagged ``parameters``), the validation cell, the
  sections Claim, Idea, Implementation, Explore, Reproduce, Scale up, Checks; no outputs.

The skeleton passes the package-shape and notebook-contract tests and runs end to end on the CPU in a
few seconds. Its method module is a small, real and tested stand-in (a Monte Carlo estimate whose error
falls as n^(-1/2)), to be replaced by the paper's method: every place to change says ``TODO``.

Bad input (a number that is not two digits, a slug that is not a new Python identifier in lower case,
an arXiv id or URL of the wrong form) raises :class:`~companion.core.ParameterError`; a package,
notebook or test that already exists, or a number another notebook has, stops with a message
(``SystemExit``). Everything is written into a temporary folder under the root first and then moved
into place, so a failure leaves nothing half-done.
"""

from __future__ import annotations

import argparse
import keyword
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat

from companion.core.paths import REPO_ROOT
from companion.core.validation import ParameterError

__all__ = ["RESERVED", "check_request", "main", "new_paper", "planned_paths", "render"]

SLUG = re.compile(r"^[a-z][a-z0-9_]{1,39}$")
ARXIV = re.compile(r"^\d{4}\.\d{4,5}$")
URL = re.compile(r"^https?://[^\s\"'<>\\]+$")
MODULE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
# names under companion/ that are not papers (and the role files a method module must not shadow)
RESERVED = frozenset({"core", "viz", "models", "runner", "golden", "report", "tour", "new", "templates", "kernels",
                      "companion", "test", "tests"})
ROLE_MODULES = frozenset({"__init__", "explorer", "claims", "scale", "figures", "explore", "scaleup"})


# ------------------------------------------------------------------------------------------ validation

def check_request(number, slug, title, arxiv=None, code=None, module="method", venue="NeurIPS 2025"):
    """Validate the request (nothing is read from disk here); returns ``number`` as two digits."""
    if isinstance(number, int) and not isinstance(number, bool):
        number = f"{number:02d}" if 0 <= number <= 99 else str(number)
    if not (isinstance(number, str) and re.fullmatch(r"\d\d", number) and number != "00"):
        raise ParameterError("number", number, "two digits from '01' to '99' (00 is the tour)")
    if not (isinstance(slug, str) and SLUG.match(slug)) or keyword.iskeyword(slug) or slug.endswith("_") or "__" in slug:
        raise ParameterError("slug", slug, "2-40 lower-case letters, digits and single '_', starting with a letter "
                             "(it is the package and notebook name)")
    if slug in RESERVED:
        raise ParameterError("slug", slug, f"a name that is not one of the library's own: {sorted(RESERVED)}")
    for name, value in (("title", title), ("venue", venue)):
        if not (isinstance(value, str) and value.strip()) or value != value.strip() or "\n" in value:
            raise ParameterError(name, value, "a non-empty single line without leading or trailing spaces")
        if "\\" in value or '"""' in value or "@@" in value:
            raise ParameterError(name, value, "text without backslashes, triple quotes or '@@'")
    if arxiv is not None and not (isinstance(arxiv, str) and ARXIV.match(arxiv)):
        raise ParameterError("arxiv", arxiv, "an arXiv id like '2410.13276' (no version suffix), or none")
    if code is not None and not (isinstance(code, str) and URL.match(code)):
        raise ParameterError("code", code, "an http(s) URL without spaces or quotes, or none")
    if not (isinstance(module, str) and MODULE.match(module)) or keyword.iskeyword(module) or module in ROLE_MODULES:
        raise ParameterError("module", module, f"a lower-case Python module name other than {sorted(ROLE_MODULES)}")
    return number


def planned_paths(root: Path, number: str, slug: str) -> dict[str, Path]:
    """Where the new files go, relative to ``root``."""
    return {
        "package": root / "companion" / slug,
        "claims_test": root / "tests" / "unit" / f"test_{slug}_claims.py",
        "unit_test": root / "tests" / "unit" / f"test_{slug}.py",
        "notebook": root / "notebooks" / f"{number}_{slug}.ipynb",
    }


def _refuse_existing(root: Path, number: str, slug: str) -> None:
    if not (root / "companion").is_dir():
        raise SystemExit(f"companion.new: {root} does not look like the repository (it has no companion/ folder); "
                         "pass --root with the repository root")
    for what, path in planned_paths(root, number, slug).items():
        if path.exists():
            raise SystemExit(f"companion.new: {path} already exists; nothing was written (choose another slug, "
                             "or remove it first)")
    notebooks = root / "notebooks"
    if notebooks.is_dir():
        for path in sorted(notebooks.glob("*.ipynb")):
            if path.name.startswith(f"{number}_"):
                raise SystemExit(f"companion.new: number {number} is taken by {path}; nothing was written")
            if path.stem[3:] == slug:
                raise SystemExit(f"companion.new: slug {slug!r} is taken by {path}; nothing was written")


# ------------------------------------------------------------------------------------------- templates
# Placeholders are @@NAME@@ (not $ or {}: the code uses f-strings and the markdown uses $-maths).

INIT = '''"""@@TITLE@@ (paper @@NUMBER@@).

Paper: *@@TITLE@@*, @@VENUE@@, @@ARXIV_TEXT@@; official code @@CODE_TEXT@@.

TODO: one paragraph, in the paper's notation, on what the method does and which equation each module
implements. Modules, named after the paper's concepts:

* :mod:`~companion.@@SLUG@@.@@MODULE@@` - the method (a stand-in until replaced: see its docstring);
* :mod:`~companion.@@SLUG@@.explorer` - the explorer (pure ``explorer_view`` and its ``explorer_controls``);
* :mod:`~companion.@@SLUG@@.claims` - the Reproduce table's rows (thresholds as named, tested constants);
* :mod:`~companion.@@SLUG@@.scale` - the GPU profile and the recorded GPU results.
"""

from companion.core import Paper

PAPER = Paper(
    number=@@NUMBER_REPR@@,
    slug=@@SLUG_REPR@@,
    title=@@TITLE_REPR@@,
    arxiv=@@ARXIV_REPR@@,
    code=@@CODE_REPR@@,
    venue=@@VENUE_REPR@@,
)

from companion.@@SLUG@@.@@MODULE@@ import error_curve, estimates, fitted_slope, rms_error  # noqa: E402

__all__ = ["PAPER", "error_curve", "estimates", "fitted_slope", "rms_error"]
'''

METHOD = '''"""The method of paper @@NUMBER@@ (@@SHORT@@) - a stand-in written by ``python -m companion.new``.

TODO: replace this module by the paper's method, named after its concept, with a docstring that cites the
equation each function implements and states every deviation from the paper and why.

Until then it holds something small, real and tested, so that the notebook runs end to end: the Monte
Carlo estimate of E[X²] = 1 for X ~ N(0, 1) from n samples. Its variance is Var(X²) / n = 2 / n, so the
root-mean-square error over seeds falls as √(2/n): slope -1/2 on a log-log plot (the central limit theorem).
"""

from __future__ import annotations

import numpy as np

from companion.core import ParameterError, check_int

EXACT = 1.0  # E[X²] for X ~ N(0, 1)


def estimates(n: int, seeds) -> np.ndarray:
    """One estimate (1/n) Σ x_i² per seed, x_i ~ N(0, 1) drawn from ``numpy.random.default_rng(seed)``."""
    check_int("n", n, lo=1)
    seeds = [check_int("seed", s, lo=0) for s in seeds]
    if not seeds:
        raise ParameterError("seeds", seeds, "at least one seed")
    return np.array([float(np.mean(np.random.default_rng(s).standard_normal(n) ** 2)) for s in seeds])


def rms_error(n: int, seeds) -> float:
    """√(mean over seeds of (estimate − E[X²])²)."""
    return float(np.sqrt(np.mean((estimates(n, seeds) - EXACT) ** 2)))


def error_curve(ns, seeds) -> dict:
    """``{"n": [...], "rms_error": [...], "theory": √(2/n), "n_seeds": ...}`` for each sample size in ``ns``."""
    ns = [check_int("n", n, lo=1) for n in ns]
    if len(ns) < 2 or len(set(ns)) != len(ns):
        raise ParameterError("ns", ns, "at least two distinct sample sizes")
    seeds = list(seeds)
    return {"n": ns, "rms_error": [rms_error(n, seeds) for n in ns], "theory": [float(np.sqrt(2 / n)) for n in ns],
            "n_seeds": len(seeds)}


def fitted_slope(curve: dict) -> float:
    """The least-squares slope of log(rms error) against log(n)."""
    return float(np.polyfit(np.log(curve["n"]), np.log(curve["rms_error"]), 1)[0])
'''

EXPLORER = '''"""The explorer of paper @@NUMBER@@ (@@SHORT@@): the spread of the estimates at one sample size.

TODO: make it show the paper's central object. Controls: the sample size n and the number of seeds.
The figure: one estimate per seed, the exact value and the ±√(2/n) band the theory predicts; the readout:
the RMS error beside the theory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from companion.core import check_int
from companion.@@SLUG@@.@@MODULE@@ import EXACT, estimates

SIZES = (10, 30, 100, 300, 1000, 3000, 10000, 30000, 100000)


@dataclass(frozen=True)
class ExplorerData:
    """What the view needs besides the controls: the first seed (seeds are ``seed, seed + 1, ...``)."""

    seed: int = 0


def explorer_view(data: ExplorerData, n=1000, n_seeds=16):
    """The figure and readout for one setting of the controls (pure: seeded by ``data.seed``)."""
    check_int("n", n, lo=1, hi=max(SIZES))
    check_int("n_seeds", n_seeds, lo=2, hi=256)
    est = estimates(n, range(data.seed, data.seed + n_seeds))
    band = float(np.sqrt(2 / n))
    rms = float(np.sqrt(np.mean((est - EXACT) ** 2)))
    fig = go.Figure()
    fig.add_hrect(y0=EXACT - band, y1=EXACT + band, fillcolor="#56B4E9", opacity=0.2, line_width=0,
                  annotation_text="±√(2/n)", annotation_position="top left")
    fig.add_hline(y=EXACT, line_dash="dot", annotation_text="E[X²] = 1")
    fig.add_scatter(x=list(range(data.seed, data.seed + n_seeds)), y=est, mode="markers", name="estimate per seed")
    fig.update_layout(title=f"Monte Carlo estimates of E[X²] from n = {n} samples, {n_seeds} seeds",
                      xaxis_title="seed", yaxis_title="estimate (1/n) Σ x²", height=380)
    return fig, f"RMS error {rms:.4f} · theory √(2/n) = {band:.4f} · ratio {rms / band:.2f}"


def explorer_controls(data: ExplorerData, **initial):
    """The ipywidgets controls, keyed by :func:`explorer_view`'s argument names."""
    import ipywidgets as w

    v = dict(n=1000, n_seeds=16)
    v.update(initial)
    style = {"description_width": "initial"}
    return {
        "n": w.SelectionSlider(options=list(SIZES), value=v["n"], description="samples n", style=style,
                               continuous_update=False),
        "n_seeds": w.IntSlider(value=v["n_seeds"], min=2, max=64, description="seeds", style=style,
                               continuous_update=False),
    }
'''

CLAIMS = '''"""Claim rows for paper @@NUMBER@@ (@@SHORT@@), built from this run's results.

Inputs: ``curve`` - :func:`companion.@@SLUG@@.@@MODULE@@.error_curve` at the notebook's sizes and seeds;
``gpu`` - the recorded GPU results (:func:`companion.@@SLUG@@.scale.recorded`) or None.

TODO: one row per headline claim of the paper; every verdict threshold a module-level constant below,
tested just inside and just outside in ``tests/unit/test_@@SLUG@@_claims.py``. Every verdict comes from
:func:`companion.core.judge` (or :func:`~companion.core.not_run`): ``kind="exact"`` for agreement with a
closed form within a tolerance (one run), ``kind="effect"`` with one value per seed for "A beats B" (three
seeds at least, else inconclusive), ``kind="timing"`` for speed ratios measured side by side.
"""

from __future__ import annotations

from companion.core import Claim, judge, not_run
from companion.@@SLUG@@.@@MODULE@@ import fitted_slope

SLOPE_TOLERANCE = 0.15  # the fitted log-log slope counts as -1/2 when within ±0.15 of it


def slope_row(curve) -> Claim:
    slope = fitted_slope(curve)
    return Claim(
        claim="the Monte Carlo error falls as n^(-1/2) (stand-in claim: TODO the paper's)",
        paper="TODO: the paper's number and setting",
        measured=(f"log-log slope of the RMS error {slope:.3f} (needs -0.5 ± {SLOPE_TOLERANCE:g}); "
                  f"RMS error {curve['rms_error'][-1]:.2g} at n = {curve['n'][-1]} (theory {curve['theory'][-1]:.2g})"),
        scale=f"{len(curve['n'])} sample sizes {curve['n'][0]}-{curve['n'][-1]}, {curve['n_seeds']} seeds, CPU",
        judgement=judge(abs(slope + 0.5), SLOPE_TOLERANCE, kind="exact"),
    )


def gpu_rows(gpu) -> list[Claim]:
    if gpu is None or "curve" not in gpu:  # not recorded yet, or its curve stage did not finish
        return [Claim(claim="the result at the paper's scale", paper="TODO: the paper's large-scale number",
                      measured="no GPU run recorded", scale="—",
                      judgement=not_run("needs python -m companion.bench @@SLUG@@ on one GPU"))]
    slope = fitted_slope(gpu["curve"])
    return [Claim(claim="the result at the paper's scale", paper="TODO: the paper's large-scale number",
                  measured=f"log-log slope {slope:.3f} up to n = {gpu['curve']['n'][-1]}",
                  scale=f"{gpu['curve']['n_seeds']} seeds, {gpu['device']}, {gpu['date']}",
                  judgement=judge(abs(slope + 0.5), SLOPE_TOLERANCE, kind="exact"))]


def claim_rows(curve, gpu=None) -> list[Claim]:
    """The Reproduce table's rows."""
    return [slope_row(curve), *gpu_rows(gpu)]
'''

SCALE = '''"""The GPU study of paper @@NUMBER@@ (@@SHORT@@) and the reader of its committed results. No plotly import.

TODO: the paper's setting at one GPU's scale, stage by stage. ``python -m companion.bench @@SLUG@@`` runs
:data:`STAGES` on ``GPU_PROFILE`` (``--smoke``: ``SMOKE_PROFILE`` on the CPU) and writes
``benchmarks/results/@@SLUG@@_gpu.json`` after every stage (device, torch and triton versions, date, command,
commit, each stage's state); on a CPU the notebook shows it through :func:`recorded`. Time with
``companion.core.time_ms``; the stages' bodies live in the method modules. Describe the study in
``companion/bench.py``'s ``BENCHMARKS``.
"""

from __future__ import annotations

import numpy as np

from companion.core.stages import Stage, study_functions
from companion.@@SLUG@@.@@MODULE@@ import error_curve

RESULTS_NAME = "@@SLUG@@_gpu"
DEADLINE_S = 120
GPU_PROFILE = {
    "n_min": 100,       # TODO: the sizes the GPU profile runs
    "n_max": 1000000,
    "n_points": 9,
    "n_seeds": 64,
    "seed": 0,
}
SMOKE_PROFILE = {**GPU_PROFILE, "n_max": 1000, "n_points": 3, "n_seeds": 4}


def _sizes(profile: dict) -> list[int]:
    return sorted({int(n) for n in np.geomspace(profile["n_min"], profile["n_max"], profile["n_points"]).round()})


STAGES = (
    # TODO: the paper's GPU path, one Stage per part of the study (the stand-in method runs on the CPU)
    Stage("curve", lambda ctx: error_curve(_sizes(ctx.profile), range(ctx.seed, ctx.seed + ctx.profile["n_seeds"])),
          needs_s=60),
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)
'''

CLAIMS_TEST = '''"""companion.@@SLUG@@.claims: every verdict threshold, just inside and just outside."""

import numpy as np
import pytest

from companion.core import VERDICTS
from companion.@@SLUG@@ import claims as C


def curve(slope, ns=(100, 1000, 10000), n_seeds=8):
    """A constructed error curve whose log-log slope is exactly ``slope``."""
    ns = list(ns)
    return {"n": ns, "rms_error": [float(n) ** slope for n in ns], "theory": [float(np.sqrt(2 / n)) for n in ns],
            "n_seeds": n_seeds}


def test_slope_tolerance():
    t = C.SLOPE_TOLERANCE
    assert C.slope_row(curve(-0.5 + t * 0.99)).verdict == "reproduced"
    assert C.slope_row(curve(-0.5 - t * 0.99)).verdict == "reproduced"
    assert C.slope_row(curve(-0.5 + t * 1.01)).verdict == "not reproduced"
    assert C.slope_row(curve(-0.5 - t * 1.01)).verdict == "not reproduced"
    assert C.slope_row(curve(-0.5)).evidence.startswith("error ")


def test_gpu_rows():
    assert [r.verdict for r in C.gpu_rows(None)] == ["not run here"]
    gpu = {"device": "NVIDIA H200", "date": "2026-01-01 00:00 UTC", "curve": curve(-0.5, ns=(100, 10**6), n_seeds=64)}
    (row,) = C.gpu_rows(gpu)
    assert row.verdict == "reproduced" and "H200" in row.scale and "1000000" in row.measured
    (row,) = C.gpu_rows({**gpu, "curve": curve(-0.2, ns=(100, 10**6), n_seeds=64)})
    assert row.verdict == "not reproduced"


@pytest.mark.parametrize("ns,n_seeds", [((10, 20), 2), ((100, 1000, 10000, 100000), 64)])
def test_rows_follow_the_run_sizes(ns, n_seeds):
    rows = C.claim_rows(curve(-0.5, ns=ns, n_seeds=n_seeds))
    assert all(r.verdict in VERDICTS for r in rows)
    assert f"{len(ns)} sample sizes {ns[0]}-{ns[-1]}" in rows[0].scale and f"{n_seeds} seeds" in rows[0].scale
'''

UNIT_TEST = '''"""companion.@@SLUG@@: the method's known truth and the explorer without a browser."""

import numpy as np
import plotly.graph_objects as go
import pytest

from companion.core import ParameterError
from companion.@@SLUG@@ import PAPER, error_curve, estimates, fitted_slope
from companion.@@SLUG@@.explorer import ExplorerData, explorer_controls, explorer_view


def test_identity():
    assert PAPER.notebook == "@@NUMBER@@_@@SLUG@@"


def test_estimate_is_the_mean_of_squares():
    x = np.random.default_rng(3).standard_normal(50)
    assert estimates(50, [3])[0] == pytest.approx(float(np.mean(x ** 2)), rel=1e-12)


def test_error_falls_as_inverse_square_root():
    c = error_curve([100, 1000, 10000], range(64))
    assert fitted_slope(c) == pytest.approx(-0.5, abs=0.1)
    assert np.allclose(c["rms_error"], c["theory"], rtol=0.35)


@pytest.mark.parametrize("bad", [dict(n=0, seeds=[0]), dict(n=10, seeds=[]), dict(n=10, seeds=[-1])])
def test_bad_input(bad):
    with pytest.raises(ParameterError):
        estimates(**bad)


def test_explorer_view_is_pure_and_controls_match():
    data = ExplorerData(seed=1)
    fig, readout = explorer_view(data, n=100, n_seeds=4)
    again, _ = explorer_view(data, n=100, n_seeds=4)
    assert isinstance(fig, go.Figure) and fig.to_json() == again.to_json() and "RMS error" in readout
    controls = explorer_controls(data)
    assert set(controls) == {"n", "n_seeds"}
    explorer_view(data, **{k: c.value for k, c in controls.items()})
    with pytest.raises(ParameterError):
        explorer_view(data, n=0)
'''

# ------------------------------------------------------------------------------------------- notebook

NB_TITLE = """# @@NUMBER@@ · @@TITLE@@

*"@@TITLE@@", @@VENUE@@ (@@ARXIV_MD@@; code: @@CODE_MD@@).* Everything below is this project's implementation
in `companion.@@SLUG@@`; the notebook only drives it.

> Skeleton made by `python -m companion.new`. The method is a stand-in (a Monte Carlo estimate whose error
> falls as n^(-1/2)) until `companion/@@SLUG@@/@@MODULE@@.py` holds the paper's; every place to change says TODO."""

NB_PARAMETERS = """PROFILE = "auto"   # "auto", "cpu" or "gpu"
SEED = 0           # seeds Python, NumPy and PyTorch
N_MIN = 100        # smallest sample size
N_MAX = 10000      # largest sample size
N_POINTS = 5       # sample sizes, spaced geometrically from N_MIN to N_MAX
N_SEEDS = 16       # seeds per sample size"""

NB_VALIDATION = """from companion.core import ParameterError, check_common, check_injected, check_int

check_injected(globals())
profile = check_common(PROFILE, SEED)
check_int("N_MIN", N_MIN, lo=10, hi=100000)
check_int("N_MAX", N_MAX, lo=20, hi=1000000)
if N_MAX < 2 * N_MIN:
    raise ParameterError("N_MAX", N_MAX, f"an integer >= 2 * N_MIN = {2 * N_MIN}")
check_int("N_POINTS", N_POINTS, lo=2, hi=20)
check_int("N_SEEDS", N_SEEDS, lo=2, hi=64)"""

NB_CLAIM = """## Claim

TODO: what the paper says, with its numbers and setting (a table of the headline results, the section or
table they come from).

The stand-in's claim: the Monte Carlo estimate of E[X²] = 1 from n standard normal samples has variance
Var(X²)/n = 2/n, so its root-mean-square error falls as √(2/n)."""

NB_IDEA = """## Idea

TODO: the one picture that carries the paper's idea. For the stand-in: the estimates of many seeds
concentrate around the exact value as n grows, within a band of width √(2/n)."""

NB_IDEA_CODE = """import numpy as np
import plotly.graph_objects as go

import companion.viz  # noqa: F401  (plotly theme + renderer)
from companion.@@SLUG@@ import PAPER
from companion.@@SLUG@@.@@MODULE@@ import EXACT, estimates

fig = go.Figure()
for n in (N_MIN, N_MAX):
    fig.add_violin(y=estimates(n, range(SEED, SEED + N_SEEDS)), name=f"n = {n}", box_visible=True, points="all")
fig.add_hline(y=EXACT, line_dash="dot", annotation_text="E[X²] = 1")
fig.update_layout(title=f"Estimates of E[X²] over {N_SEEDS} seeds at the smallest and largest n",
                  yaxis_title="estimate (1/n) Σ x²", height=380)
fig"""

NB_IMPLEMENTATION = """## Implementation

TODO: the key lines of the paper's method, in the paper's notation, with the equation they implement.
The stand-in lives in `companion.@@SLUG@@.@@MODULE@@`:"""

NB_IMPLEMENTATION_CODE = """import inspect

from companion.@@SLUG@@ import @@MODULE@@

print(inspect.getsource(@@MODULE@@.estimates))"""

NB_EXPLORE = """## Explore

TODO: the explorer of the paper's central object. Here: move n and the number of seeds and watch the
spread of the estimates against the ±√(2/n) band."""

NB_EXPLORE_CODE = """import functools

from companion.viz import Explorer
from companion.@@SLUG@@.explorer import ExplorerData, explorer_controls, explorer_view

explorer_data = ExplorerData(seed=SEED)
Explorer(functools.partial(explorer_view, explorer_data), explorer_controls(explorer_data),
         title="Monte Carlo estimates at one sample size")"""

NB_REPRODUCE = """## Reproduce

TODO: the paper's experiment at the CPU profile's scale. Here: the RMS error over `N_SEEDS` seeds at `N_POINTS`
sample sizes from `N_MIN` to `N_MAX`, against the theory $\\sqrt{2/n}$."""

NB_REPRODUCE_CODE = """from companion.core import Timer
from companion.@@SLUG@@.@@MODULE@@ import error_curve, fitted_slope

ns = sorted({int(n) for n in np.geomspace(N_MIN, N_MAX, N_POINTS).round()})
with Timer() as t_curve:
    curve = error_curve(ns, range(SEED, SEED + N_SEEDS))
fig = go.Figure()
fig.add_scatter(x=curve["n"], y=curve["rms_error"], mode="lines+markers", name=f"measured ({N_SEEDS} seeds)")
fig.add_scatter(x=curve["n"], y=curve["theory"], mode="lines", line_dash="dash", name="theory √(2/n)")
fig.update_layout(title=f"RMS error against n (slope {fitted_slope(curve):.3f}; computed in {t_curve.seconds:.2f} s)",
                  xaxis_type="log", yaxis_type="log", xaxis_title="samples n", yaxis_title="RMS error", height=380)
fig"""

NB_CLAIMS_MD = """**The claims, beside what this run measured.**"""

NB_CLAIMS_CODE = """from companion.core import Claims
from companion.@@SLUG@@.claims import claim_rows
from companion.@@SLUG@@.scale import recorded

gpu = recorded()
claims = Claims(PAPER.notebook)
claims.extend(claim_rows(curve, gpu))
claims.table()"""

NB_HONEST = """**What this run shows, at its scale.** TODO: say plainly what was reproduced (a mechanism, a trend, a
ratio), at what scale, and what was not and why."""

NB_SCALE = """## Scale up

TODO: what the GPU profile runs (`companion.@@SLUG@@.scale.GPU_PROFILE`, `python -m companion.bench @@SLUG@@`). On a
CPU this section runs nothing heavy: it shows the recorded GPU results with their device and date."""

NB_SCALE_CODE = """from companion.@@SLUG@@.scale import DEADLINE_S, GPU_PROFILE, run_scale_up

if profile == "gpu":
    gpu = {"device": "this run", "date": "now", **run_scale_up({**GPU_PROFILE, "seed": SEED}, device="cuda", deadline_s=DEADLINE_S)}
if gpu is None or "curve" not in gpu:
    print("No GPU run recorded yet: python -m companion.bench @@SLUG@@ on one GPU writes benchmarks/results/@@SLUG@@_gpu.json")
else:
    print(f"{gpu['device']} · {gpu['date']} · profile: {gpu['profile']} · slope {fitted_slope(gpu['curve']):.3f}")"""

NB_CHECKS = """## Checks"""

NB_CHECKS_CODE = """from companion.core import VERDICTS

# the estimate is the mean of squares (an exact small case)
x = np.random.default_rng(SEED).standard_normal(N_MIN)
assert abs(estimates(N_MIN, [SEED])[0] - float(np.mean(x ** 2))) < 1e-12
# the errors are finite and positive at every size
assert all(np.isfinite(e) and e > 0 for e in curve["rms_error"])
# pooled z-scores (estimate - 1) / √(2/n) have mean 0 within 5 standard errors (the central limit theorem)
z = np.concatenate([(estimates(n, range(SEED, SEED + N_SEEDS)) - EXACT) / np.sqrt(2 / n) for n in curve["n"]])
assert abs(z.mean()) < 5 / np.sqrt(len(z)), z.mean()
assert all(row.verdict in VERDICTS for row in claims.items) and claims.items
print(f"checks passed: {len(z)} estimates, mean z-score {z.mean():+.3f}")"""


def _cells():
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    parameters = code(NB_PARAMETERS)
    parameters.metadata["tags"] = ["parameters"]
    return [md(NB_TITLE), parameters, code(NB_VALIDATION),
            md(NB_CLAIM),
            md(NB_IDEA), code(NB_IDEA_CODE),
            md(NB_IMPLEMENTATION), code(NB_IMPLEMENTATION_CODE),
            md(NB_EXPLORE), code(NB_EXPLORE_CODE),
            md(NB_REPRODUCE), code(NB_REPRODUCE_CODE), md(NB_CLAIMS_MD), code(NB_CLAIMS_CODE), md(NB_HONEST),
            md(NB_SCALE), code(NB_SCALE_CODE),
            md(NB_CHECKS), code(NB_CHECKS_CODE)]


def render(text: str, values: dict[str, str]) -> str:
    """Replace every ``@@NAME@@`` in ``text``; a placeholder left over is a bug in the templates."""
    for key, value in values.items():
        text = text.replace(f"@@{key}@@", value)
    left = re.findall(r"@@[A-Z_]+@@", text)
    if left:
        raise RuntimeError(f"companion.new: unfilled placeholders {sorted(set(left))}")
    return text


def _values(number, slug, title, arxiv, code, module, venue) -> dict[str, str]:
    return {
        "NUMBER": number, "SLUG": slug, "TITLE": title, "MODULE": module, "VENUE": venue,
        "SHORT": title.split(":")[0].strip(),
        "NUMBER_REPR": repr(number), "SLUG_REPR": repr(slug), "TITLE_REPR": repr(title),
        "ARXIV_REPR": repr(arxiv), "CODE_REPR": repr(code), "VENUE_REPR": repr(venue),
        "ARXIV_TEXT": f"arXiv {arxiv}" if arxiv else "no arXiv id",
        "CODE_TEXT": code or "not released",
        "ARXIV_MD": f"[arXiv {arxiv}](https://arxiv.org/abs/{arxiv})" if arxiv else "no arXiv id",
        "CODE_MD": f"<{code}>" if code else "not released",
    }


def _notebook(values) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    nb.cells = _cells()
    for i, cell in enumerate(nb.cells):
        cell.source = render(cell.source, values)
        cell.id = f"{values['SLUG']}-{i:02d}"  # deterministic ids (nbformat's are random)
    return nb


# ---------------------------------------------------------------------------------------------- writing

def _write_tree(stage: Path, number: str, slug: str, values: dict[str, str]) -> dict[str, Path]:
    """Write every new file under ``stage`` (a temporary folder laid out like the root)."""
    staged = planned_paths(stage, number, slug)
    package = staged["package"]
    package.mkdir(parents=True)
    files = {"__init__.py": INIT, f"{values['MODULE']}.py": METHOD, "explorer.py": EXPLORER, "claims.py": CLAIMS,
             "scale.py": SCALE}
    for name, template in files.items():
        (package / name).write_text(render(template, values), encoding="utf-8")
    staged["claims_test"].parent.mkdir(parents=True, exist_ok=True)
    staged["claims_test"].write_text(render(CLAIMS_TEST, values), encoding="utf-8")
    staged["unit_test"].write_text(render(UNIT_TEST, values), encoding="utf-8")
    staged["notebook"].parent.mkdir(parents=True, exist_ok=True)
    nb = _notebook(values)
    nbformat.validate(nb)
    staged["notebook"].write_text(nbformat.writes(nb) + "\n", encoding="utf-8")
    for path in staged["package"].iterdir():
        compile(path.read_text(encoding="utf-8"), str(path), "exec")  # a template that does not parse fails here
    return staged


def _move(src: Path, dst: Path) -> None:
    """Move a staged file or folder into place, never over an existing one."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        if dst.exists():
            raise FileExistsError(dst)
        os.rename(src, dst)
    else:
        os.link(src, dst)  # fails if dst exists (no silent overwrite)
        src.unlink()
    # the file mode: what open() would give (mkdtemp's folder is 0o700)
    mask = os.umask(0o022)
    os.umask(mask)
    for path in [dst, *dst.rglob("*")] if dst.is_dir() else [dst]:
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)


def new_paper(number, slug, title, arxiv=None, code=None, *, module="method", venue="NeurIPS 2025",
              root=None) -> dict[str, Path]:
    """Create the package, tests and notebook of a new paper under ``root`` (the repository by default).

    Returns ``{"package", "claims_test", "unit_test", "notebook"}`` paths. Raises ParameterError on bad
    input and SystemExit when something it would create exists; on any failure nothing is left behind.
    """
    number = check_request(number, slug, title, arxiv, code, module, venue)
    root = Path(root) if root is not None else REPO_ROOT
    if not root.is_dir():
        raise SystemExit(f"companion.new: the root {root} is not a folder")
    root = root.resolve()
    _refuse_existing(root, number, slug)
    values = _values(number, slug, title, arxiv, code, module, venue)
    targets = planned_paths(root, number, slug)
    stage = Path(tempfile.mkdtemp(prefix=f".new-{slug}-", dir=root))
    moved: list[Path] = []
    try:
        staged = _write_tree(stage, number, slug, values)
        for key in ("package", "claims_test", "unit_test", "notebook"):
            try:
                _move(staged[key], targets[key])
            except FileExistsError:
                raise SystemExit(f"companion.new: {targets[key]} appeared while writing; nothing was written") from None
            moved.append(targets[key])
    except BaseException:
        for path in reversed(moved):  # undo what was already moved: all or nothing
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return targets


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m companion.new", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("number", help="two digits, e.g. 07 (the notebook is NN_<slug>.ipynb)")
    parser.add_argument("slug", help="the package and notebook name: lower case, digits and '_'")
    parser.add_argument("title", help="the paper's full title")
    parser.add_argument("--arxiv", default=None, help="arXiv id, e.g. 2410.13276")
    parser.add_argument("--code", default=None, help="URL of the official code")
    parser.add_argument("--venue", default="NeurIPS 2025")
    parser.add_argument("--module", default="method", help="name of the method module (default: method)")
    parser.add_argument("--root", default=None, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    try:
        made = new_paper(args.number, args.slug, args.title, args.arxiv, args.code, module=args.module,
                         venue=args.venue, root=args.root)
    except ParameterError as exc:
        print(f"companion.new: {exc}", file=sys.stderr)
        return 2
    root = Path(args.root).resolve() if args.root else REPO_ROOT
    print("created:")
    for path in made.values():
        print(f"  {path.relative_to(root)}")
    slug = args.slug
    print(f"next: replace the stand-in in companion/{slug}/{args.module}.py, fill the TODOs, then\n"
          f"  .venv/bin/python -m pytest tests/unit/test_{slug}_claims.py tests/unit/test_{slug}.py -q\n"
          f"  .venv/bin/python -m companion.runner --papers {slug} --profile cpu")
    return 0


if __name__ == "__main__":
    sys.exit(main())
