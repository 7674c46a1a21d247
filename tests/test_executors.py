"""Sweeps on a Dask cluster (simulate.executors): the same rows as the local run, progress for the
whole sweep, and one-line errors for a bad or unreachable scheduler. Needs the ``dask`` extra."""

import os

import pytest
from cli_runner import run

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


def test_an_unreachable_scheduler_is_one_line(capsys, monkeypatch):
    pytest.importorskip("distributed")
    import simulate.executors

    monkeypatch.setattr(simulate.executors, "CONNECT_TIMEOUT_S", 1.0)
    code, _, err = run(["predict", TINY, "--cluster", CLUSTER, "--workers", "1", "--steps", "20", "--warmup", "2",
                        "--no-progress", "--executor", "dask://127.0.0.1:9"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("tfsim: error: --executor: cannot reach the Dask scheduler at tcp://127.0.0.1:9")


def test_without_dask_the_executor_says_what_to_install(capsys):
    import importlib.util

    if importlib.util.find_spec("distributed") is not None:
        pytest.skip("dask's distributed is installed here")
    code, _, err = run(["predict", TINY, "--cluster", CLUSTER, "--workers", "1", "--steps", "20", "--warmup", "2",
                        "--no-progress", "--executor", "dask://127.0.0.1:8786"], capsys)
    assert code == 2 and err.strip() == ("tfsim: error: --executor: a Dask executor needs dask's distributed "
                                         "package: pip install 'tfsim[dask]'")
