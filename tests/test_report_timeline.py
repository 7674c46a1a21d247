"""``tfsim report --timeline-run``: the bundled real W = 2 run captured at the PS
(``data/captures/tiny_100mbit_w2_ps``) beside its simulation on the page, in report.json and
as a Chrome trace; a run without a capture at the PS refused before anything is simulated."""

import json
import re
import shutil
from pathlib import Path

import pytest
from cli_runner import run

from tfbase.errors import InputError
from tfsim.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"
W2_RUN = DATA / "captures" / "tiny_100mbit_w2_ps"  # tiny, 2 workers, a 100 Mbit/s lab link, captured at PS 0
WIRE_RATE_BPS = 100e6 / 8
PAYLOAD_BPS = WIRE_RATE_BPS * 1448 / 1514  # TCP payload of full frames: what the link's bandwidth counts


def lab_100mbit_cluster(path: Path) -> Path:
    """The lab's calibration at the run's 100 Mbit/s, with no token bucket: as the lab's timeline
    test simulates this run (tests/test_lab_timeline.py)."""
    document = json.loads((DATA / "clusters" / "lab-1gbit.json").read_text())
    document["bandwidth_Bps"] = {"downlink": PAYLOAD_BPS, "uplink": PAYLOAD_BPS}
    document.pop("token_bucket")
    path.write_text(json.dumps(document))
    return path


def report_argv(cluster: Path, out: Path, timeline_run) -> list:
    return ["report", DATA / "profiles" / "tiny.npz", "--cluster", cluster, "--cores", "2", "--workers", "1-2",
            "--steps", "40", "--warmup", "5", "--jobs", "1", "--no-progress", "--timeline-run", timeline_run,
            "--out", out]


@pytest.fixture(scope="module")
def timeline_report(tmp_path_factory):
    base = tmp_path_factory.mktemp("timeline-report")
    cluster = lab_100mbit_cluster(base / "lab-100mbit.json")
    assert main([str(a) for a in report_argv(cluster, base / "report", W2_RUN)]) == 0
    return base / "report", cluster


@pytest.mark.filterwarnings("ignore")
def test_report_json_holds_the_views_numbers(timeline_report):
    from simulate.cluster_file import load_cluster
    from tfprofile.profile_io import load_profile
    from tfsim.lab.timeline_view import timeline_view

    out, cluster_path = timeline_report
    document = json.loads((out / "report.json").read_text())
    timeline = document["timeline"]
    assert document["inputs"]["timeline_run"] == str(W2_RUN)
    assert document["inputs"]["command"].endswith(f"--cores 2 --timeline-run {W2_RUN}")
    assert (timeline["run"], timeline["workers"], timeline["trace"]) == (str(W2_RUN), 2, "timeline.trace.json")
    # the cluster's sustained payload rate with the frames' headers: the lab's 100 Mbit/s on the wire
    assert timeline["rate_Bps"] == pytest.approx(WIRE_RATE_BPS)
    assert timeline["capacity_Bps"] == {"down": pytest.approx(PAYLOAD_BPS), "up": pytest.approx(PAYLOAD_BPS)}
    # the same numbers as the library's view of the same run, cluster, hosts and seed
    cluster = load_cluster(cluster_path)
    view = timeline_view(W2_RUN, load_profile(DATA / "profiles" / "tiny.npz"), cluster, rate_Bps=WIRE_RATE_BPS,
                         cores=2.0, seed=0)
    assert timeline["used_fractions"] == pytest.approx(view.used_fractions())
    assert timeline["busy_fractions"] == pytest.approx(view.busy_fractions())
    summary = view.summary()
    assert timeline["step_median_ms"] == pytest.approx(summary["step_median_ms"])
    assert [r["tensor"] for r in timeline["tensors_most_apart"]] == [r["tensor"] for r in summary["tensors_most_apart"]]
    # two workers keep the 100 Mbit/s link nearly full in the captured run
    assert 0.9 < timeline["used_fractions"]["measured_down"] <= 1.0
    assert 0.9 < timeline["used_fractions"]["measured_up"] <= 1.0
    assert 50 < timeline["step_median_ms"]["measured"] < 200


def test_page_shows_the_figure_and_where_the_runs_differ(timeline_report):
    out, _ = timeline_report
    page = (out / "report.html").read_text()
    document = json.loads((out / "report.json").read_text())["timeline"]
    start = page.index("<h2>Measured beside simulated: the run of W = 2</h2>")
    section = page[start:page.index("<h2>", start + 4)]
    assert section.count('<img src="data:image/png;base64,') == 1
    down = next(r for r in document["wire"] if r["direction"] == "down")
    cells = re.search(r"<tr><td>PS → workers</td>(.*?)</tr>", section).group(1)
    values = re.findall(r'<td class="num">([^<]*)</td>', cells)
    used_m, used_s = down["measured_used_fraction"], down["simulated_used_fraction"]
    assert values[:4] == [f"{used_m * 100:.1f}%", f"{used_s * 100:.1f}%", f"{(used_s - used_m) * 100:+.1f}",
                          f"{down['measured_busy_fraction'] * 100:.1f}%"]
    step = document["step_median_ms"]
    assert f"<td>median step (ms)</td><td class=\"num\">{step['measured']:,.1f}</td>" in section
    first = document["tensors_most_apart"][0]
    assert f"<code>{first['tensor']}</code>" in section
    assert page.index("Measured beside simulated") < page.index("<h2>6. Reproduce</h2>")


