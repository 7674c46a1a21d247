"""The fork server: a task forked from a process that has imported its modules takes on the
context of the client started in its place (streams, directory, environment, cgroups,
network namespace), exits as the client does, and never outlives it."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfprofile.harness.fork_server import ForkServer, _cgroup_directory

PROJECT = str(Path(__file__).resolve().parents[1])
STUB = '''
import json, os, sys, time

def main(argv):
    if argv[0] == "describe":
        print(json.dumps({"pid": os.getpid(), "net": os.readlink("/proc/self/ns/net"),
                          "cgroup": open("/proc/self/cgroup").read(), "cwd": os.getcwd(),
                          "value": os.environ.get("STUB_VALUE"), "preloaded": "decimal" in sys.modules}),
              flush=True)
        print("a line on stderr", file=sys.stderr, flush=True)
        return int(argv[1])
    print("sleeping", flush=True)
    time.sleep(120)
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''


@pytest.fixture
def server(tmp_path):
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / "fork_stub.py").write_text(STUB)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "modules"), PROJECT])}
    with ForkServer(env, preload=("decimal",)) as running:
        yield running, env


def _client(server, env, args, tmp_path, prefix=(), **kwargs):
    pid_file = tmp_path / "task.pid"
    command = [*prefix, *server.task_command(args, pid_file, module="fork_stub")]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kwargs), pid_file


def _gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_forked_task_takes_on_the_clients_streams_directory_environment_and_exit_status(server, tmp_path):
    running, env = server
    work = tmp_path / "work"
    work.mkdir()
    client, pid_file = _client(running, {**env, "STUB_VALUE": "from the client"}, ["describe", "3"], tmp_path,
                               cwd=work)
    out, err = client.communicate(timeout=60)
    assert client.returncode == 3, err
    seen = json.loads(out)
    assert seen["cwd"] == str(work) and seen["value"] == "from the client"
    assert seen["preloaded"]  # forked from the server, which imported it
    assert seen["pid"] == int(pid_file.read_text()) != client.pid
    assert "a line on stderr" in err


def test_a_signal_to_the_client_stops_its_task_and_the_client_dies_of_it(server, tmp_path):
    running, env = server
    client, pid_file = _client(running, env, ["sleep"], tmp_path)
    assert client.stdout.readline().strip() == "sleeping"
    child = int(pid_file.read_text())
    client.send_signal(signal.SIGTERM)
    assert client.wait(timeout=30) == -signal.SIGTERM
    assert _gone(child)


def test_a_killed_client_takes_its_task_with_it(server, tmp_path):
    running, env = server
    client, pid_file = _client(running, env, ["sleep"], tmp_path)
    assert client.stdout.readline().strip() == "sleeping"
    child = int(pid_file.read_text())
    client.kill()
    client.wait(timeout=30)
    assert _gone(child)


def test_without_a_server_the_client_runs_the_task_itself(tmp_path):
    (tmp_path / "fork_stub.py").write_text(STUB)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), PROJECT])}
    client = subprocess.run([sys.executable, "-m", "tfprofile.harness.fork_client", str(tmp_path / "no-socket"),
                             str(tmp_path / "task.pid"), "--", "fork_stub", "describe", "4"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert client.returncode == 4
    assert "no fork server" in client.stderr and not json.loads(client.stdout)["preloaded"]
    assert not (tmp_path / "task.pid").exists()


def test_a_server_that_cannot_start_says_why(tmp_path):
    from tfbase.errors import CollectError

    with pytest.raises(CollectError, match=r"fork server did not start.*no_such_module"):
        ForkServer(dict(os.environ), preload=("no_such_module_here",))


def test_cgroup_directories_are_found_through_the_mounts(tmp_path):
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
        "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n"
        "41 31 0:38 /docker/abc /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")
    assert _cgroup_directory("cpu,cpuacct", "/lab/w0", mountinfo) == Path("/sys/fs/cgroup/cpu,cpuacct/lab/w0")
    assert _cgroup_directory("name=systemd", "/", mountinfo) == Path("/sys/fs/cgroup/systemd")
    assert _cgroup_directory("", "/docker/abc/t", mountinfo) == Path("/sys/fs/cgroup/unified/t")
    with pytest.raises(OSError, match="memory"):
        _cgroup_directory("memory", "/", mountinfo)


@pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and cgroups need root")
def test_a_forked_task_joins_the_clients_cgroup_and_network_namespace(server, tmp_path):
    from tfsim.lab.cgroups import LabCgroups
    from tfsim.lab.netns import EmulatedCluster

    running, env = server
    with LabCgroups() as cgroups, EmulatedCluster(["a"], rate_bit=10_000_000) as cluster:
        group = cgroups.group("a", 0.5)
        host = cluster.hosts["a"]
        client, _ = _client(running, env, ["describe", "0"], tmp_path,
                            prefix=[*group.wrapper(), *host.exec_prefix()])
        out, err = client.communicate(timeout=60)
        assert client.returncode == 0, err
        seen = json.loads(out)
        assert seen["net"] == f"net:[{os.stat(f'/run/netns/{host.namespace}').st_ino}]"
        assert seen["net"] != os.readlink("/proc/self/ns/net")
        places = [line.split(":", 2)[2] for line in seen["cgroup"].splitlines()]
        assert any(place.endswith(group.paths[0].name) for place in places)


def test_a_killed_launchers_server_directory_is_removed_by_the_next_lab(tmp_path, monkeypatch):
    from tfprofile.harness import fork_server

    live = tmp_path / f"{fork_server.DIRECTORY_PREFIX}{os.getpid()}-abc"
    dead = tmp_path / f"{fork_server.DIRECTORY_PREFIX}999999999-def"
    for directory in (live, dead):
        directory.mkdir()
        (directory / "server.log").write_text("log")
    assert fork_server.remove_stale_directories(tmp_path) == [dead]
    assert live.exists() and not dead.exists()
    monkeypatch.setattr(fork_server.tempfile, "tempdir", str(tmp_path))
    live.rename(dead)
    with fork_server.ForkServers():  # a lab starting removes what a killed one left
        assert not dead.exists()
