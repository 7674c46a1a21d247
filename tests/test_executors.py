"""Sweeps on a Dask cluster (simulate.executors): the same rows as the local run, progress for the
whole sweep, and one-line errors for a bad or unreachable scheduler. Needs the ``dask`` extra."""

import json
import os

import pytest
from cli_runner import run
from shared_fixtures import CATALOGUE

import simulate
import tfprofile
from simulate.executors import DaskExecutor, LocalExecutor, parse_executor
from tfbase.errors import UsageError

DATA = os.path.join(os.path.dirname(__file__), "..", "data")
TINY = os.path.join(DATA, "profiles", "tiny.npz")
CLUSTER = os.path.join(DATA, "clusters", "lab-1gbit.json")


@pytest.fixture(scope="module")
def scheduler():
    """The address of a local Dask cluster: two worker processes of one thread each."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield cluster.scheduler_address


def test_a_sweep_on_dask_equals_the_local_run(scheduler, tmp_path, capsys):
    profile = tfprofile.load_profile(TINY)
    options = dict(workers="1-3", transfer=["grpc", "fifo"], steps=80, warmup=10, seed=5)
    local = simulate.predict(profile, CLUSTER, **options, jobs=2)
    address = "dask://" + scheduler[len("tcp://"):]
    remote = simulate.predict(profile, CLUSTER, **options, executor=address)
    assert remote.equals(local) and len(local) == 6
    assert remote["throughput_eps"].iloc[0] > 0
    argv = ["predict", TINY, "--cluster", CLUSTER, "--workers", "1-3", "--steps", "80", "--warmup", "10", "--seed",
            "5", "--no-progress", "--transfer", "grpc,fifo"]
    code, _, err = run([*argv, "--jobs", "2", "--json", tmp_path / "local.json"], capsys)
    assert code == 0, err
    code, _, err = run([*argv, "--executor", address, "--json", tmp_path / "dask.json"], capsys)
    assert code == 0, err
    assert (tmp_path / "dask.json").read_bytes() == (tmp_path / "local.json").read_bytes()



class InProcessExecutor:
    """An executor of the user's own (simulate.executors.Executor): every configuration in this
    process, in reverse order, to show the rows do not depend on the order results arrive in."""

    def __init__(self):
        self.calls = 0

    def check(self):
        pass

    def map(self, fn, shared, items, *, jobs, on_result=None):
        results = [None] * len(items)
        for k in reversed(range(len(items))):
            results[k] = fn(shared, items[k])
            self.calls += 1
            if on_result is not None:
                on_result(k, results[k])
        return results


def test_a_sweep_through_an_executor_of_ones_own_equals_the_local_run():
    profile = tfprofile.load_profile(TINY)
    options = dict(workers="1-3", transfer=["grpc", "fifo"], steps=60, warmup=10, seed=2)
    executor = InProcessExecutor()
    assert parse_executor(executor) is executor
    own = simulate.predict(profile, CLUSTER, **options, executor=executor)
    assert executor.calls == 6
    assert own.equals(simulate.predict(profile, CLUSTER, **options, jobs=2))


def test_an_object_without_map_is_not_an_executor():
    with pytest.raises(UsageError, match="executor"):
        parse_executor(object())




def _tree(directory):
    """Every file under ``directory`` by its relative path, with its bytes."""
    return {str(path.relative_to(directory)): path.read_bytes() for path in sorted(directory.rglob("*"))
            if path.is_file()}


@pytest.mark.parametrize("command", ["compare", "report", "plan"])
def test_compare_report_and_plan_on_dask_write_the_local_bytes(scheduler, tmp_path, capsys, command):
    address = "dask://" + scheduler[len("tcp://"):]
    common = [TINY, "--cluster", CLUSTER, "--workers", "1-3", "--steps", "60", "--seed", "3", "--no-progress"]
    if command == "compare":
        def argv(out):
            return ["compare", *common, "--json", out / "c.json", "--csv", out / "c.csv", "--plot", out / "c.png"]
    elif command == "report":
        def argv(out):
            return ["report", *common, "--warmup", "10", "--worker-speed", "1,0.5", "--price", "worker=1,ps=0.5",
                    "--out", out]
    else:
        (tmp_path / "types.toml").write_text(CATALOGUE)

        def argv(out):
            return ["plan", *common, "--catalogue", tmp_path / "types.toml", "--target", "800", "--json",
                    out / "plan.json"]
    outputs = {}
    for where, extra in (("local", ["--jobs", "2"]), ("dask", ["--executor", address])):
        out = tmp_path / where
        out.mkdir()
        code, text, err = run([*argv(out), *extra], capsys)
        assert code == 0, err
        outputs[where] = (_tree(out), text.replace(str(out), "OUT"))
    files, text = outputs["local"]
    assert len(files) >= (3 if command == "compare" else 1) and all(files.values())
    assert outputs["dask"] == outputs["local"]
    if command == "plan":
        assert json.loads(files["plan.json"])["plan"]["throughput_eps"] >= 800
    if command == "report":
        assert json.loads(files["report.json"])["stragglers"]["rows"]


def test_a_bad_executor_is_one_line_naming_the_option_in_every_sweep_command(tmp_path, capsys):
    (tmp_path / "types.toml").write_text(CATALOGUE)
    for argv in (["predict", TINY, "--cluster", CLUSTER], ["compare", TINY, "--cluster", CLUSTER],
                 ["report", TINY, "--cluster", CLUSTER, "--out", tmp_path / "r"],
                 ["plan", TINY, "--cluster", CLUSTER, "--catalogue", tmp_path / "types.toml"]):
        code, out, err = run([*argv, "--workers", "1", "--steps", "20", "--no-progress", "--executor", "ray://x:1"],
                             capsys)
        assert code == 2 and err == "tfsim: error: --executor: 'ray://x:1': give local or dask://HOST:PORT\n", argv
        assert out == ""
    assert not (tmp_path / "r").exists()


def test_a_sweep_stopped_here_resumes_on_dask(scheduler, tmp_path, monkeypatch):
    from tfbase.journal import JournalWriter

    profile = tfprofile.load_profile(TINY)
    options = dict(workers="1-3", transfer=["grpc", "fifo"], steps=80, warmup=10, seed=6)
    whole = simulate.predict(profile, CLUSTER, **options, jobs=2)
    journal = tmp_path / "sweep.journal"
    original, written = JournalWriter.append, []

    def append(self, record_id, value):  # a stop after two configurations
        if len(written) == 2:
            raise KeyboardInterrupt
        original(self, record_id, value)
        written.append(record_id)

    monkeypatch.setattr(JournalWriter, "append", append)
    with pytest.raises(KeyboardInterrupt):
        simulate.predict(profile, CLUSTER, **options, jobs=2, journal=journal)
    monkeypatch.undo()
    address = "dask://" + scheduler[len("tcp://"):]
    resumed = simulate.predict(profile, CLUSTER, **options, executor=address, journal=journal, resume=True)
    assert resumed.equals(whole) and len(written) == 2
    assert journal.read_text().count("\n") == 1 + len(whole)


def test_progress_counts_the_whole_sweep_on_dask(scheduler):
    seen = []
    executor = parse_executor("dask://" + scheduler[len("tcp://"):])
    out = executor.map(_square, 10, [1, 2, 3, 4], on_result=lambda index, result: seen.append((index, result)))
    assert out == [11, 14, 19, 26] and sorted(seen) == list(enumerate(out))


def _square(shared, item):
    return shared + item * item


def test_executor_addresses():
    assert parse_executor(None) == LocalExecutor() == parse_executor("local")
    assert parse_executor("dask://sched.example:8786") == DaskExecutor("tcp://sched.example:8786")
    for bad in ("ray://x:1", "dask://x", "dask://:8786", "dask://x:0", "dask://x:99999", "tcp://x:1"):
        with pytest.raises(UsageError) as err:
            parse_executor(bad)
        assert err.value.source == "executor"


def test_an_unreachable_scheduler_is_one_line(capsys, monkeypatch, tmp_path):
    pytest.importorskip("distributed")
    import simulate.executors

    monkeypatch.setattr(simulate.executors, "CONNECT_TIMEOUT_S", 1.0)
    (tmp_path / "types.toml").write_text(CATALOGUE)
    for argv in (["predict", TINY, "--cluster", CLUSTER, "--json", tmp_path / "p.json"],
                 ["compare", TINY, "--cluster", CLUSTER, "--json", tmp_path / "c.json"],
                 ["report", TINY, "--cluster", CLUSTER, "--out", tmp_path / "r"],
                 ["plan", TINY, "--cluster", CLUSTER, "--catalogue", tmp_path / "types.toml", "--json",
                  tmp_path / "plan.json"]):
        code, _, err = run([*argv, "--workers", "1", "--steps", "60", "--executor",  # progress on: still one line
                            "dask://127.0.0.1:9"], capsys)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, (argv[0], err)
        assert lines[0].startswith("tfsim: error: --executor: cannot reach the Dask scheduler at tcp://127.0.0.1:9")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["types.toml"]  # no output written, no directory left


def test_without_dask_the_executor_says_what_to_install(capsys):
    import importlib.util

    if importlib.util.find_spec("distributed") is not None:
        pytest.skip("dask's distributed is installed here")
    code, _, err = run(["predict", TINY, "--cluster", CLUSTER, "--workers", "1", "--steps", "20", "--warmup", "2",
                        "--no-progress", "--executor", "dask://127.0.0.1:8786"], capsys)
    assert code == 2 and err.strip() == ("tfsim: error: --executor: a Dask executor needs dask's distributed "
                                         "package: pip install 'tfsim[dask]'")
