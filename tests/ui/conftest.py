"""The browser stage: a private JupyterLab server and headless Chromium driven by Playwright.

The server listens on 127.0.0.1 on a free port with a random token, serves a scratch copy of
``notebooks/`` (so nothing the browser does can touch the committed notebooks), has its own settings
(every cell rendered, no autosave, no news or update checks), exposes the app object to the page
(``expose_app_in_browser``) so a test can run all cells, and is stopped at the end of the session
even when a test fails.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from companion.core import repo_path

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = repo_path("build", "ui")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (tests/ui/setup.sh installs it)")
    root = tmp_path_factory.mktemp("lab")
    shutil.copytree(repo_path("notebooks"), root / "notebooks", ignore=shutil.ignore_patterns("*.ipynb_checkpoints"))
    # Render every cell (JupyterLab 4 otherwise virtualises the notebook and detaches off-screen cells).
    settings = root / "settings"
    settings.mkdir()
    (settings / "overrides.json").write_text(json.dumps(
        {"@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
         "@jupyterlab/docmanager-extension:plugin": {"autosave": False},
         "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}))
    port, token = free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(root / "config"), "JUPYTER_RUNTIME_DIR": str(root / "runtime")}
    log = open(root / "lab.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root / 'notebooks'}",
         "--LabApp.expose_app_in_browser=True", f"--LabApp.app_settings_dir={settings}",
         f"--LabApp.user_settings_dir={root / 'user-settings'}", f"--LabApp.workspaces_dir={root / 'workspaces'}", "--ServerApp.disable_check_xsrf=False",
         "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"JupyterLab did not start; log:\n{(root / 'lab.log').read_text()[-2000:]}")
                time.sleep(0.5)
        yield {"base": base, "token": token, "root": root / "notebooks"}
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
        log.close()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"])
        yield chromium
        chromium.close()
