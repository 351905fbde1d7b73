"""The runner's own LocalCluster listens on the loopback interface only: a Dask scheduler runs whatever code
its clients send, so nothing outside this machine may reach it (README: Running on an existing Dask cluster)."""

from __future__ import annotations

import ipaddress
import os
from urllib.parse import urlparse

import psutil


def test_the_default_local_cluster_listens_on_127_0_0_1_only(client):
    info = client.scheduler_info()
    addresses = [info["address"], *info["workers"], *(w["nanny"] for w in info["workers"].values()), client.dashboard_link]
    assert len(addresses) == 6  # the scheduler, two workers and their nannies, the dashboard
    for address in addresses:
        assert urlparse(address).hostname == "127.0.0.1", address
    me = psutil.Process(os.getpid())
    listening = [c.laddr for p in [me, *me.children(recursive=True)] for c in p.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN]
    assert listening, "the cluster's sockets were not found"
    for laddr in listening:
        assert ipaddress.ip_address(laddr.ip).is_loopback, f"a socket listens on {laddr.ip}:{laddr.port}"
