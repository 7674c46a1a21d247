"""``tfsim report``: one self-contained page, its numbers beside it, identical for a seed, clean
failures; the page checked in a real browser; and the pieces it is made of."""

import base64
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import typing
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run

from tfsim.cli import main

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT = ROOT / "build" / "report-screenshot.png"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
OUTPUTS = ("report.html", "report.json", "prediction.json", "prediction.csv", "comparison.csv", "baselines.csv",
           "orderings.csv")
MEASURED = "workers,measured_eps\n1,500\n2,900\n3,1200\n"


def report_args(data_dir, out, measured=None):
    args = ["report", data_dir / "profiles" / "tiny.npz", "--cluster", data_dir / "clusters" / "lab-1gbit.json",
            "--workers", "1-3", "--steps", "60", "--warmup", "5", "--seed", "3", "--out", out]
    return args + (["--measured", measured] if measured else [])


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory, data_dir):
    """A report on the bundled tiny profile and calibration, with measurements."""
    base = tmp_path_factory.mktemp("report")
    measured = base / "lab.csv"
    measured.write_text(MEASURED)
    out = base / "out"
    assert main([str(a) for a in report_args(data_dir, out, measured) + ["--jobs", "1", "--no-progress"]]) == 0
    return out


class _Assets(HTMLParser):
    """Every src/href of a page, its images and whether it has scripts or stylesheets."""

    def __init__(self):
        super().__init__()
        self.links, self.images, self.tags = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href"):
                self.links.append(value)
            if tag == "img" and name == "src":
                self.images.append(value)


def assets_of(page: str) -> _Assets:
    parser = _Assets()
    parser.feed(page)
    return parser


