"""One measured point of the research-w4 study: a real W-worker job in an emulated cluster,
with the machine's load, the tasks' CPU, tc's queues, ``ss -tin`` and (optionally) a capture
at the PS recorded around it.

    python scripts/research_w4/labrun.py --workers 4 --steps 60 --out study-data/runs/w4-a [--capture]
    python scripts/research_w4/labrun.py --workers 1 --profile --out study-data/calib   # calibration run

Writes into OUT:
- ``run/``          the run directory (tfsim collect's; ``--profile``: with the worker-side capture + iperf3)
- ``point.json``    configuration, measured throughput (lab's rule), load and CPU over the measured window
- ``tc.jsonl``      every ~100 ms: ``tc -s -j qdisc show`` of the PS's namespace and of the bridge
- ``ss.txt``        every ~100 ms: ``ss -tinH`` inside the PS's namespace, after a ``T <unix time>`` line
- ``cpu.jsonl``     every ~0.5 s: /proc/stat, this study's cgroup usage, each task's utime+stime
- ``ps.pcap``       with ``--capture``: tcpdump at the PS's eth0 (both directions, every connection)

Every process started here runs in a cpuacct cgroup of its own, so that the machine's other
load (other engineers' tests) is measured as machine busy time minus this study's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CLK_TCK = os.sysconf("SC_CLK_TCK")
CGROUP_BASE = Path("/sys/fs/cgroup/cpuacct")


# -- queue settings ---------------------------------------------------------------------

def tbf_args(rate_bit: int, queue: str) -> list[str]:
    """tbf arguments as the lab sets them (netns._tbf), with the queue depth chosen by ``queue``:
    ``latency50`` (the lab's default), ``latencyN`` (N ms) or ``limitN`` (N bytes beyond the bucket)."""
    burst = max(96 * 1024, rate_bit // 8 // 250)
    if queue.startswith("latency"):
        depth = ["latency", f"{int(queue[7:])}ms"]
    elif queue.startswith("limit"):
        depth = ["limit", str(burst + int(queue[5:]))]
    else:
        raise ValueError(queue)
    return ["tbf", "rate", f"{rate_bit}bit", "burst", str(burst), *depth,
            "peakrate", f"{int(rate_bit * 1.02)}bit", "mtu", str(96 * 1024)]


def apply_queue(cluster, names: list[str], rate_bit: int, queue: str) -> None:
    if queue == "latency50":
        return
    br = cluster.bridge_namespace
    for n, name in enumerate(names, start=1):
        ns = cluster.hosts[name].namespace
        subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", "eth0", "root",
                        *tbf_args(rate_bit, queue)], check=True)
        subprocess.run(["ip", "netns", "exec", br, "tc", "qdisc", "replace", "dev", f"v{n}", "root",
                        *tbf_args(rate_bit, queue)], check=True)


def apply_congctl(cluster, names: list[str], algorithm: str) -> None:
    """Per-route congestion control in every host namespace (no host sysctl is touched)."""
    from tfsim.lab.netns import SUBNET

    for name in names:
        subprocess.run(["ip", "netns", "exec", cluster.hosts[name].namespace, "ip", "route", "replace",
                        f"{SUBNET}.0/24", "dev", "eth0", "congctl", algorithm], check=True)


def apply_sysctls(cluster, names: list[str], sysctls: dict[str, str]) -> None:
    for name in names:
        for key, value in sysctls.items():
            subprocess.run(["ip", "netns", "exec", cluster.hosts[name].namespace, "sysctl", "-qw",
                            f"{key}={value}"], check=True)


# -- samplers ---------------------------------------------------------------------------

