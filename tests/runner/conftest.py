"""One 2-worker Dask ``LocalCluster`` shared by the runner and sweep tests of a pytest process."""

from __future__ import annotations

import nbformat
import pytest


@pytest.fixture(scope="session")
def client():
    from companion import runner

    client, cluster = runner.connect(None, 2)
    yield client
    client.close()
    cluster.close(timeout=20)


def tiny_notebook(path, code, params='PROFILE = "auto"\nSEED = 0'):
    """A throwaway notebook: a parameters cell and one code cell."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cell = nbformat.v4.new_code_cell(params)
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell, nbformat.v4.new_code_cell(code)]
    nbformat.write(nb, path)
    return path