def test_trace_beside_the_page_holds_both_runs(timeline_report):
    out, _ = timeline_report
    trace = json.loads((out / "timeline.trace.json").read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert {"measured worker 0", "measured worker 1", "simulated worker 0", "simulated worker 1"} <= names
    measured = [e for e in trace["traceEvents"] if e.get("cat") == "transfer" and e["pid"] < 1000]
    # tiny moves 10 tensors down and 9 up per step and worker; the run has 12 measured steps per worker
    assert len(measured) >= 2 * 12 * 19
    assert trace["otherData"]["workers"] == 2


def test_a_report_without_timeline_has_no_section(tmp_path, capsys):
    cluster = lab_100mbit_cluster(tmp_path / "lab-100mbit.json")
    argv = [a for a in report_argv(cluster, tmp_path / "report", W2_RUN) if a not in ("--timeline-run", W2_RUN)]
    code, _, err = run(argv, capsys)
    assert code == 0, err
    assert "Measured beside simulated" not in (tmp_path / "report" / "report.html").read_text()
    assert json.loads((tmp_path / "report" / "report.json").read_text())["timeline"] is None
    assert not (tmp_path / "report" / "timeline.trace.json").exists()


def _copy_run(tmp_path: Path, **changes) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(W2_RUN, run_dir)
    record = json.loads((run_dir / "run.json").read_text())
    record.update(changes)
    (run_dir / "run.json").write_text(json.dumps(record))
    return run_dir


@pytest.mark.parametrize("case", ["chief", "none", "not_copied", "other_job", "unknown_record", "loopback"])
def test_a_run_without_a_capture_at_the_ps_exits_2_before_simulating(case, tmp_path, capsys):
    record = json.loads((W2_RUN / "run.json").read_text())
    ps_capture = {**record["capture"], "record": "capture.json", "taken_on": "10.231.0.1",
                  "copy": "capture.pcap.gz and capture.json from the --out directory of ps0 (10.231.0.1) into this "
                          "run directory"}
    if case == "chief":
        run_dir, expected = DATA / "captures" / "wide_1gbit", (
            "its capture was taken on the chief worker, not at PS 0: the timeline needs one taken at the PS; "
            "collect it with --capture --capture-at ps")
    elif case == "none":
        run_dir, expected = _copy_run(tmp_path, capture=None), (
            "has no capture (run.json's capture is null): the timeline needs one taken at PS 0; collect it with "
            "--capture --capture-at ps")
    elif case == "not_copied":
        run_dir = _copy_run(tmp_path, capture=ps_capture)
        (run_dir / "capture.pcap.gz").unlink()
        expected = ("has no capture.pcap.gz: the capture was taken on ps0; copy capture.pcap.gz and capture.json "
                    "from the --out directory of ps0 (10.231.0.1) into this run directory")
    elif case == "other_job":
        run_dir = _copy_run(tmp_path, capture=ps_capture)
        (run_dir / "capture.json").write_text(json.dumps({"format": "tfsim.ps-capture/1", "host": "ps0",
                                                          "cluster": {"ps": ["10.0.0.1:2222"]}}))
        expected = "is the capture of another job"
        run_dir = run_dir / "capture.json"  # the file at fault is named
    elif case == "unknown_record":
        run_dir = _copy_run(tmp_path, capture=ps_capture)
        (run_dir / "capture.json").write_text(json.dumps({"format": "tfsim.ps-capture/2"}))
        expected = "format is 'tfsim.ps-capture/2', expected 'tfsim.ps-capture/1'"
        run_dir = run_dir / "capture.json"
    else:
        run_dir = _copy_run(tmp_path, cluster={"ps": ["127.0.0.1:2222"],
                                               "worker": ["127.0.0.1:2223", "127.0.0.1:2224"]})
        expected = ("its tasks share the address 127.0.0.1: a capture cannot tell their traffic apart (run each "
                    "task on its own host or network namespace)")
    out = tmp_path / "report"
    given = run_dir.parent if run_dir.name == "capture.json" else run_dir
    code, _, err = run(report_argv(lab_100mbit_cluster(tmp_path / "c.json"), out, given), capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"tfsim: error: {run_dir}: {expected}")
    assert not out.exists()


def test_ps_capture_of_returns_the_bundled_capture():
    from tfsim.lab.timeline_view import ps_capture_of

    assert ps_capture_of(W2_RUN) == W2_RUN / "capture.pcap.gz"
    with pytest.raises(InputError, match="is not a directory"):
        ps_capture_of(W2_RUN / "run.json")
