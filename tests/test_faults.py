"""Faults during real runs (``tfsim collect``, ``tfsim lab``): a task killed, Ctrl-C, a full disk,
a tcpdump that cannot start, a lab process killed outright.

Each fault must end with one clear line on stderr, exit status 1 (130 for Ctrl-C), and a clean
state: no process of the run left, no namespace left, no run directory presented as complete.
Tasks are found by their command line (``python -m tfprofile.harness.task RUN.incomplete/logs/
ROLE.spec.json``), which names the run directory. Every wait below is a poll with a deadline,
never a timing assertion.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfsim.lab.netns import list_namespaces

pytestmark = pytest.mark.tensorflow
pytest.importorskip("tensorflow")

FIXTURES = Path(__file__).parent / "fixtures"
IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root")
needs_lab = pytest.mark.skipif(not IS_ROOT or shutil.which("ip") is None or shutil.which("tc") is None,
                               reason="the lab needs root, ip and tc")
# A run that would go on for minutes: every test stops it long before it ends.
LONG_TINY = ("--model", "tiny", "--batch", "4", "--steps", "100000", "--warmup", "1", "--trace-every", "100000",
             "--intra-op-threads", "1", "--inter-op-threads", "1", "--no-progress")


def _env(path_prefix: Path | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}
    if path_prefix is not None:
        env["PATH"] = os.pathsep.join([str(path_prefix), env.get("PATH", "")])
    return env


def tfsim(*args, timeout=300, path_prefix=None):
    return subprocess.run([sys.executable, "-m", "tfsim", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=_env(path_prefix))


STARTED: list[int] = []  # pids of the tfsim processes this module started (their lab namespaces carry them)


def start_tfsim(*args) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "tfsim", *map(str, args)], env=_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    STARTED.append(proc.pid)
    return proc


def processes_mentioning(text: str) -> dict[int, str]:
    """pid -> command line of every process whose command line contains ``text``."""
    out = subprocess.run(["pgrep", "-af", "--", text], capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        pid, _, command = line.partition(" ")
        if int(pid) != os.getpid() and not command.startswith("pgrep"):
            found[int(pid)] = command
    return found


def task_pid(run_root: Path, label: str) -> int | None:
    """The pid of task ``label`` (``ps0``, ``worker1``) of any run under ``run_root``, if running."""
    for pid, command in processes_mentioning(str(run_root)).items():
        if "tfprofile.harness.task" in command and command.endswith(f"/{label}.spec.json"):
            return pid
    return None


def wait_until(condition, timeout_s: float, poll_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(poll_s)
    return bool(condition())


def last_line(stderr: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def assert_clean_failure(stderr: str, run: Path) -> None:
    """No traceback; the run is not presented as complete (an ``.incomplete`` directory at most)."""
    assert "Traceback" not in stderr, stderr[-2000:]
    assert not run.exists()
    partial = run.with_name(run.name + ".incomplete")
    if partial.exists():
        assert not (partial / "run.json").exists()
        from tfbase.errors import RunDirError
        from tfprofile.rundir import open_run_dir

        with pytest.raises(RunDirError):
            open_run_dir(partial)


def first_traced_step_done(run: Path) -> bool:
    """Whether the chief worker has finished its first traced (measured) step: its progress lines,
    kept in ``logs/worker0.progress`` (the traces themselves are written only after the last step)."""
    kept = run.with_name("run.incomplete") / "logs" / "worker0.progress"
    try:
        lines = kept.read_text().splitlines()
    except OSError:
        return False
    return any(json.loads(line.split(" ", 1)[1]).get("traced", 0) >= 1 for line in lines if line.startswith("TFSIM-"))


def host_qdiscs() -> str:
    return subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True).stdout if IS_ROOT else ""


@pytest.fixture
def clean_state(tmp_path):
    """After the test: nothing mentioning tmp_path still runs (killed if so, then the test fails),
    no lab namespace of a tfsim process the test started is left (deleted if so, then the test
    fails), and this host's qdiscs are as before."""
    STARTED.clear()
    qdiscs = host_qdiscs()
    yield tmp_path
    left = {}
    if not wait_until(lambda: not processes_mentioning(str(tmp_path)), 15):
        left = processes_mentioning(str(tmp_path))
        for pid in left:
            with_suppressed_kill(pid)
    stray_namespaces = set().union(*(lab_namespaces_of(pid) for pid in STARTED))
    for ns in stray_namespaces:
        for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split():
            with_suppressed_kill(int(pid))
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
    assert not left, f"processes outlived the run: {left}"
    assert not stray_namespaces, f"namespaces left: {stray_namespaces}"
    assert host_qdiscs() == qdiscs


def with_suppressed_kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop(proc: subprocess.Popen) -> None:
    """Make sure a tfsim process started by a test is gone."""
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


# ------------------------------------------------------------------ collect

