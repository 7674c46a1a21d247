"""Output files (docs/formats.md §1): ``-`` is standard output, symbolic links are followed and their
targets replaced, character devices and FIFOs are written as streams, other non-regular paths are
refused before any work, and the outputs of one run are committed together or not at all."""

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cli_runner import run

from tfbase.errors import InputError
from tfbase.fileio import Outputs, atomic_output, write_json, write_text

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "data" / "profiles" / "tiny.npz"
PREDICT = ["predict", TINY, "--bandwidth", "1gbit", "--workers", "1,2", "--steps", "30", "--warmup", "5", "--jobs", "1",
           "--no-progress"]


def tfsim(*args, **kwargs):
    """The command line in a child process of this worktree's code."""
    return subprocess.run([sys.executable, "-m", "tfsim", *map(str, args)], capture_output=True, text=True,
                          timeout=300, **kwargs)


def staged(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.rglob(".*.tmp"))


# ------------------------------------------------------------------ the file layer

def test_a_symlink_is_followed_and_its_target_replaced(tmp_path):
    target = tmp_path / "real" / "out.json"
    target.parent.mkdir()
    target.write_text("old")
    link, chain = tmp_path / "link.json", tmp_path / "chain.json"
    link.symlink_to(target)
    chain.symlink_to(link)
    write_json(chain, {"a": 1})
    assert chain.is_symlink() and link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text()) == {"a": 1}
    assert staged(tmp_path) == []


def test_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.txt"
    link.symlink_to(tmp_path / "made.txt")
    write_text(link, "x")
    assert link.is_symlink() and (tmp_path / "made.txt").read_text() == "x"


