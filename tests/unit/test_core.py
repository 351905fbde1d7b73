import json
import math
import time

import numpy as np
import pytest
import torch

from companion.core import (
    Claim,
    Claims,
    ParameterError,
    Timer,
    check_bool,
    check_choice,
    check_common,
    check_float,
    check_int,
    check_str,
    cuda_graph,
    judge,
    not_run,
    resolve_profile,
    save_results,
    seed_everything,
)
from companion.core.claims import CLAIMS_DIR_ENV


@pytest.mark.parametrize(
    "call, fragment",
    [
        (lambda: check_int("STEPS", -3, lo=1), "STEPS=-3"),
        (lambda: check_int("STEPS", 2.0, lo=1), "an integer"),
        (lambda: check_int("STEPS", True), "an integer"),
        (lambda: check_int("STEPS", "10"), "'10'"),
        (lambda: check_float("LR", 0.0, lo=0.0, lo_open=True), "> 0.0"),
        (lambda: check_float("LR", math.nan), "finite"),
        (lambda: check_float("P", 1.5, hi=1.0), "<= 1.0"),
        (lambda: check_choice("GAME", "chess", ["kuhn", "leduc"]), "one of 'kuhn', 'leduc'"),
        (lambda: check_bool("FLAG", 1), "True or False"),
        (lambda: check_str("NAME", ""), "non-empty"),
        (lambda: resolve_profile("fast"), "PROFILE='fast'"),
        (lambda: check_common("cpu", -1), "SEED=-1"),
    ],
)
def test_validation_errors_name_parameter_value_and_allowed(call, fragment):
    with pytest.raises(ParameterError) as err:
        call()
    assert fragment in str(err.value)
    assert "expected" in str(err.value)


def test_validation_returns_values():
    assert check_int("N", 5, lo=1, hi=5) == 5
    assert check_float("X", 3, lo=0) == 3.0 and isinstance(check_float("X", 3), float)
    assert check_choice("G", "kuhn", ("kuhn",)) == "kuhn"


