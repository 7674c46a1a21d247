"""Cost, the cheapest configuration, the Pareto front and compute what-ifs (simulate.planning, simulate.whatif)."""

import itertools
import json
import math
import os

import pandas as pd
import pytest

import simulate
import tfprofile
from simulate.planning import Prices, add_costs, cheapest, pareto_front
from simulate.whatif import scale_compute
from tfbase.errors import UsageError
from tfprofile.dag import Resource

DATA = os.path.join(os.path.dirname(__file__), "..", "data")


def _catalogue():
    """A small table: W = 1..6 and M = 1..2, throughput saturating in W and growing with M."""
    rows = [{"workers": w, "servers": m, "throughput_eps": min(300.0 * w, 900.0 * m) * (1 - 0.02 * w)}
            for w, m in itertools.product(range(1, 7), (1, 2))]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("target", [250.0, 600.0, 900.0, 1300.0])
def test_the_cheapest_configuration_is_what_brute_force_finds(target):
    prices = Prices(worker_usd_per_h=2.48, ps_usd_per_h=0.68)
    frame = add_costs(_catalogue(), prices, servers=1)
    best = cheapest(frame, target_eps=target)
    brute = min(((w * 2.48 + m * 0.68) / (t * 3600) * 1e6, w + m, w, m)
                for w, m, t in frame[["workers", "servers", "throughput_eps"]].itertuples(index=False)
                if t >= target)
    assert (int(best["workers"]), int(best["servers"])) == (brute[2], brute[3])
    assert best["usd_per_million_examples"] == pytest.approx(brute[0])


def test_a_deadline_needs_an_epoch_and_is_met_by_the_cheapest_fast_enough():
    frame = add_costs(_catalogue(), Prices(1.0, 1.0), servers=1, examples=1e7)
    best = cheapest(frame, deadline_h=5.0)
    assert best["hours_per_epoch"] <= 5.0
    fast_enough = frame[frame["hours_per_epoch"] <= 5.0]
    assert best["usd_per_million_examples"] == pytest.approx(fast_enough["usd_per_million_examples"].min())
    with pytest.raises(UsageError) as err:
        cheapest(add_costs(_catalogue(), Prices(1.0), servers=1), deadline_h=5.0)
    assert err.value.source == "deadline_h"
    with pytest.raises(UsageError) as err:
        cheapest(frame, target_eps=1e9)
    assert err.value.source == "target_eps" and "the best: 1,584.0 examples/s" in str(err.value)


def test_the_pareto_front_keeps_only_configurations_nothing_beats():
    frame = add_costs(_catalogue(), Prices(2.0, 1.0), servers=1)
    front = pareto_front(frame)
    for _, row in front.iterrows():
        thr, usd = frame["throughput_eps"], frame["usd_per_hour"]
        better = frame[(thr >= row["throughput_eps"]) & (usd <= row["usd_per_hour"])
                       & ((thr > row["throughput_eps"]) | (usd < row["usd_per_hour"]))]
        assert better.empty
    dominated = frame.drop(front.index)
    assert all(((front["throughput_eps"] >= t) & (front["usd_per_hour"] <= c)).any()
               for t, c in dominated[["throughput_eps", "usd_per_hour"]].itertuples(index=False))


@pytest.mark.parametrize("text, problem", [
    ("worker=-1", "between 0 and"), ("worker=abc", "not a number"), ("gpu=3", "not worker=PRICE"),
    ("worker=1,worker=2", "priced twice"), ("worker=0,ps=0", "both"), ("worker=nan", "between 0 and"),
])
def test_bad_prices_name_the_option(text, problem):
    with pytest.raises(UsageError) as err:
        Prices.parse(text)
    assert err.value.source == "price" and problem in str(err.value)