def test_a_character_device_is_written_as_a_stream_not_replaced():
    write_text("/dev/null", "nothing")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_full_device_is_one_input_error():
    with pytest.raises(InputError, match="No space left"):
        write_text("/dev/full", "x" * 10)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_fifo_is_written_as_a_stream(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_text(fifo, "through the pipe")
    reader.join(timeout=30)
    assert got == [b"through the pipe"] and stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.parametrize("kind", ["directory", "socket"])
def test_other_non_regular_paths_are_refused_up_front(tmp_path, kind):
    path = tmp_path / kind
    if kind == "directory":
        path.mkdir()
    else:
        import socket

        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
    with pytest.raises(InputError, match=f"is a {kind}"):
        Outputs().file(path, "--json")
    assert staged(tmp_path) == []


def test_output_under_a_regular_file_is_refused_up_front(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="cannot write there"):
        Outputs().file(tmp_path / "file" / "out.json", "--json")


def test_dash_is_stdout_once_and_text_only(tmp_path):
    outputs = Outputs()
    outputs.file("-", "--json")
    with pytest.raises(InputError, match="already taken by --json"):
        outputs.file("-", "--csv")
    with pytest.raises(InputError, match="binary"):
        Outputs().file("-", "--plot", binary=True)


def test_two_outputs_to_one_file_are_refused(tmp_path):
    outputs = Outputs()
    outputs.file(tmp_path / "a.json", "--json")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    with pytest.raises(InputError, match="is also the --json"):
        outputs.file(tmp_path / "b.json", "--csv")
    outputs.discard()
    assert staged(tmp_path) == []


def test_all_or_none_when_a_late_output_fails(tmp_path):
    """The first output is staged and written, the second fails when committed: neither lands."""
    first = tmp_path / "new" / "first.json"
    with pytest.raises(InputError), Outputs() as outputs:
        a, b = outputs.file(first, "--json"), outputs.file("/dev/full", "--csv")
        write_json(a, {"x": 1})
        write_text(b, "y")
        outputs.commit()
    assert not first.exists() and not first.parent.exists()  # the directory the plan made is gone too
    assert staged(tmp_path) == []


def test_an_interrupted_run_leaves_nothing(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("previous")
    with pytest.raises(KeyboardInterrupt), Outputs() as outputs:
        write_json(outputs.file(target, "--json"), {"new": True})
        raise KeyboardInterrupt
    assert target.read_text() == "previous" and staged(tmp_path) == []


def test_atomic_output_of_a_path_still_works(tmp_path):
    with atomic_output(tmp_path / "x.bin", "wb") as handle:
        handle.write(b"abc")
    assert (tmp_path / "x.bin").read_bytes() == b"abc" and staged(tmp_path) == []


# ------------------------------------------------------------------ the commands (issue 21, item 1 and 4)

def test_predict_json_dash_is_stdout_and_writes_no_file_named_dash(tmp_path):
    result = tfsim(*PREDICT, "--json", "-", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["format"] == "tfsim.prediction/1"  # the table went to stderr
    assert "thr (ex/s)" in result.stderr
    assert not (tmp_path / "-").exists()


def test_predict_json_to_dev_stdout_and_dev_null_keeps_the_devices(tmp_path):
    result = tfsim(*PREDICT, "--json", "/dev/stdout", "--csv", "/dev/null", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert '"format": "tfsim.prediction/1"' in result.stdout
    assert os.path.islink("/dev/stdout") and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_predict_into_a_symlink_replaces_its_target(tmp_path, capsys):
    target = tmp_path / "keep" / "p.csv"
    target.parent.mkdir()
    target.write_text("old")
    (tmp_path / "p.csv").symlink_to(target)
    code, _, err = run([*PREDICT, "--csv", tmp_path / "p.csv"], capsys)
    assert code == 0, err
    assert (tmp_path / "p.csv").is_symlink() and target.read_text().startswith("workers,")


@pytest.mark.parametrize("option, where", [
    ("--json", "{tmp}/file/p.json"),       # under a regular file
    ("--plot", "-"),                       # binary to standard output
    ("--csv", "{tmp}"),                    # a directory
    ("--trace-out", "{tmp}/file/t.json"),
])
def test_an_unwritable_output_fails_before_any_work(tmp_path, capsys, option, where):
    (tmp_path / "file").write_text("x")
    code, out, err = run([*PREDICT, "--json", tmp_path / "ok.json", option, where.format(tmp=tmp_path)]
                         if option != "--json" else [*PREDICT, option, where.format(tmp=tmp_path)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("tfsim: error: "), err
    assert out == ""  # no table: nothing was simulated
    assert not (tmp_path / "ok.json").exists() and staged(tmp_path) == []


def test_a_failing_last_output_leaves_none_of_the_others(tmp_path, capsys):
    code, _, err = run([*PREDICT, "--json", tmp_path / "p.json", "--plot", tmp_path / "p.png",
                        "--csv", "/dev/full"], capsys)
    # Found only when the run commits (a full device cannot be seen before): the last line.
    assert code == 2
    assert err.strip().splitlines()[-1] == "tfsim: error: /dev/full: cannot write: No space left on device"
    assert not (tmp_path / "p.json").exists() and not (tmp_path / "p.png").exists() and staged(tmp_path) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a read-only file system needs root")
def test_a_read_only_mount_fails_before_any_work(tmp_path, capsys):
    mount = tmp_path / "ro"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mount)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        for argv in ([*PREDICT, "--json", mount / "p.json"],
                     ["profile", ROOT / "data" / "captures" / "tiny_lo", "-o", mount / "p.npz"],
                     ["order", TINY, "--policy", "tic", "-o", mount / "o.tsv"],
                     ["report", TINY, "--bandwidth", "1gbit", "--workers", "1", "--steps", "20", "--warmup", "2",
                      "--out", mount / "r"]):
            code, _out, err = run(argv, capsys)
            assert code == 2 and len(err.strip().splitlines()) == 1 and "Read-only file system" in err, err
    finally:
        subprocess.run(["umount", str(mount)])


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small file system needs root")
def test_a_full_disk_fails_cleanly_and_leaves_nothing(tmp_path, capsys):
    """The disk fills while the staged output is written: exit 2, one line (no warning before it:
    the cluster is calibrated), and neither that output nor the run's others."""
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        with open(mount / "filler", "wb") as handle:
            try:
                handle.write(b"\0" * (1 << 20))
            except OSError:
                pass
        code, _, err = run(["predict", TINY, "--cluster", ROOT / "data" / "clusters" / "lab-1gbit.json", "--workers",
                            "1,2", "--steps", "30", "--warmup", "5", "--jobs", "1", "--no-progress",
                            "--csv", tmp_path / "p.csv", "--json", mount / "p.json"], capsys)
        assert code == 2 and err.strip().splitlines() == [
            f"tfsim: error: {mount / 'p.json'}: cannot write: No space left on device"], err
        assert not (tmp_path / "p.csv").exists() and not (mount / "p.json").exists()
        assert staged(tmp_path) == [] and staged(mount) == []
    finally:
        subprocess.run(["umount", str(mount)])


def test_order_and_calibrate_refuse_two_texts_on_stdout(capsys):
    code, _, err = run(["order", TINY, "--policy", "tic", "-o", "-", "--json"], capsys)
    assert code == 2 and err.strip().startswith("tfsim: error: --json:")


def test_order_to_stdout_prints_its_summary_on_stderr(capsys):
    code, out, err = run(["order", TINY, "--policy", "tic", "-o", "-"], capsys)
    assert code == 0 and out.splitlines()[0].count("\t") == 1 and "scheduling efficiency" in err
