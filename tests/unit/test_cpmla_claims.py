"""companion.cpmla.claims: every verdict threshold, just inside and just outside."""

import pytest

from companion.core import VERDICTS
from companion.cpmla import claims as C

NB = {"eta": 0.2, "full": 0.11, "diagonal": 50.0}


def fixed(ula, mirror, diag, full=None, T=30):
    rows = []
    for seed, (u, m, dg) in enumerate(zip(ula, mirror, diag)):
        rows += [{"sampler": "ULA", "T": T, "seed": seed, "energy_distance": u},
                 {"sampler": "mirror: learned ICNN", "T": T, "seed": seed, "energy_distance": m},
                 {"sampler": "mirror: learned ICNN, diagonal Hessian", "T": T, "seed": seed, "energy_distance": dg},
                 {"sampler": "ULA", "T": 3, "seed": seed, "energy_distance": 99.0}]
    return {"rows": rows, "eta_scale": 0.2}


def coop(ours_early, cp_early, cp_late):
    return {"cpmla": {3: ours_early, 10: ours_early}, "cpflow": {3: cp_early, 10: cp_late}, "early": 3, "late": 10,
            "floor": 0.005, "n_data": 1280, "iterations_per_epoch": 10, "T": 10, "eta": 0.01, "seed": 0}


def test_speedup_ratio():
    r = C.SPEEDUP_RATIO
    assert C.geometry_row(fixed([r * 1.01, r * 1.2], [1.0, 1.0], [1, 1]), 100).verdict == "reproduced"
    assert C.geometry_row(fixed([r * 0.99, r * 1.2], [1.0, 1.0], [1, 1]), 100).verdict == "partly reproduced"
    assert C.geometry_row(fixed([0.5, 0.9], [1.0, 1.0], [1, 1]), 100).verdict == "not reproduced"


def test_diag_margin():
    m = C.DIAG_MARGIN
    assert C.diagonal_row(fixed([1, 1], [1.0, 2.0], [1 + m * 0.99, 2.0]), 100, NB).verdict == "reproduced"
    assert C.diagonal_row(fixed([1, 1], [1.0, 2.0], [1 + m * 1.01, 2.0]), 100, NB).verdict == "not reproduced"


def test_match_tolerance():
    t = C.MATCH_TOLERANCE
    assert C.toy_row(coop(0.1 * (1 + t * 0.99), 0.5, 0.1)).verdict == "reproduced"
    assert C.toy_row(coop(0.1 * (1 + t * 1.01), 0.5, 0.1)).verdict == "partly reproduced"
    assert C.toy_row(coop(0.6, 0.5, 0.1)).verdict == "not reproduced"


def test_rows_and_gpu_rows():
    rows = C.claim_rows(fixed([3, 3], [1, 1], [1, 1]), coop(0.1, 0.2, 0.1), None, n_chains=100, newton_bias=NB)
    assert all(r.verdict in VERDICTS for r in rows) and rows[-1].verdict == "not run here"
    gpu = {"device": "H200", "date": "today", "config": {"size": 16}, "flow_parameters": 1000,
           "quality": {k: {"kid": 0.1, "mmd_rbf": 0.1, "pixel_mean_abs_error": 0.2} for k in ("cpmla", "cpflow", "ula", "data_split_half")},
           "sampling_time": [{"T": 10, "seconds_per_1k": 0.4}, {"T": 30, "seconds_per_1k": 1.1}]}
    g = C.gpu_rows(gpu)
    assert [r.verdict for r in g] == ["recorded on GPU"] * 2 and "T = 10" in g[1].measured


@pytest.mark.parametrize("n_seeds", [2, 5])
def test_rows_follow_the_run_sizes(n_seeds):
    row = C.geometry_row(fixed([3] * n_seeds, [1] * n_seeds, [1] * n_seeds, T=7), 37)
    assert f"{n_seeds} seeds" in row.scale and "37 chains" in row.scale and "T = 7" in row.measured