def test_report_has_help(capsys):
    with pytest.raises(SystemExit) as info:
        main(["report", "--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0 and "tfsim report" in out and "--measured" in out


def test_report_writes_the_page_and_its_numbers(report_dir):
    for name in OUTPUTS:
        assert (report_dir / name).stat().st_size > 0, name
    document = json.loads((report_dir / "report.json").read_text())
    assert document["format"] == "tfsim.report/1"
    assert document["prediction"] == json.loads((report_dir / "prediction.json").read_text())
    reference = document["headline"]["reference_policy"]
    assert reference == "grpc"  # lab-1gbit.json's default_transfer
    policies = {row["policy"] for row in document["prediction"]["rows"]}
    assert policies == {reference, "recorded", "http2", "fifo", "tic", "tac"} | {f"random#{k}" for k in range(5)}
    assert document["headline"]["ordering_reference"] == document["prediction"]["ordering_reference"] == "recorded"


def test_page_is_self_contained(report_dir):
    page = (report_dir / "report.html").read_text()
    assets = assets_of(page)
    assert "script" not in assets.tags
    for link in assets.links:
        assert link.startswith("data:"), f"the page refers to {link[:60]!r}"
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert "@import" not in page and "url(" not in page
    # The two throughput plots, two Gantt pictures and the two calibration plots beside lab-1gbit.json.
    assert len(assets.images) == 6
    for uri in assets.images:
        assert uri.startswith("data:image/png;base64,")
        assert base64.b64decode(uri.split(",", 1)[1]).startswith(PNG_SIGNATURE)


def test_page_shows_the_numbers_beside_it(report_dir):
    page = (report_dir / "report.html").read_text()
    document = json.loads((report_dir / "report.json").read_text())
    with open(report_dir / "comparison.csv", newline="") as handle:
        comparison = list(csv.DictReader(handle))
    assert [int(r["workers"]) for r in comparison] == [1, 2, 3]
    headline = document["headline"]
    reference = {r["workers"]: r for r in document["prediction"]["rows"]
                 if r["policy"] == headline["reference_policy"]}
    for row in comparison:
        w = int(row["workers"])
        assert float(row["tfsim"]) == pytest.approx(reference[w]["throughput_eps"], rel=1e-8)
        assert float(row["measured"]) == {1: 500, 2: 900, 3: 1200}[w]
        assert float(row["error_tfsim"]) == pytest.approx(float(row["tfsim"]) / float(row["measured"]) - 1, rel=1e-6)
        assert f"{float(row['tfsim']):,.2f}" in page
    saturated = [r["workers"] for r in reference.values() if r["saturated"]]
    assert headline["saturation_workers"] == saturated[0]
    assert f"W = {saturated[0]}" in page
    assert f"{headline['throughput_at_saturation_eps']:,.1f}" in page
    assert headline["mean_abs_error"]["tfsim"] == pytest.approx(
        np.mean([abs(float(r["error_tfsim"])) for r in comparison]), rel=1e-7)  # the CSV keeps 9 significant digits
    for sentence in document["recommendation"]:
        assert sentence.replace("'", "&#x27;") in page
    job = document["job"]
    assert job["ops"] == sum(job["ops_by_resource"].values())
    assert f"{job['ops']:,}" in page
    assert f"{document['cluster']['overhead']['downlink']['beta_s'] * 1e3:,.2f}" in page
    with open(report_dir / "orderings.csv", newline="") as handle:
        orderings = {r["policy"]: r for r in csv.DictReader(handle)}
    assert float(orderings["recorded"]["mean_gain"]) == 0.0
    recorded = {r["workers"]: r for r in document["prediction"]["rows"] if r["policy"] == "recorded"}
    tac = [r for r in document["prediction"]["rows"] if r["policy"] == "tac"]
    gains = [t["throughput_eps"] / recorded[t["workers"]]["throughput_eps"] - 1 for t in tac]
    assert float(orderings["tac"]["mean_gain"]) == pytest.approx(np.mean(gains), rel=1e-6)
    assert f"{round(np.mean(gains) * 100, 1) + 0.0:+.1f}%" in page  # rounded as the page does: never -0.0%
    random = [[r["throughput_eps"] for r in document["prediction"]["rows"]
               if r["policy"].startswith("random#") and r["workers"] == t["workers"]] for t in tac]
    over_random = np.mean([t["throughput_eps"] / np.median(r) - 1 for t, r in zip(tac, random, strict=True)])
    assert float(orderings["tac"]["mean_gain_over_random"]) == pytest.approx(over_random, rel=1e-6)
    assert "Reference: the recorded order, TensorFlow's own in the profiled run" in page
    gantt = document["gantt"]
    assert gantt["one_worker"]["workers"] == 1 and gantt["many_workers"]["workers"] == headline["gantt_workers"]
    for stats in gantt.values():
        assert 0 < stats["worker_busy_fraction"] <= 1 and 0 <= stats["network_wait_fraction"] <= 1
        assert stats["worker_busy_fraction"] + stats["network_wait_fraction"] <= 1 + 1e-9


def test_prediction_matches_tfsim_predict(report_dir, data_dir, tmp_path, capsys):
    """The page's prediction is tfsim predict's, to the byte, for the same inputs; and the page,
    orderings.csv, prediction.json and predict's table state the same gains."""
    document = json.loads((report_dir / "report.json").read_text())
    inputs = document["inputs"]
    transfers = f"{document['headline']['reference_policy']},recorded,http2,fifo,tic,tac,random"
    code, out, err = run(["predict", inputs["profile"], "--cluster", inputs["cluster"], "--workers", "1-3", "--steps",
                        "60", "--warmup", "5", "--seed", "3", "--transfer", transfers, "--jobs", "1",
                        "--no-progress", "--json", tmp_path / "p.json", "--csv", tmp_path / "p.csv"], capsys)
    assert code == 0, err
    assert (tmp_path / "p.json").read_bytes() == (report_dir / "prediction.json").read_bytes()
    assert (tmp_path / "p.csv").read_bytes() == (report_dir / "prediction.csv").read_bytes()
    page = (report_dir / "report.html").read_text()
    with open(report_dir / "orderings.csv", newline="") as handle:
        csv_rows = {r["policy"]: r for r in csv.DictReader(handle)}
    json_rows = {r["policy"]: r for r in document["prediction"]["orderings"]}
    assert set(csv_rows) == set(json_rows) and len(json_rows) == 11
    assert "gains are over the recorded order: TensorFlow's own order in the profiled run" in out
    table = {line.split()[0]: line.split() for line in out.splitlines()
             if line.split() and line.split()[0] in json_rows and "at" in line.split()}
    assert set(table) == set(json_rows)
    for policy, row in json_rows.items():
        assert float(csv_rows[policy]["mean_gain"]) == pytest.approx(row["mean_gain"], rel=1e-8)
        assert float(csv_rows[policy]["best_gain"]) == pytest.approx(row["best_gain"], rel=1e-8)
        shown = [f"{round(row[key] * 100, 1) + 0.0:+.1f}%"
                 for key in ("best_gain", "mean_gain", "mean_gain_over_random")]
        # predict's table: policy, E, thr Wmin, thr Wmax, best gain, "at", "W=..", mean gain, mean vs random
        assert [table[policy][4], table[policy][7], table[policy][8]] == shown
        assert table[policy][6] == f"W={row['best_gain_workers']}"
        assert all(value in page for value in shown), policy


def test_the_what_if_shows_each_order_under_both_enforcements_as_predict_does(report_dir, data_dir, tmp_path,
                                                                              capsys):
    """The what-if's gains under work-conserving and under strict enforcement are, to the digit,
    tfsim predict --enforcement E's; --enforcement strict makes the report's own prediction
    predict's strict one, with the work-conserving gains beside it."""
    document = json.loads((report_dir / "report.json").read_text())
    transfers = f"{document['headline']['reference_policy']},recorded,http2,fifo,tic,tac,random"
    common = ["--cluster", data_dir / "clusters" / "lab-1gbit.json", "--workers", "1-3", "--steps", "60",
              "--warmup", "5", "--seed", "3", "--jobs", "1", "--no-progress"]
    code, out, err = run(["predict", data_dir / "profiles" / "tiny.npz", *common, "--transfer", transfers,
                          "--enforcement", "strict", "--json", tmp_path / "strict.json"], capsys)
    assert code == 0, err
    assert "enforced strictly" in out
    strict_prediction = json.loads((tmp_path / "strict.json").read_text())
    by_enforcement = document["orderings_by_enforcement"]
    assert set(by_enforcement) == {"work-conserving", "strict"} and document["strict_refused"] == []
    assert by_enforcement["work-conserving"] == document["prediction"]["orderings"]
    assert by_enforcement["strict"] == strict_prediction["orderings"]
    assert by_enforcement["strict"] != by_enforcement["work-conserving"]  # the gain depends on it
    page = (report_dir / "report.html").read_text()
    assert "mean gain over recorded, strict" in page and "mean gain over recorded, work-conserving" in page
    for row in by_enforcement["strict"]:
        assert f"{round(row['mean_gain'] * 100, 1) + 0.0:+.1f}%" in page, row["policy"]

    out_dir = tmp_path / "strict-report"
    code, _, err = run(["report", data_dir / "profiles" / "tiny.npz", *common, "--enforcement", "strict",
                        "--out", out_dir], capsys)
    assert code == 0, err
    assert (out_dir / "prediction.json").read_bytes() == (tmp_path / "strict.json").read_bytes()
    strict_document = json.loads((out_dir / "report.json").read_text())
    assert strict_document["inputs"]["enforcement"] == "strict"
    assert "--enforcement strict" in strict_document["inputs"]["command"]
    assert strict_document["orderings_by_enforcement"] == by_enforcement


def test_same_inputs_same_bytes(report_dir, data_dir, tmp_path):
    """Another process, another hash seed, two parallel jobs: every file identical."""
    out = tmp_path / "again"
    argv = [str(a) for a in report_args(data_dir, out, report_dir.parent / "lab.csv")]
    result = subprocess.run([sys.executable, "-m", "tfsim", *argv, "--jobs", "2", "--no-progress"],
                            capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "4321"})
    assert result.returncode == 0, result.stderr
    for name in OUTPUTS:
        assert (out / name).read_bytes() == (report_dir / name).read_bytes(), name


def _bad_cluster(tmp_path):
    path = tmp_path / "cluster.json"
    path.write_text('{"format": "tfsim.cluster/1", "bandwidth_Bps": ')
    return path


def _bad_measured(tmp_path):
    path = tmp_path / "lab.csv"
    path.write_text("w,eps\n1,2\n")
    return path


@pytest.mark.parametrize("broken", ["profile", "cluster", "measured"])
def test_bad_input_exits_2_naming_the_file_and_writes_nothing(broken, data_dir, tmp_path, capsys):
    profile = tmp_path / "missing.npz" if broken == "profile" else data_dir / "profiles" / "tiny.npz"
    cluster = _bad_cluster(tmp_path) if broken == "cluster" else data_dir / "clusters" / "lab-1gbit.json"
    measured = _bad_measured(tmp_path) if broken == "measured" else None
    culprit = {"profile": profile, "cluster": cluster, "measured": measured}[broken]
    out = tmp_path / "out"
    argv = ["report", profile, "--cluster", cluster, "--workers", "1-2", "--steps", "30", "--warmup", "5", "--jobs",
            "1", "--no-progress", "--out", out] + (["--measured", measured] if measured else [])
    code, stdout, err = run(argv, capsys)
    lines = [line for line in err.splitlines() if not line.startswith("tfsim: warning")]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("tfsim: error:") and str(culprit) in lines[0], err
    assert "Traceback" not in err and stdout == ""
    assert not (out / "report.html").exists()


def test_bad_plots_dir_exits_2(data_dir, tmp_path, capsys):
    missing = tmp_path / "nowhere"
    code, _, err = run(report_args(data_dir, tmp_path / "out") + ["--cluster-plots", missing, "--no-progress"],
                       capsys)
    assert code == 2 and str(missing) in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "report.html").exists()


