"""Run ``tfsim collect`` inside an emulated cluster: each task in its own namespace."""

from __future__ import annotations

from pathlib import Path

from tfprofile.harness.launcher import CollectConfig, collect
from tfsim.lab.netns import EmulatedCluster, terminate_on_signals


def host_names(ps_tasks: int, workers: int) -> list[str]:
    return [f"ps{i}" for i in range(ps_tasks)] + [f"w{i}" for i in range(workers)]


def collect_in_lab(config: CollectConfig, rate_bit: int, *, delay_ms: float = 0.0, progress: bool = True,
                   overwrite: bool = False) -> Path:
    """Build a cluster with one namespace per task and ``rate_bit`` links, run the job there,
    tear the cluster down; return the run directory. With ``config.capture`` the capture is
    taken on the chief worker's ``eth0`` and iperf3 runs from the chief to PS 0."""
    names = host_names(config.ps_tasks, config.workers)
    with terminate_on_signals(), EmulatedCluster(names, rate_bit=rate_bit, delay_ms=delay_ms) as cluster:
        hosts = [cluster.hosts[n] for n in names]
        out = collect(config, progress=progress, overwrite=overwrite, hosts=[h.address for h in hosts],
                      command_prefixes=[h.exec_prefix() for h in hosts], capture_interface="eth0")
    return out

