"""One 2-worker Dask ``LocalCluster`` shared by the runner and sweep tests of a pytest process, and a
cluster of its own for a test that kills workers (their nannies restart them, but not always at once,
and a test after it must not find one worker missing)."""

from __future__ import annotations

import nbformat
import pytest


def _local_client():
    from companion import runner

    client, cluster = runner.connect(None, 2)
    yield client
    client.close()
    cluster.close(timeout=20)


@pytest.fixture(scope="session")
def client():
    yield from _local_client()


@pytest.fixture
def own_client():
    yield from _local_client()


def tiny_notebook(path, code, params='PROFILE = "auto"\nSEED = 0'):
    """A throwaway notebook: a parameters cell and one code cell."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cell = nbformat.v4.new_code_cell(params)
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell, nbformat.v4.new_code_cell(code)]
    nbformat.write(nb, path)
    return path