def test_uncalibrated_report_says_so(data_dir, tmp_path, capsys):
    code, out, err = run(["report", data_dir / "profiles" / "tiny.npz", "--bandwidth", "100mbit", "--workers", "1,2",
                          "--steps", "30", "--warmup", "5", "--jobs", "1", "--no-progress", "--out", tmp_path], capsys)
    assert code == 0, err
    assert "no calibration" in err and out.strip() == str(tmp_path / "report.html")
    document = json.loads((tmp_path / "report.json").read_text())
    assert document["cluster"]["calibrated"] is False
    assert document["cluster"]["bandwidth_Bps"]["downlink"] == pytest.approx(100e6 / 8)
    assert any("not calibrated" in s for s in document["recommendation"])
    page = (tmp_path / "report.html").read_text()
    assert "Not calibrated" in page and "Calibration plots" not in page
    assert len(assets_of(page).images) == 4


# ---------------------------------------------------------------------------- the pieces

def test_interval_arithmetic():
    from tfsim.report.gantt import _complement, _intersect, _length, _union

    merged = _union(np.array([5.0, 0.0, 1.0, 8.0]), np.array([6.0, 2.0, 3.0, 9.0]))
    assert merged.tolist() == [[0.0, 3.0], [5.0, 6.0], [8.0, 9.0]]
    gaps = _complement(merged, 0.0, 10.0)
    assert gaps.tolist() == [[3.0, 5.0], [6.0, 8.0], [9.0, 10.0]]
    assert _length(merged) + _length(gaps) == 10.0
    both = _intersect(gaps, np.array([[2.0, 4.0], [7.0, 9.5]]))
    assert both.tolist() == [[3.0, 4.0], [7.0, 8.0], [9.0, 9.5]]
    assert _union(np.array([]), np.array([])).shape == (0, 2)