def test_compute_what_ifs_scale_only_their_role():
    profile = tfprofile.load_profile(os.path.join(DATA, "profiles", "tiny.npz"))
    faster = scale_compute(profile, worker=0.5, ps=2.0)
    kinds = profile.graph.resource
    worker, ps = kinds == Resource.WORKER, kinds == Resource.PS
    assert faster.duration_s[:, worker] == pytest.approx(profile.duration_s[:, worker] * 0.5)
    assert faster.duration_s[:, ps] == pytest.approx(profile.duration_s[:, ps] * 2.0)
    links = (kinds == Resource.DOWNLINK) | (kinds == Resource.UPLINK)
    assert (faster.duration_s[:, links] == profile.duration_s[:, links]).all()
    assert scale_compute(profile) is profile
    for bad in (dict(worker=0.0), dict(ps=-1.0), dict(worker=math.inf)):
        with pytest.raises(UsageError) as err:
            scale_compute(profile, **bad)
        assert err.value.source == ("compute_scale" if "worker" in bad else "ps_compute_scale")


def test_predict_prices_plans_and_what_ifs_from_the_command_line(tmp_path, capsys):
    from tfsim.cli import main

    base = ["predict", os.path.join(DATA, "profiles", "tiny.npz"), "--cluster",
            os.path.join(DATA, "clusters", "lab-1gbit.json"), "--workers", "1-4", "--steps", "80", "--warmup", "10",
            "--no-progress", "--jobs", "1"]
    out = tmp_path / "p.json"
    assert main([*base, "--price", "worker=2.48,ps=0.68", "--examples", "1e6", "--target", "1000",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    document = json.loads(out.read_text())
    plan = document["plan"]
    rows = document["rows"]
    meeting = [r for r in rows if r["throughput_eps"] >= 1000]
    assert plan["usd_per_million_examples"] == pytest.approx(min(r["usd_per_million_examples"] for r in meeting))
    assert plan["text"] in text and "$/M examples" in text
    assert all(r["usd_per_hour"] == pytest.approx(r["workers"] * 2.48 + 0.68) for r in rows)
    slow = tmp_path / "slow.json"
    assert main([*base, "--compute-scale", "4", "--json", str(slow)]) == 0
    capsys.readouterr()
    assert json.loads(slow.read_text())["rows"][0]["throughput_eps"] < rows[0]["throughput_eps"]
    for extra, line in ((["--target", "5"], "tfsim: error: --target: needs --price"),
                        (["--price", "worker=1", "--deadline", "2"], "tfsim: error: --deadline: needs --examples"),
                        (["--price", "worker=-2"], "tfsim: error: --price: a price must be between 0 and"),
                        (["--compute-scale", "0"], "tfsim: error: --compute-scale: must be a factor above 0")):
        assert main([*base, *extra]) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1].startswith(line)


def test_stragglers_cost_their_share_in_async_and_hold_everyone_in_sync():
    from simulate.config import WorkerSpeeds

    profile = tfprofile.load_profile(os.path.join(DATA, "profiles", "tiny.npz"))
    cluster = simulate.load_cluster(os.path.join(DATA, "clusters", "lab-1gbit.json"))

    def throughput(mode, speed):
        frame = simulate.predict(profile, cluster, workers=4, mode=mode, steps=150, warmup=20, worker_speed=speed)
        return float(frame["throughput_eps"].iloc[0])

    slow = WorkerSpeeds(factors=(1.0, 1.0, 1.0, 0.25))
    for mode in ("async", "sync"):
        assert throughput(mode, slow) < throughput(mode, None)
    async_loss = 1 - throughput("async", slow) / throughput("async", None)
    sync_loss = 1 - throughput("sync", slow) / throughput("sync", None)
    assert async_loss < sync_loss  # async: the straggler's own share; sync: everyone waits at the barrier
    assert throughput("async", WorkerSpeeds(factors=(1.0,))) == throughput("async", None)  # the rest run at 1
    drawn = WorkerSpeeds(sigma=0.3, seed=7)
    assert drawn(4) == drawn(4) and drawn(6)[:4] == drawn(4)  # seeded, worker by worker
    for bad in (dict(factors=(0.0,)), dict(sigma=-1.0), dict(factors=(1.0,), sigma=0.2)):
        with pytest.raises(UsageError) as err:
            WorkerSpeeds(**bad)
        assert err.value.source == "worker_speed"


def test_the_report_shows_the_cost_of_each_w_and_the_pareto_front(tmp_path, capsys):
    from tfsim.cli import main

    base = ["report", os.path.join(DATA, "profiles", "tiny.npz"), "--cluster",
            os.path.join(DATA, "clusters", "lab-1gbit.json"), "--workers", "1-3", "--steps", "60", "--warmup", "10",
            "--no-progress", "--jobs", "1"]
    assert main([*base, "--price", "worker=2,ps=1", "--examples", "1e6", "--out", str(tmp_path / "r")]) == 0
    capsys.readouterr()
    document = json.loads((tmp_path / "r" / "report.json").read_text())
    cost = document["cost"]
    assert [row["workers"] for row in cost] == [1, 2, 3]
    assert all(row["usd_per_hour"] == pytest.approx(2 * row["workers"] + 1) for row in cost)
    assert all(row["hours_per_epoch"] == pytest.approx(1e6 / row["throughput_eps"] / 3600) for row in cost)
    front = pareto_front(pd.DataFrame(cost))
    assert [row["pareto"] for row in cost] == [i in set(front.index) for i in range(len(cost))]
    page = (tmp_path / "r" / "report.html").read_text()
    assert "<h2>Cost</h2>" in page and 'alt="cost"' in page
    assert "--price worker=2,ps=1" in document["inputs"]["command"]
    # a bad price is refused before anything is simulated or written
    assert main([*base, "--price", "worker=-1", "--out", str(tmp_path / "bad")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "tfsim: error: --price: a price must be between 0 and 1,000,000 $/hour, not -1.0"]
    assert not (tmp_path / "bad").exists()


CATALOGUE = """
[[type]]
name = "small"
price = 0.40
link = "1gbit"

[[type]]
name = "fast-cpu"
price = 1.10
link = "1gbit"
compute_scale = 0.5

[[type]]
name = "fast-net"
price = 0.90
link = "10gbit"
"""


def test_the_cheapest_instance_type_is_what_brute_force_finds(tmp_path, capsys):
    from simulate.catalogue import plan_catalogue, read_catalogue
    from tfsim.cli import main

    path = tmp_path / "types.toml"
    path.write_text(CATALOGUE)
    types = read_catalogue(path)
    assert [(t.name, t.price_usd_per_h, t.link_Bps, t.compute_scale) for t in types] == [
        ("small", 0.40, 125e6, 1.0), ("fast-cpu", 1.10, 125e6, 0.5), ("fast-net", 0.90, 1.25e9, 1.0)]
    profile = tfprofile.load_profile(os.path.join(DATA, "profiles", "resnet50.npz"))
    cluster = simulate.load_cluster(os.path.join(DATA, "clusters", "lab-1gbit.json"))
    options = dict(steps=40, warmup=8, seed=0)
    frame = plan_catalogue(profile, cluster, types, workers="1-4", **options)
    target = 0.6 * frame["throughput_eps"].max()
    best = cheapest(frame, target_eps=target)
    brute = []
    for kind in types:  # every type and W simulated on its own, and costed by hand
        alone = simulate.predict(scale_compute(profile, worker=kind.compute_scale, ps=kind.compute_scale), cluster,
                                 workers="1-4", bandwidth_Bps=kind.link_Bps, **options)
        for w, thr in zip(alone["workers"], alone["throughput_eps"]):
            if thr >= target:
                brute.append(((w + 1) * kind.price_usd_per_h / (thr * 3600) * 1e6, w + 1, kind.name, w))
    assert (best["instance"], int(best["workers"])) == min(brute)[2:]
    out = tmp_path / "plan.json"
    assert main(["plan", os.path.join(DATA, "profiles", "resnet50.npz"), "--cluster",
                 os.path.join(DATA, "clusters", "lab-1gbit.json"), "--catalogue", str(path), "--workers", "1-4",
                 "--steps", "40", "--target", str(target), "--jobs", "1", "--no-progress", "--json", str(out)]) == 0
    plan = json.loads(out.read_text())["plan"]
    assert (plan["instance"], plan["workers"]) == min(brute)[2:]
    assert "cheapest that meets the target" in capsys.readouterr().out


@pytest.mark.parametrize("text, problem", [
    ('[[type]]\nname = "a"\nprice = -1\nlink = "1gbit"\n', "a: price: a price must be between"),
    ('[[type]]\nname = "a"\nprice = 1\n', "a: catalogue: needs link"),
    ('[[type]]\nname = "a"\nprice = 1\nlink = "1gbit"\ncompute_scale = 0\n', "a: compute_scale: must be a factor"),
    ('[[type]]\nname = "a"\nprice = 1\nlink = "1gbit"\ngpus = 8\n', "unknown key(s) gpus"),
    ("title = 'x'\n", "has no [[type]] table"),
])
def test_a_bad_catalogue_names_the_file_and_the_type(tmp_path, text, problem):
    from simulate.catalogue import read_catalogue
    from tfbase.errors import InputError

    path = tmp_path / "types.toml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        read_catalogue(path)
    assert str(path) in str(err.value) and problem in str(err.value)


def test_a_link_latency_what_if_delays_each_dependent_transfer(tmp_path, capsys):
    """One worker on an idle network crosses one downlink and one uplink per step: --latency L
    lengthens the step by about L per direction it is given for (a little less where the delay
    overlaps other work), on predict, compare, report and plan alike."""
    from tfsim.cli import main

    tiny = os.path.join(DATA, "profiles", "tiny.npz")
    base = ["predict", tiny, "--bandwidth", "1gbit", "--workers", "1", "--steps", "300", "--jobs", "1",
            "--no-progress"]

    def step_s(*extra):
        out = tmp_path / "p.json"
        assert main([*base, *extra, "--json", str(out)]) == 0
        capsys.readouterr()
        document = json.loads(out.read_text())
        return document["rows"][0]["step_time_s"], document["cluster"].get("latency_s")

    plain, none = step_s()
    both, latency = step_s("--latency", "1ms")
    assert none is None and latency == {"downlink": 0.001, "uplink": 0.001}
    slack = 1e-9  # the step times are rounded sums of floats
    down = step_s("--latency", "down=1ms")[0] - plain
    up = step_s("--latency", "up=1ms")[0] - plain
    # Transfers leave in the recorded order (docs/model.md §2.4): the tensor the worker needs last
    # comes last, and part of its delay overlaps the computation of the layers before it.
    assert 0.0005 < down <= 0.001 + slack
    assert 0.0009 < up <= 0.001 + slack
    assert both - plain == pytest.approx(down + up, abs=slack)
    assert step_s("--latency", "0")[0] == plain
    report = tmp_path / "with-latency"
    assert main(["report", tiny, "--bandwidth", "1gbit", "--workers", "1", "--steps", "300", "--jobs", "1",
                 "--no-progress", "--latency", "1ms", "--out", str(report)]) == 0
    capsys.readouterr()
    document = json.loads((report / "report.json").read_text())
    assert document["cluster"]["latency_s"] == {"downlink": 0.001, "uplink": 0.001}
    assert document["inputs"]["latency"] == "1ms" and "--latency 1ms" in document["inputs"]["command"]
    reference = [r for r in document["prediction"]["rows"] if r["policy"] == document["headline"]["reference_policy"]]
    assert reference[0]["step_time_s"] == both  # the report's prediction is predict's, latency and all

    catalogue = tmp_path / "types.toml"
    catalogue.write_text('[[type]]\nname = "a"\nprice = 1\nlink = "1gbit"\n')
    cluster = os.path.join(DATA, "clusters", "lab-1gbit.json")
    commands = {"predict": base, "compare": ["compare", tiny, "--bandwidth", "1gbit", "--workers", "1"],
                "report": ["report", tiny, "--bandwidth", "1gbit", "--workers", "1", "--out", str(tmp_path / "r")],
                "plan": ["plan", tiny, "--cluster", cluster, "--catalogue", str(catalogue), "--workers", "1"]}
    for command, argv in commands.items():
        for bad, problem in (("-1ms", "must be finite and non-negative, not '-1ms'"),
                             ("nan", "must be finite and non-negative, not 'nan'"),
                             ("5", "'5' needs a unit"), ("up=1ms,up=2ms", "each direction once"),
                             ("20s", "a latency must be between 0 and 10 s")):
            assert main([*argv, f"--latency={bad}"]) == 2, (command, bad)
            lines = capsys.readouterr().err.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("tfsim: error: --latency: ") and problem in lines[0], \
                (command, lines)
    assert not (tmp_path / "r").exists()
