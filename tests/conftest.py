"""Shared pytest setup: GPU tests are skipped where CUDA is not available, and no other skip is allowed.

At the end of a session the skipped tests are counted by reason. Without CUDA, a skip whose reason does not
name CUDA (a peer library that is not installed, a missing file) fails the session: a test that cannot run is
a defect, not a pass.
"""

from collections import Counter

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _skip_reasons(config) -> Counter:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    reports = reporter.stats.get("skipped", []) if reporter else []
    return Counter(str(r.longrepr[2]).removeprefix("Skipped: ") if isinstance(r.longrepr, tuple) else str(r.longrepr)
                   for r in reports)


def allowed_skip(reason: str) -> bool:
    """Only a test that needs CUDA may skip on a machine without it."""
    return "cuda" in reason.lower()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    reasons = _skip_reasons(config)
    if reasons:
        terminalreporter.write_line("skipped tests by reason: " + "; ".join(f"{n} × {r}" for r, n in reasons.most_common()))


def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller sees every report
        return
    other = [r for r in _skip_reasons(session.config) if not allowed_skip(r)]
    if other and session.exitstatus == 0:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter:
            reporter.write_line(f"FAILED: skips that do not need CUDA: {other}", red=True)
        session.exitstatus = 1
