"""An interrupted sweep resumes from its journal (simulate.sweep_journal, tfbase.journal) and ends
with the bytes of an uninterrupted run: through the library, through predict, compare, report and
plan stopped after k configurations, and through real signals (SIGINT, SIGTERM, SIGKILL) sent to
a running ``tfsim predict``. A journal of other inputs is refused; a torn last record is run
again; damage before it is refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_runner import run
from shared_fixtures import CATALOGUE, alive

import simulate
import tfprofile
from simulate.sweep import plan_sweep
from simulate.sweep_journal import open_journal, sweep_key
from tfbase.errors import InputError, UsageError
from tfbase.journal import JOURNAL_FORMAT, JournalWriter, digest, read_journal

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
TINY = DATA / "profiles" / "tiny.npz"
CLUSTER = DATA / "clusters" / "lab-1gbit.json"
OPTIONS = dict(workers="1-3", transfer=["grpc", "fifo"], steps=80, warmup=10, seed=4)


@pytest.fixture(scope="module")
def profile():
    return tfprofile.load_profile(TINY)


class Stop(Exception):
    """What the test raises to stop a sweep after k configurations."""


def stop_after(monkeypatch, k: int, error: type[BaseException] = Stop) -> list:
    """Make the k+1-th journal record raise ``error`` before it is written; the records written."""
    written = []
    original = JournalWriter.append

    def append(self, record_id, value):
        if len(written) == k:
            raise error()
        original(self, record_id, value)
        written.append(record_id)

    monkeypatch.setattr(JournalWriter, "append", append)
    return written


def records(path) -> list[dict]:
    lines = Path(path).read_text().splitlines()
    assert json.loads(lines[0])["format"] == JOURNAL_FORMAT
    return [json.loads(line) for line in lines[1:]]


def test_an_interrupted_sweep_resumes_to_the_uninterrupted_rows(tmp_path, profile, monkeypatch):
    whole = simulate.predict(profile, CLUSTER, **OPTIONS, jobs=2)
    journal = tmp_path / "sweep.journal"
    written = stop_after(monkeypatch, 2)
    with pytest.raises(Stop):
        simulate.predict(profile, CLUSTER, **OPTIONS, jobs=2, journal=journal)
    assert len(written) == 2 and [r["id"] for r in records(journal)] == written
    kept = journal.read_bytes()
    monkeypatch.undo()
    resumed = simulate.predict(profile, CLUSTER, **OPTIONS, jobs=2, journal=journal, resume=True)
    assert resumed.equals(whole) and len(whole) == 6
    assert journal.read_bytes().startswith(kept)  # appended to, never rewritten
    assert sorted(r["id"] for r in records(journal)) == [f"0/{i}" for i in range(6)]


def test_a_resumed_sweep_takes_its_rows_from_the_journal(tmp_path, profile):
    # A resumed run does not simulate what the journal holds: a row altered in the journal
    # (still a valid record) is the row of the resumed table.
    journal = tmp_path / "sweep.journal"
    whole = simulate.predict(profile, CLUSTER, **OPTIONS, journal=journal)
    lines = journal.read_text().splitlines()
    record = json.loads(lines[1])
    record["value"]["throughput_eps"] = 12345.5
    lines[1] = json.dumps(record)
    journal.write_text("\n".join(lines) + "\n")
    resumed = simulate.predict(profile, CLUSTER, **OPTIONS, journal=journal, resume=True)
    _, index = map(int, record["id"].split("/"))
    assert resumed["throughput_eps"].iloc[index] == 12345.5 != whole["throughput_eps"].iloc[index]
    assert resumed.drop(index).equals(whole.drop(index))


def test_a_journal_of_other_inputs_is_refused(tmp_path, profile):
    journal = tmp_path / "sweep.journal"
    simulate.predict(profile, CLUSTER, **OPTIONS, journal=journal)
    before = journal.read_bytes()
    changes = [dict(seed=5), dict(steps=81), dict(transfer=["grpc"]), dict(workers="1-4"), dict(replicas=2),
               dict(cores=2.0), dict(bandwidth_Bps=1e8), dict(stagger=0.5)]
    for change in changes:
        with pytest.raises(InputError) as err:
            simulate.predict(profile, CLUSTER, **{**OPTIONS, **change}, journal=journal, resume=True)
        assert err.value.source == str(journal) and "records other work" in err.value.problem, change
    scaled = simulate.scale_compute(profile, worker=0.5)
    with pytest.raises(InputError, match="records other work"):
        simulate.predict(scaled, CLUSTER, **OPTIONS, journal=journal, resume=True)
    assert journal.read_bytes() == before
    # the same inputs, whatever the cluster's file is called and wherever the sweep runs
    moved = tmp_path / "elsewhere.json"
    moved.write_bytes(CLUSTER.read_bytes())
    again = simulate.predict(profile, moved, **OPTIONS, jobs=2, journal=journal, resume=True)
    assert again.equals(simulate.predict(profile, CLUSTER, **OPTIONS))


def test_a_journal_holding_rows_needs_resume(tmp_path, profile):
    journal = tmp_path / "sweep.journal"
    simulate.predict(profile, CLUSTER, **OPTIONS, journal=journal)
    with pytest.raises(UsageError) as err:
        simulate.predict(profile, CLUSTER, **OPTIONS, journal=journal)
    assert err.value.source == "journal" and "already holds 6 of 6 configurations" in err.value.problem
    with pytest.raises(UsageError) as err:
        simulate.predict(profile, CLUSTER, **OPTIONS, resume=True)
    assert err.value.source == "resume"


def test_a_torn_last_record_runs_again(tmp_path, profile):
    journal = tmp_path / "sweep.journal"
    whole = simulate.predict(profile, CLUSTER, **OPTIONS, journal=journal)
    data = journal.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    for torn in (data[:last + 40], data[:last] + b"\0" * 300, data[:-1]):
        journal.write_bytes(torn)
        with pytest.warns(UserWarning, match="its last record was cut short"):
            resumed = simulate.predict(profile, CLUSTER, **OPTIONS, journal=journal, resume=True)
        assert resumed.equals(whole)
        assert read_journal(journal, sweep_key([plan_sweep(profile, CLUSTER, **OPTIONS)])).torn_tail is False
        assert len(records(journal)) == 6
    # a journal whose header was cut short holds nothing: the whole sweep runs
    journal.write_bytes(data[:20])
    with pytest.warns(UserWarning, match="cut short"):
        assert simulate.predict(profile, CLUSTER, **OPTIONS, journal=journal, resume=True).equals(whole)
    assert len(records(journal)) == 6


def test_damage_before_the_last_record_is_refused(tmp_path, profile):
    journal = tmp_path / "sweep.journal"
    simulate.predict(profile, CLUSTER, **OPTIONS, journal=journal)
    lines = journal.read_bytes().split(b"\n")
    damaged = [*lines[:2], lines[2][:30], *lines[3:]]
    journal.write_bytes(b"\n".join(damaged))
    with pytest.raises(InputError, match="line 3 is not a whole record: the journal is damaged"):
        simulate.predict(profile, CLUSTER, **OPTIONS, journal=journal, resume=True)
    record = json.loads(lines[1])
    record["id"] = "0/99"
    journal.write_bytes(b"\n".join([lines[0], json.dumps(record).encode(), b""]))
    with pytest.raises(InputError, match="record '0/99' is not a row of this sweep"):
        simulate.predict(profile, CLUSTER, **OPTIONS, journal=journal, resume=True)
    journal.write_text('{"format": "tfsim.prediction/1"}\n')
    with pytest.raises(InputError, match="is not a tfsim journal"):
        simulate.predict(profile, CLUSTER, **OPTIONS, journal=journal, resume=True)


def test_one_run_at_a_time_appends_to_a_journal(tmp_path):
    path = tmp_path / "j"
    with JournalWriter(path, "k1") as writer:
        writer.append("a", {"x": 1.5})
        with pytest.raises(InputError, match="is in use by another tfsim run"):
            JournalWriter(path, "k1")
    with JournalWriter(path, "k1") as writer:  # the lock went with the first writer
        assert writer.records == {"a": {"x": 1.5}}
    with pytest.raises(InputError, match="records other work"):
        JournalWriter(path, "k2")


def test_the_digest_is_the_values(profile):
    import numpy as np

    assert digest(profile) == digest(tfprofile.load_profile(TINY))
    assert digest(np.arange(3.0)) != digest(np.arange(3.0).astype(np.float32))
    assert digest({"a": 1, "b": 2}) == digest({"b": 2, "a": 1}) != digest({"a": 2, "b": 1})
    assert digest(-0.0) != digest(0.0) and digest(float("nan")) == digest(float("nan"))
    with pytest.raises(TypeError):
        digest(lambda: None)
    with pytest.raises(UsageError) as err:  # a colocation given as a plain function cannot key a journal
        open_journal("j", [plan_sweep(profile, CLUSTER, workers=1, steps=20, warmup=2,
                                      colocation=lambda w, m: simulate.Colocation((0,) * w, (0,) * m, (4.0,)))])
    assert err.value.source == "journal"




def command_line(command: str, out: Path, tmp_path: Path) -> list:
    common = [TINY, "--cluster", CLUSTER, "--workers", "1-3", "--steps", "60", "--seed", "2", "--no-progress",
              "--jobs", "2"]
    if command == "predict":
        return ["predict", *common, "--warmup", "10", "--transfer", "grpc,tic,fifo", "--replicas", "2",
                "--json", out / "p.json", "--csv", out / "p.csv", "--plot", out / "p.png"]
    if command == "compare":
        return ["compare", *common, "--json", out / "c.json", "--csv", out / "c.csv"]
    if command == "report":
        return ["report", *common, "--warmup", "10", "--worker-speed", "1,0.5", "--out", out / "report"]
    (tmp_path / "types.toml").write_text(CATALOGUE)
    return ["plan", *common, "--catalogue", tmp_path / "types.toml", "--json", out / "plan.json"]


def tree(directory: Path) -> dict:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("command", ["predict", "compare", "report", "plan"])
def test_every_sweep_command_resumes_to_the_bytes_of_an_uninterrupted_run(tmp_path, capsys, monkeypatch, command):
    whole, first, second = (tmp_path / name for name in ("whole", "first", "second"))
    for d in (whole, first, second):
        d.mkdir()
    code, text, err = run(command_line(command, whole, tmp_path), capsys)
    assert code == 0, err
    journal = tmp_path / "sweep.journal"
    stop_after(monkeypatch, 2, KeyboardInterrupt)  # as a Ctrl-C after two configurations
    code, _, err = run([*command_line(command, first, tmp_path), "--journal", journal], capsys)
    assert code == 130 and err.strip().splitlines()[-1] == "tfsim: interrupted"
    assert tree(first) == {}  # no output, all or nothing
    assert len(records(journal)) == 2
    monkeypatch.undo()
    code, text_resumed, err = run([*command_line(command, second, tmp_path), "--journal", journal, "--resume"],
                                  capsys)
    assert code == 0, err
    if command != "report":  # report's --no-progress silences its stage lines, this one too
        assert f"resuming from {journal}: 2 of " in err
    assert tree(second) == tree(whole) and len(tree(whole)) >= 1
    assert text_resumed.replace(str(second), "OUT") == text.replace(str(whole), "OUT")


def test_journal_options_are_checked_before_the_sweep(tmp_path, capsys, profile):
    out = tmp_path / "p.json"
    argv = ["predict", TINY, "--cluster", CLUSTER, "--workers", "1-2", "--steps", "40", "--warmup", "4",
            "--no-progress"]
    code, _, err = run([*argv, "--resume", "--json", out], capsys)
    assert (code, err) == (2, "tfsim: error: --resume: needs --journal FILE, the journal to resume from\n")
    code, _, err = run([*argv, "--json", out, "--journal", out], capsys)
    assert (code, err) == (2, f"tfsim: error: {out}: is also the --json: the journal needs a file of its own\n")
    journal = tmp_path / "j"
    assert run([*argv, "--journal", journal], capsys)[0] == 0
    code, _, err = run([*argv, "--journal", journal, "--json", out], capsys)
    assert code == 2 and err == (f"tfsim: error: --journal: {journal} already holds 2 of 2 configurations of this "
                                 "sweep: resume it, or remove the file to start over\n")
    code, _, err = run([*argv, "--seed", "1", "--journal", journal, "--resume", "--json", out], capsys)
    assert code == 2 and err.startswith(f"tfsim: error: {journal}: records other work") and err.count("\n") == 1
    assert not out.exists()
    (tmp_path / "file").write_text("")
    code, _, err = run([*argv, "--journal", tmp_path / "file" / "j"], capsys)
    assert code == 2 and "cannot write there" in err


# Real signals: a running ``tfsim predict`` stopped by SIGINT (the whole process group, as Ctrl-C),
# SIGTERM (the command alone) or SIGKILL (nothing of its own runs), then resumed.
SIGNAL_ARGV = ["predict", str(TINY), "--cluster", str(CLUSTER), "--workers", "1-6", "--transfer", "grpc,fifo",
               "--steps", "6000", "--seed", "1", "--jobs", "1", "--no-progress"]


def tfsim(argv, cwd) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-m", "tfsim", *map(str, argv)], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)




def children(pid: int) -> set[int]:
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    if int(handle.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.add(int(entry))
            except OSError:
                pass
    return out


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("whole")
    proc = tfsim([*SIGNAL_ARGV, "--json", out / "p.json", "--csv", out / "p.csv"], out)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return out


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_a_signalled_predict_resumes_to_the_same_bytes(tmp_path, uninterrupted, sig):
    journal = tmp_path / "sweep.journal"
    argv = [*SIGNAL_ARGV, "--json", tmp_path / "p.json", "--csv", tmp_path / "p.csv", "--journal", journal]
    proc = tfsim(argv, tmp_path)
    seen: set[int] = set()
    deadline = time.monotonic() + 120
    while not (journal.exists() and journal.read_bytes().count(b"\n") >= 3):  # the header and two records
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        seen |= children(proc.pid)
        time.sleep(0.01)
    seen |= children(proc.pid)
    if sig == "SIGINT":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=60)
    expected = {"SIGINT": 130, "SIGTERM": 143, "SIGKILL": -signal.SIGKILL}[sig]
    assert proc.returncode == expected, err
    assert "Traceback" not in err
    time.sleep(0.2)  # a worker dies with its parent (PR_SET_PDEATHSIG), killed outright or not
    assert seen and not {pid for pid in seen if alive(pid)}
    assert not (tmp_path / "p.json").exists() and not (tmp_path / "p.csv").exists()
    done = len(records(journal)) if journal.read_bytes().endswith(b"\n") else None
    assert done is None or 2 <= done < 12
    proc = tfsim([*argv, "--resume"], tmp_path)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    for name in ("p.json", "p.csv"):
        assert (tmp_path / name).read_bytes() == (uninterrupted / name).read_bytes()
    assert len(records(journal)) == 12