@pytest.mark.parametrize("victim, workers", [("ps0", 1), ("worker1", 2)])
def test_collect_task_killed_mid_run(clean_state, victim, workers):
    run = clean_state / "run"
    proc = start_tfsim("collect", *LONG_TINY, "--workers", workers, "--out", run)
    try:
        assert wait_until(lambda: first_traced_step_done(run), 120), "the run never reached its first measured step"
        pid = task_pid(clean_state, victim)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        stop(proc)
    assert proc.returncode == 1
    assert last_line(err).startswith(f"tfsim: collect failed: task {victim} was killed by SIGKILL")
    assert_clean_failure(err, run)


def test_ctrl_c_mid_run_leaves_no_complete_run(clean_state):
    run = clean_state / "run"
    proc = start_tfsim("collect", *LONG_TINY, "--out", run)
    try:
        assert wait_until(lambda: first_traced_step_done(run), 120)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        stop(proc)
    assert proc.returncode == 130 and last_line(err) == "tfsim: interrupted"
    assert_clean_failure(err, run)
    assert (run.with_name("run.incomplete") / "logs" / "worker0.log").exists()  # kept for a look


def test_sigterm_mid_run_stops_every_task(clean_state):
    """SIGTERM (kill, timeout, a scheduler) stops the run as Ctrl-C does: every task stopped, exit 143."""
    run = clean_state / "run"
    proc = start_tfsim("collect", *LONG_TINY, "--out", run)
    try:
        assert wait_until(lambda: first_traced_step_done(run), 120)
        assert task_pid(clean_state, "ps0") and task_pid(clean_state, "worker0")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        stop(proc)
    assert proc.returncode == 143 and last_line(err) == "tfsim: terminated by SIGTERM"
    assert_clean_failure(err, run)  # and clean_state checks that no task is left


@needs_root
def test_sigterm_during_iperf3_and_capture_leaves_no_process(clean_state):
    """SIGTERM while iperf3 measures the link, with tcpdump capturing (and, below, while tcpdump is
    starting): tcpdump, the iperf3 server and client, and any task are all gone when the command
    has exited."""
    if shutil.which("iperf3") is None or shutil.which("tcpdump") is None:
        pytest.skip("needs iperf3 and tcpdump")
    from test_signals import alive, descendants

    run = clean_state / "run"
    proc = start_tfsim("collect", *LONG_TINY, "--capture", "--out", run)
    seen: set[int] = set()
    try:
        def iperf_running() -> bool:
            seen.update(descendants(proc.pid))
            return any(_command(pid).startswith("iperf3 ") for pid in seen if alive(pid)) or proc.poll() is not None
        assert wait_until(iperf_running, 120, poll_s=0.05) and proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        stop(proc)
    assert proc.returncode == 143 and last_line(err) == "tfsim: terminated by SIGTERM"
    commands = {pid: _command(pid) for pid in seen}
    left = {pid: commands[pid] for pid in seen if alive(pid)}
    assert not left, left
    assert_clean_failure(err, run)


@needs_root
def test_sigterm_while_tcpdump_starts_leaves_no_tcpdump(clean_state):
    if shutil.which("iperf3") is None or shutil.which("tcpdump") is None:
        pytest.skip("needs iperf3 and tcpdump")
    from test_signals import alive, descendants

    run = clean_state / "run"
    proc = start_tfsim("collect", *LONG_TINY, "--capture", "--out", run)
    seen: set[int] = set()
    try:
        def tcpdump_started() -> bool:
            seen.update(descendants(proc.pid))
            return any(_command(pid).startswith("tcpdump ") for pid in seen) or proc.poll() is not None
        assert wait_until(tcpdump_started, 120, poll_s=0.005) and proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        stop(proc)
    assert proc.returncode == 143 and last_line(err) == "tfsim: terminated by SIGTERM"
    left = {pid: _command(pid) for pid in seen if alive(pid)}
    assert not left, left


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs at tmp_path/disk, unmounted afterwards whatever happens."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(directory: Path, leave_bytes: int) -> None:
    """Fill ``directory``'s file system until at most ``leave_bytes`` are free."""
    stats = os.statvfs(directory)
    size = max(0, stats.f_bavail * stats.f_frsize - leave_bytes)
    try:
        with open(directory / "filler", "wb") as handle:
            handle.write(b"\0" * size)
    except OSError:
        pass  # full already: that is the point


@needs_root
@pytest.mark.parametrize("leave_bytes", [0, 256 * 1024], ids=["full-from-the-start", "fills-during-the-run"])
def test_collect_onto_a_full_disk(clean_state, small_disk, leave_bytes):
    fill(small_disk, leave_bytes)
    run = small_disk / "run"
    # Every measured step traced: the traces fill the rest of the disk within a few steps.
    result = tfsim("collect", *LONG_TINY, "--trace-every", "1", "--out", run, timeout=240)
    assert result.returncode == 1
    assert last_line(result.stderr).startswith(f"tfsim: collect failed: no space left on {small_disk.resolve()}")
    assert_clean_failure(result.stderr, run)


