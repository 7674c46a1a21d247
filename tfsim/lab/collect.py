"""Run ``tfsim collect`` inside an emulated cluster: each task in its own namespace and cgroup."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tfbase.load import LoadMeter, LoadSample
from tfprofile.harness.fork_server import ForkServers
from tfprofile.harness.launcher import CollectConfig, TrainingApi, collect
from tfsim.lab.cgroups import PERIOD_US, CpuStats, LabCgroups
from tfsim.lab.cpu_trace import CpuTrace
from tfsim.lab.netns import EmulatedCluster, Shaper, Transport, allowed_congestion_control, terminate_on_signals
from tfsim.lab.netstats import HostLinkCounters, read_host_counters

COORDINATOR_HOST = "coord"  # a tf2-pss job's coordinator (the cluster's chief): one more host


def host_names(ps_tasks: int, workers: int, *, coordinator: bool = False) -> list[str]:
    """The emulated hosts of a job, PS first; a tf2-pss job's coordinator last."""
    return [f"ps{i}" for i in range(ps_tasks)] + [f"w{i}" for i in range(workers)] + (
        [COORDINATOR_HOST] if coordinator else [])


@dataclasses.dataclass(frozen=True)
class HostQuotas:
    """Each task's CPU quota in cores: ``ps_cores`` for a PS, ``worker_cores`` for a worker.

    ``None`` for both is the co-located setting: every task shares the machine's cores (each
    still runs in a cgroup of its own, without a quota, so that its CPU time is counted).
    ``period_us`` is the CFS period: a task that used its quota waits for the next period, so
    a long period (the kernel's 100 ms) stalls a busy 0.29-core host for up to 71 ms, which a
    real host of slower cores never does; a short one spreads the same quota evenly.
    """

    ps_cores: float | None = None
    worker_cores: float | None = None
    coordinator_cores: float | None = None
    period_us: int = PERIOD_US  # the CFS period over which each quota is enforced

    @property
    def colocated(self) -> bool:
        return self.ps_cores is None and self.worker_cores is None

    def cores_of(self, name: str) -> float | None:
        """The quota of host ``name``: a PS's, the coordinator's (a worker's unless given), or a worker's."""
        if name == COORDINATOR_HOST:
            return self.worker_cores if self.coordinator_cores is None else self.coordinator_cores
        return self.ps_cores if name.startswith("ps") else self.worker_cores


@dataclasses.dataclass(frozen=True)
class LabRun:
    """A finished run in the lab: its directory, the machine's load while it ran, each task's
    CPU use and throttling, each host's link and TCP counters (drops, retransmissions,
    timeouts: :mod:`tfsim.lab.netstats`), and the tasks' CPU sampled while it ran
    (:class:`~tfsim.lab.cpu_trace.CpuTrace`, read over a window by
    :func:`~tfsim.lab.cpu_trace.window_usage`)."""

    run_dir: Path
    load: LoadSample
    tasks: dict[str, CpuStats]
    links: dict[str, HostLinkCounters] = dataclasses.field(default_factory=dict)
    cpu_samples: tuple = ()


def collect_in_lab(config: CollectConfig, rate_bit: int, *, delay_ms: float = 0.0, progress: bool = True,
                   overwrite: bool = False, quotas: HostQuotas | None = None,
                   transport: Transport | None = None, fork_servers: ForkServers | None = None) -> LabRun:
    """Build a cluster with one namespace and one cgroup per task and ``rate_bit`` links, run the
    job there, tear both down; return the :class:`LabRun`. ``transport``: the links' queue and
    TCP's settings (:class:`~tfsim.lab.netns.Transport`). With ``config.capture`` the capture
    is taken on the chief worker's ``eth0`` and iperf3 runs from the chief to PS 0 (both
    outside the tasks' cgroups: they are the measuring instruments, not the job). A tf2-pss
    job's coordinator is one more host (:data:`COORDINATOR_HOST`), with a link and a quota of
    its own, as a real job's coordinator runs on a machine of its own. ``run.json``
    records the links' shaper (``link``), which calibration holds measured rates to.
    ``fork_servers``: the tasks are forked from a process that has imported TensorFlow
    (:mod:`tfprofile.harness.fork_server`); its CPU counts as the lab's, not as outside load."""
    quotas = quotas or HostQuotas()
    transport = transport or Transport()
    names = host_names(config.ps_tasks, config.workers, coordinator=config.api is TrainingApi.TF2_PSS)
    with terminate_on_signals(), allowed_congestion_control(transport.congestion_control), LabCgroups() as cgroups, \
            EmulatedCluster(names, rate_bit=rate_bit, delay_ms=delay_ms, transport=transport) as cluster:
        groups = [cgroups.group(n, quotas.cores_of(n), quotas.period_us) for n in names]
        hosts = [cluster.hosts[n] for n in names]
        def lab_cpu_s() -> float:
            return sum(g.stats().usage_s for g in groups) + (fork_servers.cpu_s() if fork_servers else 0.0)

        with LoadMeter(lab_cpu_s) as meter, CpuTrace(groups) as trace:
            out = collect(config, progress=progress, overwrite=overwrite, hosts=[h.address for h in hosts],
                          command_prefixes=[h.exec_prefix() for h in hosts],
                          task_wrappers=[g.wrapper() for g in groups], capture_interface="eth0",
                          run_record={"link": Shaper.of(rate_bit).link_record(
                              transport.buffer_bytes(rate_bit))}, fork_servers=fork_servers)
        tasks = {g.name: g.stats() for g in groups}
        links = {n: read_host_counters(cluster.hosts[n].namespace, cluster.bridge_namespace, cluster.port_of(n))
                 for n in names}
    return LabRun(out, meter.sample, tasks, links, tuple(trace.samples))
