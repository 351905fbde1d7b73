"""The registry of studies (companion/bench.py) is the one list: `make bench` / `make bench-gpu`, the table of
benchmarks/README.md, README.md's status column and the committed results are derived from it, and a test fails
when a script, a paper, a kernel or a README row drifts from it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from companion import bench
from companion.core import ParameterError, repo_path
from companion.runner import discover


def test_no_benchmark_script_outside_the_entry():
    scripts = sorted(p.name for p in repo_path("benchmarks").glob("*.py"))
    assert not scripts, f"{scripts}: a study is a module listed in companion/bench.py, run by python -m companion.bench"


def test_every_paper_has_a_study_and_every_study_a_paper():
    papers = {slug for slug, nb in discover().items() if not nb.stem.startswith("00_")}
    assert papers == {b.paper for b in bench.BENCHMARKS}
    assert papers <= set(bench.BY_NAME), "a paper's own study is registered under its slug"
    assert all(b.where in ("gpu", "cpu") and b.measures for b in bench.BENCHMARKS)


def test_every_committed_result_comes_from_a_registered_study():
    names = {bench.study(b.name).RESULTS_NAME for b in bench.BENCHMARKS}
    orphans = [p.name for p in repo_path("benchmarks", "results").glob("*.json")
               if not any(p.stem == n or p.stem.startswith(n + "_run") for n in names)]
    assert not orphans, f"results no registered study writes: {orphans}"


def test_make_bench_targets_are_derived_from_the_registry(capsys):
    makefile = repo_path("Makefile").read_text()
    assert "companion.bench --list gpu" in makefile and "companion.bench --list cpu" in makefile
    assert "GPU_BENCHMARKS" not in makefile, "the Makefile lists no study by hand"
    assert bench.main(["--list", "gpu"]) == 0
    listed = capsys.readouterr().out.split()
    assert [s.split(":")[0] for s in listed] == [b.name for b in bench.BENCHMARKS if b.where == "gpu"]
    assert all(int(s.split(":")[1]) == bench.study(s.split(":")[0]).DEADLINE_S + bench.GRACE_S for s in listed)


def test_benchmarks_readme_table_is_the_registry():
    text = repo_path("benchmarks", "README.md").read_text()
    assert bench.benchmarks_table() in text, ("benchmarks/README.md's table drifted from companion/bench.py: paste the "
                                              "output of `python -m companion.bench --markdown benchmarks`")


def test_readme_papers_table_and_status_column_are_the_registry():
    text = repo_path("README.md").read_text()
    assert bench.papers_table() in text, ("README.md's table of papers drifted from companion/bench.py: paste the "
                                          "output of `python -m companion.bench --markdown papers`")


def test_kernels_registry_matches_what_each_package_imports():
    used = {}
    for folder in sorted(p for p in repo_path("companion").iterdir() if (p / "__init__.py").exists()):
        found = sorted({m for f in folder.rglob("*.py") for m in re.findall(r"companion_kernels\.(\w+)", f.read_text())}
                       - {"dispatch"})
        if found:
            used[folder.name] = tuple(found)
    assert used == {k: tuple(sorted(v)) for k, v in bench.KERNELS.items()}


def test_resume_refuses_a_file_recorded_on_another_device(tmp_path, capsys):
    """One results file is one device (its stamp covers every stage): resuming a file of another card is refused
    before any stage runs, and the file is left as it was."""
    cpu_study = next(b.name for b in bench.BENCHMARKS if b.where == "cpu")
    recorded = tmp_path / "recorded.json"
    recorded.write_text('{"device": "NVIDIA H200", "profile": {}, "stages": {}}')
    before = recorded.read_text()
    assert bench.main([cpu_study, "--stages", "x", "--resume", str(recorded), "--out-dir", str(tmp_path / "out")]) == 2
    assert "its stages ran on 'NVIDIA H200'" in capsys.readouterr().err and recorded.read_text() == before
    assert not (tmp_path / "out").exists()


def test_set_changes_only_the_named_knobs_of_a_copy():
    profile = {"train_seconds": 470.0, "workers": 13, "train": {"lr": 1e-3, "compile": True, "schedule": "cosine"},
               "checkpoint": None}
    out = bench.set_knobs(profile, ["train.lr=2e-3", "train_seconds=90", "train.schedule=linear", "workers=4",
                                    "train.compile=False", "checkpoint='x.safetensors'"])
    assert out == {"train_seconds": 90.0, "workers": 4, "checkpoint": "x.safetensors",
                   "train": {"lr": 2e-3, "compile": False, "schedule": "linear"}}
    assert type(out["train_seconds"]) is float  # an int where a float was: recorded as the float it stands for
    assert profile["train"]["lr"] == 1e-3 and profile["train_seconds"] == 470.0  # the study's profile is untouched
    assert bench.set_knobs({"levels": (2,)}, ["levels=[2, 4]"]) == {"levels": [2, 4]}  # a list for a tuple, as a sweep


@pytest.mark.parametrize("assignment, match", [
    ("train.lrr=1", r"a knob of train: lr"),
    ("nope=1", r"a knob of the profile: train_seconds, workers, train"),
    ("workers.n=1", r"a knob of workers: none \(not a dict\)"),
    ("workers=2.5", r"a int for workers \(now 13\)"),
    ("workers=True", r"a int for workers"),
    ("train.lr=fast", r"a float for train.lr"),
    ("train", r"KEY=VALUE"),
])
def test_set_refuses_an_unknown_knob_or_another_type(assignment, match):
    with pytest.raises(ParameterError, match=match):
        bench.set_knobs({"train_seconds": 470.0, "workers": 13, "train": {"lr": 1e-3}}, [assignment])


def test_set_is_recorded_in_the_profile_of_a_run(tmp_path):
    """A smoke run with --set records the changed profile and the command; a bad --set is refused before any
    stage, writing nothing. In a subprocess, as every smoke run of the tests: --smoke puts the kernels in the Triton
    interpreter, which must not leak into the other tests' process."""
    def smoke(*args):
        return subprocess.run([sys.executable, "-m", "companion.bench", "rtcfr", "--smoke", *args], cwd=repo_path(),
                              env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo_path())},
                              capture_output=True, text=True, timeout=300)

    ok = smoke("--set", "correctness.iterations=30", "--out-dir", str(tmp_path / "ok"))
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-3000:]
    rec = json.loads((tmp_path / "ok" / "rtcfr_gpu.json").read_text())
    assert rec["profile"]["correctness"]["iterations"] == 30 and "--set correctness.iterations=30" in rec["command"]
    bad = smoke("--set", "nope=1", "--out-dir", str(tmp_path / "bad"))
    assert bad.returncode == 2 and "refused: parameter --set='nope' is not allowed" in bad.stderr
    assert not (tmp_path / "bad").exists()