@needs_root
def test_collect_capture_when_tcpdump_cannot_start(clean_state):
    fake = clean_state / "bin"
    fake.mkdir()
    (fake / "tcpdump").write_text("#!/bin/sh\necho 'tcpdump: lo: SIOCETHTOOL(SIOCGIFFLAGS): no such device' >&2\n"
                                  "exit 1\n")
    (fake / "tcpdump").chmod(0o755)
    if shutil.which("iperf3") is None:
        pytest.skip("needs iperf3")
    run = clean_state / "run"
    result = tfsim("collect", *LONG_TINY, "--capture", "--out", run, path_prefix=fake, timeout=120)
    assert result.returncode == 1
    assert last_line(result.stderr).startswith("tfsim: collect failed: tcpdump failed to start: tcpdump: lo: ")
    assert_clean_failure(result.stderr, run)


# ------------------------------------------------------------------ lab

def start_lab(out: Path) -> subprocess.Popen:
    return start_tfsim("lab", "--preset", "quick", "--out", out, "--no-progress")


def wait_for_tasks(proc: subprocess.Popen, out: Path) -> None:
    """Until a run's PS and chief worker are up inside the lab's namespaces."""
    up = wait_until(lambda: proc.poll() is not None or (task_pid(out, "ps0") and task_pid(out, "worker0")), 180)
    assert up and proc.poll() is None, "the lab never started its tasks"


def kill_a_runs_task(proc: subprocess.Popen, out: Path, label: str, attempts: int = 5) -> None:
    """SIGKILL task ``label`` of a lab run. A run of the quick preset lasts seconds, so the run
    whose tasks were seen up can end before the kill (CI saw it once): then the next run's."""
    for _ in range(attempts):
        wait_for_tasks(proc, out)
        pid = task_pid(out, label)
        if pid is None:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            return
        except ProcessLookupError:
            continue
    pytest.fail(f"no run's {label} could be killed in {attempts} runs")


def lab_namespaces_of(pid: int) -> set[str]:
    return {ns for ns in list_namespaces() if ns.startswith(f"tfsimlab-{pid}-")}


@needs_lab
def test_lab_ps_killed(clean_state):
    out = clean_state / "lab"
    proc = start_lab(out)
    try:
        kill_a_runs_task(proc, out, "ps0")
        _, err = proc.communicate(timeout=120)
    finally:
        stop(proc)
    assert proc.returncode == 1
    assert last_line(err).startswith("tfsim: lab failed: task ps0 was killed by SIGKILL")
    assert "Traceback" not in err
    assert not lab_namespaces_of(proc.pid)
    assert not (out / "results.csv").exists()


@needs_lab
def test_lab_ctrl_c(clean_state):
    out = clean_state / "lab"
    proc = start_lab(out)
    try:
        wait_for_tasks(proc, out)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        stop(proc)
    assert proc.returncode == 130 and last_line(err) == "tfsim: interrupted"
    assert "Traceback" not in err
    assert not lab_namespaces_of(proc.pid)
    assert not (out / "results.csv").exists()


@needs_lab
def test_cleanup_after_the_lab_is_killed(clean_state):
    out = clean_state / "lab"
    keep = [f"tfsimlab-{os.getpid()}-beef-live", f"tfsimtest-{os.getpid()}-other"]
    for ns in keep:
        subprocess.run(["ip", "netns", "add", ns], check=True)
    proc = start_lab(out)
    try:
        wait_for_tasks(proc, out)
        proc.kill()
        proc.communicate()  # reaped: its pid no longer counts as alive
        left = lab_namespaces_of(proc.pid)
        assert len(left) == 3  # the bridge, ps0 and w0
        result = tfsim("lab", "--cleanup", timeout=60)
        assert result.returncode == 0, result.stderr
        namespaces_line, groups_line = result.stdout.strip().splitlines()
        head, _, names = namespaces_line.partition(": ")
        removed = set(names.split(", "))
        assert head.startswith("removed ") and left <= removed
        # and the killed lab's cgroups, with its tasks' (each task runs in one of its own)
        from tfsim.lab.cgroups import PREFIX, find_hierarchy

        assert groups_line.startswith("removed ")
        assert not list(find_hierarchy().cpu.glob(f"{PREFIX}-{proc.pid}-*"))
        # Anything else removed was left by another dead lab run, never by a live process.
        assert all(ns.startswith("tfsimlab-") and not os.path.exists(f"/proc/{ns.split('-')[1]}") for ns in removed)
        assert not lab_namespaces_of(proc.pid)
        assert set(keep) <= set(list_namespaces())
    finally:
        stop(proc)
        for ns in keep:
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