def test_gantt_rows_and_network_wait(bundled_profile):
    from simulate.cluster import ClusterModel
    from simulate.sweep import traced_run
    from tfprofile.dag import Resource
    from tfsim.report.gantt import _intersect, _length, gantt_from_run

    profile = bundled_profile("tiny")
    run_ = traced_run(profile, ClusterModel.from_bandwidth(1e6), workers=2, transfer="http2", priorities={}, steps=2)
    gantt = gantt_from_run(run_)
    assert gantt.rows == ("w0 DOWNLINK", "w0 WORKER", "w0 UPLINK", "w0 PS",
                          "w1 DOWNLINK", "w1 WORKER", "w1 UPLINK", "w1 PS")
    for resource in Resource:  # every chunk sits on its own resource's row
        rows = {gantt.rows[r].split()[1] for r in np.unique(gantt.row[gantt.resource == resource])}
        assert rows == {resource.name}
    assert len(gantt.row) == len(run_.trace["op"])
    np.testing.assert_allclose(gantt.step_end_s, run_.step_end_s[:, :2])
    for w in range(2):
        wait = gantt.network_wait[w]
        assert _length(_intersect(wait, gantt.worker_busy[w])) == 0.0  # waiting excludes computing
        assert _length(_intersect(wait, gantt.link_busy[w])) == pytest.approx(_length(wait))  # only on the wire
    # A slow link (1 MB/s): the worker waits on the network more than it computes.
    stats = gantt.stats()
    assert stats["network_wait_fraction"] > stats["worker_busy_fraction"]