class TcSampler:
    """One ``tc -s -j -batch -`` process per namespace, asked every ``period_s``."""

    def __init__(self, namespaces: dict[str, str], path: Path, period_s: float = 0.1):
        self.namespaces, self.path, self.period_s = namespaces, path, period_s
        self.stop_event = threading.Event()
        self.procs = {}
        for label, ns in namespaces.items():
            self.procs[label] = subprocess.Popen(
                ["ip", "netns", "exec", ns, "stdbuf", "-oL", "tc", "-s", "-j", "-batch", "-"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def _loop(self):
        with open(self.path, "w") as out:
            while not self.stop_event.is_set():
                t0 = time.time()
                for label, proc in self.procs.items():
                    try:
                        proc.stdin.write("qdisc show\n")
                        proc.stdin.flush()
                        line = proc.stdout.readline()
                    except (BrokenPipeError, ValueError):
                        return
                    out.write(json.dumps({"t": time.time(), "ns": label, "q": json.loads(line or "[]")}) + "\n")
                self.stop_event.wait(max(0.0, self.period_s - (time.time() - t0)))

    def pids(self):
        return [p.pid for p in self.procs.values()]

    def stop(self):
        self.stop_event.set()
        self.thread.join(5)
        for proc in self.procs.values():
            with contextlib.suppress(Exception):
                proc.stdin.close()
            with contextlib.suppress(Exception):
                proc.wait(3)


class SsSampler:
    """``ss -tinH`` in one namespace every ``period_s`` (a shell loop inside the namespace)."""

    def __init__(self, ns: str, path: Path, period_s: float = 0.1):
        script = f"while :; do echo T $(date +%s.%N); ss -tinH; sleep {period_s}; done"
        self.handle = open(path, "w")
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns, "sh", "-c", script], stdout=self.handle,
                                     start_new_session=True)

    def stop(self):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(5)
        self.handle.close()