def test_profile_resolution_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_profile("auto") == "cpu"
    assert resolve_profile("cpu") == "cpu"
    with pytest.raises(ParameterError, match="without CUDA"):
        resolve_profile("gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_profile("auto") == "gpu"


def test_seeding_is_reproducible():
    seed_everything(7)
    a = (np.random.rand(3), torch.rand(3))
    seed_everything(7)
    b = (np.random.rand(3), torch.rand(3))
    assert np.array_equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_claims_written_atomically_under_the_runner(tmp_path, monkeypatch):
    monkeypatch.setenv(CLAIMS_DIR_ENV, str(tmp_path))
    claims = Claims("99_demo")
    claims.extend([Claim("c", "p", "m", "s", judge(1e-12, 1e-9, kind="exact")),
                   Claim("c2", "p2", "m2", "s2", judge([0.9, 1.1, 1.0], 2.0, direction="higher"))])
    data = json.loads((tmp_path / "99_demo.claims.json").read_text())
    assert [(c["claim"], c["verdict"]) for c in data["claims"]] == [("c", "reproduced"), ("c2", "not reproduced")]
    assert data["claims"][1]["evidence"] == "n=3: 1 ± 0.1 (0.9–1.1) vs ≥ 2"
    assert list(tmp_path.iterdir()) == [tmp_path / "99_demo.claims.json"]  # no temporary left behind
    assert list(claims.table().columns) == ["claim", "paper says", "measured here", "scale", "verdict", "evidence"]


def test_a_claim_takes_a_judgement_never_a_verdict_string():
    with pytest.raises(TypeError, match="judgement must come from companion.core.judge"):
        Claim("c", "p", "m", "s", "reproduced")
    with pytest.raises(TypeError, match="claim rows must be Claim objects"):
        Claims("99_demo").extend([{"claim": "c", "verdict": "reproduced"}])


def test_claims_write_nothing_interactively(tmp_path, monkeypatch):
    monkeypatch.delenv(CLAIMS_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    Claims("99_demo").extend([Claim("c", "p", "m", "s", not_run("a demo"))])
    assert list(tmp_path.iterdir()) == []


def test_results_carry_provenance(tmp_path):
    path = save_results("demo_bench", {"ms": 1.5}, out_dir=tmp_path)
    data = json.loads(path.read_text())
    assert data["ms"] == 1.5 and data["name"] == "demo_bench"
    assert {"device", "torch", "triton", "date"} <= data.keys()
    with pytest.raises(ValueError, match="results name"):
        save_results("../escape", {}, out_dir=tmp_path)


def test_timer_measures():
    with Timer() as t:
        sum(range(10000))
    assert 0 <= t.seconds < 5


def test_timer_reads_the_wall_clock():
    """A sleep takes wall time and almost no CPU time: the timer counts it."""
    with Timer() as t:
        time.sleep(0.03)
    assert t.seconds >= 0.025


def test_timer_on_the_process_clock_counts_work_not_waiting():
    """clock="process": a 0.2 s sleep reads as (almost) nothing, as in time_ms; an unknown clock is named."""
    with Timer(clock="process") as t:
        time.sleep(0.2)
    assert 0 <= t.seconds < 0.1
    with pytest.raises(ValueError, match="clock must be one of wall, process, got 'cpu'"):
        Timer(clock="cpu")


def test_cuda_graph_replays_the_captured_call_after_its_warm_up(monkeypatch):
    """``warmup`` calls run, the captured call is only recorded (capture executes nothing), and each replay runs
    it. Without CUDA it says so."""
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="cuda_graph needs a CUDA device"):
            cuda_graph(lambda: None)
        return
    x = torch.zeros(4, device="cuda")
    replay = cuda_graph(lambda: x.add_(1.0), warmup=2)
    torch.cuda.synchronize()
    assert x.tolist() == [2.0] * 4  # the two warm-ups
    replay()
    replay()
    torch.cuda.synchronize()
    assert x.tolist() == [4.0] * 4


def test_timer_synchronises_cuda_only_when_asked(monkeypatch):
    syncs = []
    monkeypatch.setattr("companion.core.timing._cuda_sync", lambda: syncs.append(1))
    with Timer():
        pass
    assert syncs == []
    with Timer(cuda_sync=True):
        pass
    assert syncs == [1, 1]  # before the clock starts and before it stops


def test_atomic_writes_respect_the_umask(tmp_path):
    import os

    from companion.core.atomic import write_json_atomic, write_text_atomic

    old = os.umask(0o022)
    try:
        assert (write_text_atomic(tmp_path / "a.txt", "x").stat().st_mode & 0o777) == 0o644
        os.umask(0o027)
        assert (write_json_atomic(tmp_path / "b.json", {"a": 1}).stat().st_mode & 0o777) == 0o640
        os.umask(0o077)
        assert (write_text_atomic(tmp_path / "a.txt", "y").stat().st_mode & 0o777) == 0o600  # rewrite follows the umask too
    finally:
        os.umask(old)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.json"]


def test_claims_table_shows_every_cell_in_full():
    long = "held-out KL rises from 0.05 at the training length to 0.88 at four times the length, " * 2
    claims = Claims("99_demo")
    claims.extend([Claim("c", "p", long, "s", judge([0.05, 0.88, 0.9], 0.1, direction="lower"))])
    table = claims.table()
    assert table.loc[0, "measured here"] == long  # still a DataFrame underneath
    assert long.strip() in repr(table) and "…" not in repr(table) and "..." not in repr(table)
    page = table._repr_html_()
    assert long.strip() in page and "white-space:normal" in page
    assert "background:#f8d7d3'>not reproduced" in page


def test_gpu_hidden_from_children_hides_the_gpu_from_a_spawned_process_and_restores_the_environment(monkeypatch):
    import multiprocessing as mp
    import os

    from companion.core import gpu_hidden_from_children

    for before in (None, "0"):
        if before is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", before)
        with gpu_hidden_from_children():
            assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
            if before is None:  # one spawned child (a fresh interpreter) reads the environment it inherited
                ctx = mp.get_context("spawn")
                q = ctx.Queue()
                p = ctx.Process(target=_report_visible_devices, args=(q,))
                p.start()
                seen = q.get(timeout=60)
                p.join(timeout=60)
                assert seen == ""
        assert os.environ.get("CUDA_VISIBLE_DEVICES") == before
    with pytest.raises(RuntimeError):  # restored also when the block raises
        with gpu_hidden_from_children():
            raise RuntimeError("inside")
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == "0"


def _report_visible_devices(q):
    import os

    q.put(os.environ.get("CUDA_VISIBLE_DEVICES"))