def test_recommendation_follows_the_numbers(report_dir):
    from tfsim.report.advice import recommendation

    class Stub:
        cluster: typing.ClassVar[dict] = {"calibrated": True, "transfer_model_error": {}}

    numbers = {"reference_policy": "grpc", "ordering_reference": "recorded", "saturation_workers": 4,
               "largest_workers": 16,
               "throughput_at_saturation_eps": 100.0,
               "peak_throughput_eps": 104.0, "speedup_at_saturation": 3.5, "busiest_link": "downlink",
               "busiest_link_utilisation": 0.97, "network_wait_fraction_one": 0.2, "network_wait_fraction_many": 0.6,
               "gantt_workers": 4, "best_order": "tac", "best_order_mean_gain": 0.08, "best_order_max_gain": 0.15,
               "best_order_max_gain_workers": 4, "best_order_gain_at_saturation": 0.15, "order_worth_enforcing": True}
    advice = recommendation(Stub(), numbers)
    assert advice[0].startswith("Use up to 4 workers.") and "3.5× one worker" in advice[0] and "4.0%" in advice[0]
    assert "downlink is 97% busy: the network is the bottleneck" in advice[1]
    assert "waits on the network 20% of the time; with 4 workers, 60%" in advice[2]
    assert advice[3].startswith("Enforcing the tac order is worth trying") and "+15.0% at W = 4" in advice[3]
    still = recommendation(Stub(), {**numbers, "saturation_workers": 16, "order_worth_enforcing": False,
                                    "best_order_mean_gain": 0.004, "busiest_link_utilisation": 0.5})
    assert still[0].startswith("Throughput still grows at W = 16")
    assert "50% busy, so raw bandwidth is not all" in still[1]
    assert still[3].startswith("Enforcing a transfer order is not worth it: none beats the recorded order") \
        and "+0.4%" in still[3]
    below = recommendation(Stub(), {**numbers, "best_order_gain_at_saturation": -0.001})
    assert "pays only with fewer than 4 workers" in below[3] and "-0.1% at W = 4" in below[3]


# ---------------------------------------------------------------------------- in a real browser

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


def _require_browser():
    if CHROMIUM and CHROMEDRIVER:
        return
    reason = "Debian's chromium and chromium-driver are not installed (make system-deps installs them)"
    if os.environ.get("CI"):
        pytest.fail(reason + ": CI must run the browser check")
    pytest.skip(reason)


@pytest.mark.browser
def test_page_renders_in_chromium_without_console_errors(report_dir):
    """Open the page in headless Chromium: no console error, every image decoded, the sections
    laid out; then a full-page screenshot as a build artifact (build/, not committed)."""
    _require_browser()
    webdriver = pytest.importorskip("selenium.webdriver", reason="pip install selenium (the dev extra)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    url = (report_dir / "report.html").resolve().as_uri()
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        driver.get(url)
        assert driver.execute_script("return document.readyState") == "complete"
        errors = [entry for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]
        assert errors == []
        images = driver.execute_script(
            "return Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight])")
        assert len(images) == 6 and all(done and w > 300 and h > 100 for done, w, h in images)
        headings = driver.execute_script("return Array.from(document.querySelectorAll('h2')).map(h => h.textContent)")
        assert headings[0] == "1. The cluster" and len(headings) == 6
        # Nothing wider than the window: no horizontal scrolling on a laptop screen.
        assert driver.execute_script("return document.documentElement.scrollWidth") <= 1280
        height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    finally:
        driver.quit()
    SCREENSHOT.parent.mkdir(exist_ok=True)
    SCREENSHOT.unlink(missing_ok=True)
    result = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                             f"--screenshot={SCREENSHOT}", f"--window-size=1280,{height}", url],
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    png = SCREENSHOT.read_bytes()
    assert png.startswith(PNG_SIGNATURE)
    width, tall = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, tall) == (1280, height)


