"""Where one task of a job given one host per task sits, and what it does beside training
(:func:`tfprofile.harness.role.run_task` runs it; :mod:`tfprofile.harness.capture_site` decides
its part in a capture)."""

from __future__ import annotations

import dataclasses

from tfbase.errors import UsageError
from tfprofile.harness.capture import IPERF_PORT
from tfprofile.harness.tfconfig import ClusterSpec, TaskId


@dataclasses.dataclass(frozen=True)
class RoleOptions:
    """Where this task sits in the job and what it does beside training; ``repeat``: how many
    times the job runs, in step on every host (:mod:`tfprofile.harness.handoff`)."""

    task: TaskId
    cluster: ClusterSpec
    cluster_source: str = "TF_CONFIG"
    connect_timeout_s: float = 30.0
    iperf: bool = False
    iperf_server: bool = False
    iperf_port: int = IPERF_PORT
    capture_interface: str | None = None
    repeat: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.repeat, bool) or not isinstance(self.repeat, int) or self.repeat < 1:
            raise UsageError("repeat", f"must be at least 1, not {self.repeat!r}")
        if not self.connect_timeout_s > 0:
            raise UsageError("connect_timeout_s", f"must be positive, not {self.connect_timeout_s}")
        if not 0 < self.iperf_port < 65536:
            raise UsageError("iperf_port", f"must be a TCP port, not {self.iperf_port}")
        if self.iperf_server and self.task.role != "ps":
            raise UsageError("iperf_server", f"runs on a PS task, not on {self.task.label}")
        if self.capture_interface is not None and not (self.task.is_chief or self.task == TaskId("ps", 0)):
            raise UsageError("capture_interface", f"the capture runs on the chief (worker 0) or, with capture_site "
                                                  f"ps, on ps0; not on {self.task.label}")
        if self.iperf and not (self.task.is_chief or self.task.is_coordinator):
            raise UsageError("iperf", f"runs on the chief (worker 0; a tf2-pss job's coordinator), not on "
                                      f"{self.task.label}")
