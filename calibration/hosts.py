"""The hosts the one-worker run's tasks had, from what ``collect`` recorded (docs/calibration.md §4.10).

``run.json``'s ``task_cpu.limits`` gives each task's CPU affinity (``cpus``), the tightest CPU
quota of its cgroups (``quota_cores``, None: none) and the lesser (``cores``). Where every PS
and worker task had a quota and the quotas fit the machine together, each task ran as on a host
of its own with that many cores (emulated hosts, as the lab builds them): CLUSTER.json's
``hosts`` records them and a prediction given no hosts uses them. Affinities alone say
nothing of that (two tasks on the same 4 CPUs both report 4), nor do tasks that together may
use more than the machine (they shared it): ``hosts`` is then absent.
"""

from __future__ import annotations

PS_PREFIX = "ps"
WORKER_PREFIX = "worker"
FIT_SLACK_CORES = 1e-6  # quotas written with 5 decimals may add up a hair above the machine


def hosts_record(run: dict) -> dict | None:
    """CLUSTER.json's ``hosts`` for a collected run (``run``: its ``run.json``), or None.

    Examples
    --------
    >>> limits = {"ps0": {"cpus": 2, "quota_cores": 0.5, "cores": 0.5},
    ...           "worker0": {"cpus": 2, "quota_cores": 0.25, "cores": 0.25}}
    >>> hosts_record({"task_cpu": {"limits": limits}, "machine": {"cores": 2}})["ps_cores"]
    0.5
    >>> hosts_record({"task_cpu": {"limits": {"ps0": limits["ps0"]}}, "machine": {"cores": 2}}) is None
    True
    """
    task_cpu = run.get("task_cpu")
    machine = run.get("machine")
    if not isinstance(task_cpu, dict) or not isinstance(machine, dict):
        return None
    limits = task_cpu.get("limits")
    machine_cores = machine.get("cores")
    if not isinstance(limits, dict) or not _positive(machine_cores):
        return None
    quotas: dict[str, list[float]] = {PS_PREFIX: [], WORKER_PREFIX: []}
    for task, limit in limits.items():
        role = next((r for r in quotas if str(task).startswith(r)), None)
        if role is None:
            continue  # a tf2-pss coordinator: it runs no ops of the step
        quota = limit.get("quota_cores") if isinstance(limit, dict) else None
        if not _positive(quota):
            return None  # a task without a quota shared the machine's cores
        quotas[role].append(min(float(quota), float(limit.get("cpus") or quota)))
    if not quotas[PS_PREFIX] or not quotas[WORKER_PREFIX]:
        return None
    if sum(quotas[PS_PREFIX]) + sum(quotas[WORKER_PREFIX]) > float(machine_cores) + FIT_SLACK_CORES:
        return None
    return {"ps_cores": min(quotas[PS_PREFIX]), "worker_cores": min(quotas[WORKER_PREFIX]),
            "machine_cores": float(machine_cores),
            "source": "run.json task_cpu limits: every PS and worker task had a CPU quota, together within "
                      "the machine's cores"}


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