# ---------------------------------------------------------------------------- the demo

def test_demo_writes_the_report(tmp_path, capsys):
    out = tmp_path / "demo"
    code, stdout, err = run(["demo", "--out", out, "--steps", "40", "--jobs", "1"], capsys)
    assert code == 0, err
    assert stdout.strip().splitlines()[-1] == f"the report: {out / 'report.html'}"
    document = json.loads((out / "report.json").read_text())
    assert document["inputs"]["profile"].endswith("resnet50.npz")
    assert document["inputs"]["cluster"].endswith("lab-1gbit.json")
    findings = (out / "findings.txt").read_text()
    assert f"saturates at W = {document['headline']['saturation_workers']}" in findings
    order_lines = [line for line in findings.splitlines() if line.startswith("- W =")]
    assert len(order_lines) == 6 and all(("enforcing" in line and "% over the recorded order" in line)
                                         or "no enforced order beats the recorded order" in line
                                         for line in order_lines)
    assert len(assets_of((out / "report.html").read_text()).images) == 6
    assert not (tmp_path / "demo.partial").exists()
    rows = list(csv.DictReader(io.StringIO((out / "prediction.csv").read_text())))
    assert {r["policy"] for r in rows} >= {"http2", "fifo", "tic", "tac", "random#0"}


def test_straggler_section_puts_async_beside_sync_with_predicts_numbers(data_dir, tmp_path, capsys):
    """--worker-speed adds async and sync with and without the straggler; each number is tfsim predict's."""
    common = ["--cluster", data_dir / "clusters" / "lab-1gbit.json", "--workers", "2,4", "--steps", "120",
              "--warmup", "10", "--seed", "3", "--jobs", "1", "--no-progress"]
    out = tmp_path / "r"
    code, _, err = run(["report", data_dir / "profiles" / "tiny.npz", *common, "--worker-speed", "0.5",
                        "--out", out], capsys)
    assert code == 0, err
    document = json.loads((out / "report.json").read_text())
    section = document["stragglers"]
    assert section["worker_speed"] == "0.5" and section["speeds_at_largest_w"] == [0.5, 1.0, 1.0, 1.0]
    rows = {(r["mode"], r["workers"]): r for r in section["rows"]}
    assert sorted(rows) == [("async", 2), ("async", 4), ("sync", 2), ("sync", 4)]
    for w in (2, 4):
        slow_async, slow_sync = rows[("async", w)], rows[("sync", w)]
        # sync waits for the half-speed worker at every barrier; async loses only that worker's share
        assert slow_sync["throughput_stragglers_eps"] < slow_async["throughput_stragglers_eps"]
        assert 0 < slow_async["loss"] < slow_sync["loss"]
        for r in (slow_async, slow_sync):
            assert r["loss"] == pytest.approx(1 - r["throughput_stragglers_eps"] / r["throughput_even_eps"])
            assert r["slowest_speed"] == 0.5
    reference = document["headline"]["reference_policy"]
    for mode in ("async", "sync"):
        for speed, column in ((None, "throughput_even_eps"), ("0.5", "throughput_stragglers_eps")):
            path = tmp_path / f"{mode}-{column}.json"
            code, _, err = run(["predict", data_dir / "profiles" / "tiny.npz", *common, "--mode", mode, "--transfer",
                                reference, "--json", path, *(["--worker-speed", speed] if speed else [])], capsys)
            assert code == 0, err
            predicted = {r["workers"]: r["throughput_eps"] for r in json.loads(path.read_text())["rows"]}
            assert predicted == {w: rows[(mode, w)][column] for w in (2, 4)}
    page = (out / "report.html").read_text()
    assert "Stragglers: async against sync SGD" in page and 'alt="stragglers"' in page
    assert f"{rows[('sync', 4)]['throughput_stragglers_eps']:,.1f}" in page
    assert any("async SGD loses" in s and "sync SGD" in s for s in document["recommendation"])
    assert document["headline"]["stragglers"]["loss_sync"] == pytest.approx(rows[("sync", 4)]["loss"], rel=1e-9)
    assert "--worker-speed 0.5" in document["inputs"]["command"]
    code, _, err = run(["report", data_dir / "profiles" / "tiny.npz", *common, "--worker-speed", "1,0",
                        "--out", tmp_path / "bad"], capsys)
    assert code == 2 and err.strip().splitlines()[-1].startswith("tfsim: error: --worker-speed: speed factors")
    assert not (tmp_path / "bad").exists()


