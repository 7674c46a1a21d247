"""The physical ceiling of calibrated rates (docs/calibration.md §4.6), on a bundled shaped capture
whose run.json is doctored to record a link: the lab's 1 Gbit/s tbf (the rates fit under it),
or a link slower than the rates measured on it (refused unless accepted)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from cli_runner import run as run_cli

from calibration.calibrate import calibrate_run
from calibration.ceiling import (
    CEILING_TOLERANCE,
    STAMP_ERROR_S,
    Link,
    RateAboveCeilingError,
    ceiling_Bps,
    check_ceiling,
    link_from_run,
    payload_fraction,
)
from netcapture import read_iperf
from simulate.cluster_file import ClusterFormatError, cluster_from_dict
from tfbase.errors import InputError, UsageError
from tfsim.lab.netns import Shaper, Transport, _tbf

DATA = Path(__file__).resolve().parents[1] / "data"
RUN = DATA / "captures" / "wide_1gbit"  # taken on the lab's 1 Gbit/s tbf


def _run_with_link(tmp_path, link) -> Path:
    run_dir = tmp_path / "run"
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(RUN, run_dir)
    record = json.loads((run_dir / "run.json").read_text())
    if link is not None:
        record["link"] = link
    (run_dir / "run.json").write_text(json.dumps(record))
    return run_dir


def test_the_lab_records_the_shaper_it_sets():
    shaper = Shaper.of(1_000_000_000)
    command = _tbf(1_000_000_000, Transport())
    assert command[command.index("rate") + 1] == "1000000000bit"
    assert int(command[command.index("burst") + 1]) == shaper.burst_bytes == 500_000  # a 4 ms tick at 1 Gbit/s
    assert command[command.index("peakrate") + 1] == f"{shaper.peak_rate_bit}bit" == "1020000000bit"
    assert int(command[command.index("mtu") + 1]) == shaper.peak_burst_bytes == 96 * 1024
    assert shaper.link_record() == {"rate_bit_s": 1_000_000_000, "burst_bytes": 500_000,
                                    "peak_rate_bit_s": 1_020_000_000, "peak_burst_bytes": 98_304,
                                    "source": "the lab's tbf"}


def test_the_ceiling_is_the_payload_share_of_the_rate_after_the_buckets():
    assert payload_fraction(1448) == pytest.approx(1448 / 1514)  # 1500-byte MTU, timestamps, Ethernet header
    plain = Link(125e6, "NIC")
    assert ceiling_Bps(plain, 1448, 50e6) == pytest.approx(125e6 * 1448 / 1514)  # 956 Mbit/s on 1 GbE
    shaped = Link(12.5e6, "tbf", burst_bytes=98_304, peak_rate_Bps=12.75e6, peak_burst_bytes=98_304)
    wire = 500_000 * 1514 / 1448
    # 500 kB on a 100 Mbit/s tbf: the bucket's bytes go ahead, the rest at the rate.
    assert ceiling_Bps(shaped, 1448, 500_000) == pytest.approx(500_000 / ((wire - 98_304) / 12.5e6))
    assert ceiling_Bps(shaped, 1448, 50_000) == float("inf")  # the buckets hold it all


def test_rates_under_the_lab_links_ceiling_pass_and_are_recorded(tmp_path):
    calibration = calibrate_run(_run_with_link(tmp_path, Shaper.of(1_000_000_000).link_record()))
    record = calibration.to_cluster_json()["link_ceiling"]
    assert not record["above"]
    assert record["mss_bytes"] == read_iperf(RUN / "iperf3" / "downlink_0.json").mss_bytes == 1448
    checks = {(c["direction"], c["rate"]): c for c in record["checks"]}
    assert set(checks) == {(d, r) for d in ("downlink", "uplink") for r in ("busy rate", "iperf3 rate")}
    busy = checks[("downlink", "busy rate")]
    assert busy["rate_Bps"] == calibration.busy_rate_Bps["downlink"] < busy["ceiling_Bps"] < 125e6 * 1.02
    assert all(not c["above"] for c in checks.values())


def test_a_rate_above_the_ceiling_stops_calibration_naming_the_capture_and_both_rates(tmp_path):
    run_dir = _run_with_link(tmp_path, {"rate_bit_s": 800_000_000, "source": "a doctored record"})
    with pytest.raises(RateAboveCeilingError, match=r"capture\.pcap\.gz: the downlink busy rate, 884 Mbit/s, is above "
                                                    r"765 Mbit/s, .* 800 Mbit/s link \(a doctored record; MSS 1448\)"
                                                    r"; allow_above_ceiling") as caught:
        calibrate_run(run_dir)
    assert caught.value.ceiling_Bps == pytest.approx(100e6 * 1448 / 1514)
    accepted = calibrate_run(run_dir, allow_above_ceiling=True).to_cluster_json()["link_ceiling"]
    assert accepted["above"] and accepted["allowed"]
    above = {(c["direction"], c["rate"]) for c in accepted["checks"] if c["above"]}
    assert ("downlink", "busy rate") in above and ("downlink", "iperf3 rate") in above  # iperf3: 833 Mbit/s


def test_calibrate_cli_exits_2_unless_the_rate_is_accepted(tmp_path, capsys):
    run_dir = _run_with_link(tmp_path, None)  # as bundled: no link recorded, so only --link-rate gives one
    out = tmp_path / "cluster.json"
    code, _, _ = run_cli(["calibrate", run_dir, "-o", out], capsys)
    assert code == 0 and "link_ceiling" not in json.loads(out.read_text())
    out.unlink()
    code, _, err = run_cli(["calibrate", run_dir, "-o", out, "--link-rate", "800mbit"], capsys)
    assert code == 2 and "capture.pcap.gz: the downlink busy rate, 884 Mbit/s, is above 765 Mbit/s" in err
    assert "--allow-above-ceiling" in err and "allow_above_ceiling" not in err and "Traceback" not in err
    assert not out.exists()
    code, _, _ = run_cli(["calibrate", run_dir, "-o", out, "--link-rate", "800mbit", "--allow-above-ceiling"], capsys)
    assert code == 0 and json.loads(out.read_text())["link_ceiling"]["allowed"]
    code, _, err = run_cli(["calibrate", run_dir, "-o", out, "--link-rate", "fast"], capsys)
    assert code == 2 and "--link-rate" in err


@pytest.mark.parametrize("link, problem", [
    ("1gbit", "link must be an object"),
    ({"burst_bytes": 10}, "link.rate_bit_s must be a rate"),
    ({"rate_bit_s": -5}, "link.rate_bit_s must be a rate"),
    ({"rate_bit_s": 1e9, "burst_bytes": 1.5}, "link.burst_bytes must be a whole number"),
    ({"rate_bit_s": 1e9, "peak_rate_bit_s": True}, "link.peak_rate_bit_s must be a rate"),
    ({"rate_bit_s": 1e9, "buffer_bytes": 0}, "link.buffer_bytes must be a whole number of bytes from 1"),
    ({"rate_bit_s": 1e9, "buffer_bytes": "2mb"}, "link.buffer_bytes must be a whole number"),
])
def test_a_bad_link_record_names_run_json(tmp_path, link, problem):
    with pytest.raises(InputError, match=rf"run\.json: {problem}"):
        calibrate_run(_run_with_link(tmp_path, link))


def test_the_links_buffer_goes_from_run_json_or_the_option_into_the_cluster(tmp_path):
    """calibration.md §4.7: the lab's tbf limit reaches CLUSTER.json's buffer_bytes, and from
    there the model (model.md §4.5); --buffer replaces it; without either the queue is unbounded."""
    buffer = Transport().buffer_bytes(1_000_000_000)
    assert buffer == 625_000 + 500_000  # 5 ms at 1 Gbit/s plus the bucket (tc-tbf(8))
    record = Shaper.of(1_000_000_000).link_record(buffer)
    assert record["buffer_bytes"] == buffer
    document = calibrate_run(_run_with_link(tmp_path / "lab", record)).to_cluster_json()
    assert document["buffer_bytes"] == {"downlink": buffer, "uplink": buffer}
    assert document["link_ceiling"]["link"]["buffer_bytes"] == buffer
    cluster = cluster_from_dict(document)
    assert cluster.buffer_downlink_bytes == cluster.buffer_uplink_bytes == buffer
    given = calibrate_run(_run_with_link(tmp_path / "given", record), buffer_bytes=256_000).to_cluster_json()
    assert given["buffer_bytes"] == {"downlink": 256_000, "uplink": 256_000}
    bare = calibrate_run(_run_with_link(tmp_path / "bare", None)).to_cluster_json()
    assert "buffer_bytes" not in bare and math.isinf(cluster_from_dict(bare).buffer_uplink_bytes)
    with pytest.raises(UsageError, match="one packet") as caught:
        calibrate_run(_run_with_link(tmp_path / "small", None), buffer_bytes=100)
    assert caught.value.source == "buffer_bytes"


def test_a_bad_buffer_in_cluster_json_is_named():
    document = {**json.loads((DATA / "clusters" / "lab-1gbit.json").read_text()), "buffer_bytes": {"uplink": -1}}
    with pytest.raises(ClusterFormatError, match=r"buffer_bytes\.uplink must be positive"):
        cluster_from_dict(document, "c.json")
    assert math.isinf(cluster_from_dict({**document, "buffer_bytes": {"uplink": None}}).buffer_uplink_bytes)


def test_calibrate_cli_names_buffer_when_it_is_below_a_packet(tmp_path, capsys):
    code, out, err = run_cli(["calibrate", _run_with_link(tmp_path, None), "-o", tmp_path / "c.json", "--buffer",
                              "1kb"], capsys)
    assert code == 2 and out == "" and err.startswith("tfsim: error: --buffer: must be at least one packet")
    assert not (tmp_path / "c.json").exists()


def test_a_short_step_within_the_stamps_error_is_not_above_its_ceiling():
    # tiny at 100 Mbit/s: a 548 kB step crosses in about 38 ms at the bucket's limit; a capture
    # stamped 1 ms late on a loaded host reads 2.7% above the ceiling, which is not a wrong estimate.
    link = link_from_run({"link": Shaper.of(100_000_000).link_record()}, "run.json")
    payload = 547_496
    fastest_s = payload / ceiling_Bps(link, 1448, payload)
    late_by_1ms = payload / (fastest_s - 0.001)
    record = check_ceiling(link, 1448, [("uplink", "busy rate", late_by_1ms, payload)], "c.pcap", allow=False)
    assert late_by_1ms > ceiling_Bps(link, 1448, payload) * (1 + CEILING_TOLERANCE) and not record["above"]
    # The same 2.7% over a step ten times longer is 10 ms faster than the link: above.
    long_payload = payload * 10
    long_fastest_s = long_payload / ceiling_Bps(link, 1448, long_payload)
    too_fast = long_payload / long_fastest_s * (late_by_1ms / ceiling_Bps(link, 1448, payload))
    assert long_payload / ceiling_Bps(link, 1448, long_payload) - long_payload / too_fast > STAMP_ERROR_S
    with pytest.raises(RateAboveCeilingError, match="uplink busy rate"):
        check_ceiling(link, 1448, [("uplink", "busy rate", too_fast, long_payload)], "c.pcap", allow=False)


def test_a_shaped_links_record_becomes_the_clusters_shaper_and_a_rate_alone_does_not():
    """link_ceiling.link of a lab calibration (both tbf buckets) is the packet model's shaper
    (docs/model.md §12); a rate given alone (--link-rate: no buckets) is no shaper."""
    from simulate.cluster import LinkShaper
    from simulate.cluster_file import ClusterFormatError, cluster_from_dict

    base = {"format": "tfsim.cluster/1", "bandwidth_Bps": {"downlink": 1.2e7, "uplink": 1.2e7}, "win_bytes": None,
            "alpha_s_per_byte": 0.0, "beta_s": 0.0}
    tbf = {"rate_Bps": 12.5e6, "burst_bytes": 98304, "peak_rate_Bps": 12.75e6, "peak_burst_bytes": 98304,
           "source": "the lab's tbf"}
    shaped = cluster_from_dict({**base, "link_ceiling": {"link": tbf}})
    assert shaped.shaper == LinkShaper(12.5e6, 98304, 12.75e6, 98304)
    alone = {"rate_Bps": 12.5e6, "burst_bytes": 0, "peak_rate_Bps": None, "peak_burst_bytes": 0, "source": "as given"}
    assert cluster_from_dict({**base, "link_ceiling": {"link": alone}}).shaper is None
    assert cluster_from_dict(base).shaper is None
    with pytest.raises(ClusterFormatError, match=r"link_ceiling\.link\.burst_bytes must be"):
        cluster_from_dict({**base, "link_ceiling": {"link": {**tbf, "burst_bytes": -5}}})