def _proc_cpu_s(pid: int) -> tuple[float, dict] | None:
    """(utime+stime of the process, {thread id: utime+stime}), seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total = (int(fields[11]) + int(fields[12])) / CLK_TCK
        threads = {}
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, IndexError):
                f = (task / "stat").read_text().rsplit(")", 1)[1].split()
                threads[task.name] = (int(f[11]) + int(f[12])) / CLK_TCK
        return total, threads
    except (OSError, IndexError):
        return None


def _stat_ticks() -> dict:
    parts = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
    return {n: int(v) / CLK_TCK for n, v in zip(names, parts)}


class CpuSampler:
    """Machine CPU (/proc/stat), this study's cgroup usage and each TF task's CPU, every ``period_s``."""

    def __init__(self, path: Path, cgroup: Path | None, marker: str, extra_pids=list, period_s: float = 0.5):
        self.path, self.cgroup, self.marker, self.extra_pids, self.period_s = path, cgroup, marker, extra_pids, period_s
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def _tasks(self) -> dict[str, int]:
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmd = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            text = b" ".join(cmd).decode(errors="replace")
            if "tfprofile.harness.task" in text and self.marker in text:
                spec = Path(cmd[-2].decode() if cmd[-1] == b"" else cmd[-1].decode()).name
                found[spec.replace(".spec.json", "")] = int(entry.name)
            elif "tcpdump" in text and self.marker in text:
                found["tcpdump"] = int(entry.name)
        return found

    def _loop(self):
        with open(self.path, "w") as out:
            while not self.stop_event.is_set():
                record = {"t": time.time(), "stat": _stat_ticks()}
                if self.cgroup is not None:
                    with contextlib.suppress(OSError):
                        record["cgroup_s"] = int((self.cgroup / "cpuacct.usage").read_text()) / 1e9
                tasks = {}
                for label, pid in self._tasks().items():
                    cpu = _proc_cpu_s(pid)
                    if cpu:
                        tasks[label] = cpu
                for k, pid in enumerate(self.extra_pids()):
                    cpu = _proc_cpu_s(pid)
                    if cpu:
                        tasks[f"sampler{k}"] = cpu
                record["tasks"] = tasks
                out.write(json.dumps(record) + "\n")
                out.flush()
                self.stop_event.wait(self.period_s)

    def stop(self):
        self.stop_event.set()
        self.thread.join(5)


@contextlib.contextmanager
def own_cgroup(name: str):
    """Put this process (and so everything it starts) into a cpuacct cgroup; yield its path."""
    path = CGROUP_BASE / name
    try:
        path.mkdir(exist_ok=True)
        (path / "tasks").write_text(str(os.getpid()))
    except OSError:
        yield None
        return
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            (CGROUP_BASE / "tasks").write_text(str(os.getpid()))
        for _ in range(50):
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.1)


# -- load over a window -------------------------------------------------------------------

def load_over(cpu_path: Path, t0: float, t1: float) -> dict:
    """Machine busy cores, this study's cores, the rest (others' load), and each task's cores
    and busiest thread, averaged over [t0, t1] (nearest samples inside)."""
    rows = [json.loads(line) for line in open(cpu_path)]
    inside = [r for r in rows if t0 <= r["t"] <= t1]
    if len(inside) < 2:
        return {}
    a, b = inside[0], inside[-1]
    dt = b["t"] - a["t"]
    busy = lambda r: sum(v for k, v in r["stat"].items() if k not in ("idle", "iowait"))
    machine = (busy(b) - busy(a)) / dt
    parts = {k: (b["stat"][k] - a["stat"][k]) / dt for k in a["stat"]}
    mine = (b["cgroup_s"] - a["cgroup_s"]) / dt if "cgroup_s" in a and "cgroup_s" in b else float("nan")
    tasks = {}
    for label in b["tasks"]:
        if label in a["tasks"]:
            ta, tb = a["tasks"][label][1], b["tasks"][label][1]
            busiest = max([tb[k] - ta.get(k, 0.0) for k in tb] or [0.0])
            tasks[label] = {"cores": (b["tasks"][label][0] - a["tasks"][label][0]) / dt,
                            "busiest_thread": busiest / dt}
    return {"window_s": dt, "machine_busy_cores": machine, "study_cores": mine, "others_cores": machine - mine,
            "stat_cores": parts, "tasks": tasks}


# -- one point ------------------------------------------------------------------------------

def run_point(out: Path, *, workers: int, steps: int = 60, warmup: int = 5, rate_bit: int = 400_000_000,
              queue: str = "latency50", sysctls: dict[str, str] | None = None, capture: bool = False,
              profile: bool = False, batch: int = 256, model_fn: str = "tfsim.lab.models:recommender",
              zero_init: bool = True, env: tuple = (), sample: bool = True, progress: bool = False,
              tc_period_s: float = 0.1, ss_period_s: float = 0.1, congctl: str | None = None,
              ss_all: bool = False) -> dict:
    from tfprofile.harness.launcher import CollectConfig, collect
    from tfsim.lab.collect import host_names
    from tfsim.lab.measure import measured_throughput
    from tfsim.lab.netns import EmulatedCluster, terminate_on_signals

    out.mkdir(parents=True, exist_ok=True)
    names = host_names(1, workers)
    config = CollectConfig(
        out_dir=out / "run", model="recommender", model_fn=model_fn, batch_size=batch, steps=steps,
        warmup_steps=warmup, trace_every=2 if profile else steps + 1, workers=workers, ps_tasks=1,
        intra_op_threads=1, inter_op_threads=1, capture=profile, zero_init=zero_init, env=tuple(env),
        iperf_repeats=3, iperf_seconds=2.0, timeout_s=1200.0)
    record = {"workers": workers, "steps": steps, "warmup": warmup, "rate_bit": rate_bit, "queue": queue,
              "sysctls": sysctls or {}, "capture": capture, "profile": profile, "batch": batch, "model_fn": model_fn,
              "env": dict(env), "congctl": congctl, "ss_all": ss_all, "started_unix_s": time.time()}
    tag = f"rw4_{os.getpid()}_{int(time.time())}"
    with own_cgroup(tag) as cgroup, terminate_on_signals(), \
            EmulatedCluster(names, rate_bit=rate_bit) as cluster:
        apply_queue(cluster, names, rate_bit, queue)
        if sysctls:
            apply_sysctls(cluster, names, sysctls)
        if congctl:
            apply_congctl(cluster, names, congctl)
        ps_ns = cluster.hosts["ps0"].namespace
        record["qdiscs"] = subprocess.run(["ip", "netns", "exec", ps_ns, "tc", "qdisc", "show", "dev", "eth0"],
                                          capture_output=True, text=True).stdout.strip()
        tcpdump = tc = ss = None
        marker = str((out / "run").resolve())
        try:
            if capture:
                pcap = out / "ps.pcap"
                tcpdump = subprocess.Popen(["ip", "netns", "exec", ps_ns, "tcpdump", "-i", "eth0", "-B", "524288",
                                            "-s", "0", "-w", str(pcap), "tcp"],
                                           stdout=subprocess.DEVNULL, stderr=open(out / "tcpdump.log", "w"),
                                           start_new_session=True)
                time.sleep(1.0)
            samplers_pids = []
            if sample:
                tc = TcSampler({"ps": ps_ns, "br": cluster.bridge_namespace,
                                **{n: cluster.hosts[n].namespace for n in names if n != "ps0"}},
                               out / "tc.jsonl", tc_period_s).start()
                ss = SsSampler(ps_ns, out / "ss.txt", ss_period_s)
                samplers_pids = tc.pids() + [ss.proc.pid]
                ss_workers = [SsSampler(cluster.hosts[n].namespace, out / f"ss-{n}.txt", ss_period_s)
                              for n in names if n != "ps0"] if ss_all else []
                samplers_pids += [x.proc.pid for x in ss_workers]
            cpu = CpuSampler(out / "cpu.jsonl", cgroup, marker,
                             extra_pids=lambda: samplers_pids + ([tcpdump.pid] if tcpdump else [])).start()
            hosts = [cluster.hosts[n] for n in names]
            collect(config, progress=progress, overwrite=True, hosts=[h.address for h in hosts],
                    command_prefixes=[h.exec_prefix() for h in hosts], capture_interface="eth0")
        finally:
            if tcpdump is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(tcpdump.pid, signal.SIGINT)
                tcpdump.wait(20)
            if tc is not None:
                tc.stop()
            if ss is not None:
                ss.stop()
                for x in ss_workers:
                    x.stop()
            with contextlib.suppress(NameError):
                cpu.stop()
    measured = measured_throughput(out / "run")
    record["measured"] = measured
    # The measured window: the last half of every worker's measured steps (the lab's rule).
    import csv

    rows = [r for r in csv.DictReader(open(out / "run" / "step_times.csv")) if r["measured"] == "1"]
    spans = []
    for w in sorted({r["worker"] for r in rows}):
        mine = sorted((r for r in rows if r["worker"] == w), key=lambda r: int(r["step"]))
        half = mine[len(mine) // 2:]
        spans.append((float(half[0]["start_unix_s"]), float(half[-1]["start_unix_s"]) + float(half[-1]["wall_s"])))
    t0, t1 = max(s[0] for s in spans), min(s[1] for s in spans)
    record["window_unix_s"] = [t0, t1]
    record["load"] = load_over(out / "cpu.jsonl", t0, t1)
    record["finished_unix_s"] = time.time()
    (out / "point.json").write_text(json.dumps(record, indent=2))
    return record


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rate-mbit", type=float, default=400)
    ap.add_argument("--queue", default="latency50")
    ap.add_argument("--sysctl", action="append", default=[], help="KEY=VALUE inside every namespace")
    ap.add_argument("--capture", action="store_true")
    ap.add_argument("--profile", action="store_true", help="the 1-worker calibration run (worker capture + iperf3)")
    ap.add_argument("--no-sample", action="store_true")
    ap.add_argument("--congctl", default=None, help="congestion control per route in every namespace (cubic, reno, bbr)")
    ap.add_argument("--ss-all", action="store_true", help="also sample ss -tin in every worker's namespace")
    ap.add_argument("--env", action="append", default=[], help="KEY=VALUE for every task")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    rec = run_point(args.out, workers=args.workers, steps=args.steps, warmup=args.warmup,
                    rate_bit=int(args.rate_mbit * 1e6), queue=args.queue,
                    sysctls=dict(s.split("=", 1) for s in args.sysctl), capture=args.capture, profile=args.profile,
                    sample=not args.no_sample, congctl=args.congctl, ss_all=args.ss_all, env=tuple(tuple(e.split("=", 1)) for e in args.env))
    load = rec.get("load", {})
    print(json.dumps({"out": str(args.out), "W": rec["workers"], "queue": rec["queue"], "congctl": rec["congctl"],
                      "sysctls": rec["sysctls"],
                      "throughput_eps": round(rec["measured"]["throughput_eps"], 1),
                      "step_median_s": round(rec["measured"]["step_time_median_s"], 4),
                      "machine_cores": round(load.get("machine_busy_cores", float("nan")), 2),
                      "study_cores": round(load.get("study_cores", float("nan")), 2),
                      "others_cores": round(load.get("others_cores", float("nan")), 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