def test_straggler_advice_says_loss_or_gain():
    from tfsim.report.advice import GAIN_NOTE, straggler_advice

    numbers = {"stragglers": {"worker_speed": "0.5", "workers": 8, "throughput_async_eps": 3393.4,
                              "throughput_sync_eps": 1976.3, "loss_async": -0.021, "loss_sync": 0.15}}
    text = straggler_advice(numbers)
    assert text == ("With the stragglers (0.5) at W = 8, async SGD gains 2.1% and sync SGD loses 15.0% of its "
                    f"throughput: async SGD is faster (3,393.4 examples/s). {GAIN_NOTE}")
    assert straggler_advice({}) is None
    losing = straggler_advice({"stragglers": {**numbers["stragglers"], "loss_async": 0.02}})
    assert "async SGD loses 2.0% of its throughput" in losing and GAIN_NOTE not in losing


def test_replicated_report_is_replicated_predict(data_dir, tmp_path, capsys):
    """--replicas on report: its prediction is tfsim predict --replicas's, to the byte."""
    profile, cluster = data_dir / "profiles" / "tiny.npz", data_dir / "clusters" / "lab-1gbit.json"
    common = ["--cluster", cluster, "--workers", "1-2", "--steps", "60", "--warmup", "5", "--seed", "3",
              "--replicas", "2", "--jobs", "1", "--no-progress"]
    code, _, err = run(["report", profile, *common, "--out", tmp_path / "r"], capsys)
    assert code == 0, err
    document = json.loads((tmp_path / "r" / "report.json").read_text())
    assert document["inputs"]["replicas"] == 2 and "--replicas 2" in document["inputs"]["command"]
    transfers = f"{document['headline']['reference_policy']},recorded,http2,fifo,tic,tac,random"
    code, _, err = run(["predict", profile, *common, "--transfer", transfers, "--json", tmp_path / "p.json"], capsys)
    assert code == 0, err
    assert (tmp_path / "p.json").read_bytes() == (tmp_path / "r" / "prediction.json").read_bytes()
    rows = json.loads((tmp_path / "p.json").read_text())["rows"]
    assert {row["replicas"] for row in rows} == {2}


def test_the_tie_order_reaches_every_simulation_of_the_report(data_dir):
    """--tie-order recorded: the report's command line says so, and its sweeps are planned with it."""
    from simulate.config import Enforcement, TieOrder
    from tfsim.report.build import ReportRequest, plan_report

    request = ReportRequest(profile_path=data_dir / "profiles" / "tiny.npz",
                            cluster_path=data_dir / "clusters" / "lab-1gbit.json", workers="1-2", steps=40, warmup=5,
                            tie_order=TieOrder.RECORDED, worker_speed="1,0.5")
    assert request.command_line().endswith("--worker-speed 1,0.5 --tie-order recorded")
    plan = plan_report(request)
    assert plan.sweep.options["tie_order"] is TieOrder.RECORDED
    assert plan.sweep.options["enforcement"] is Enforcement.WORK_CONSERVING
    assert plan.other_sweep.options["tie_order"] is TieOrder.RECORDED
    assert plan.other_sweep.options["enforcement"] is Enforcement.STRICT
    assert {sc.policy for sc in plan.other_sweep.scenarios} == {"recorded", "tic", "tac"} | {
        f"random#{k}" for k in range(5)}
    assert all(sweep.options["tie_order"] is TieOrder.RECORDED for _, *sweeps in plan.stragglers.sweeps
               for sweep in sweeps)
