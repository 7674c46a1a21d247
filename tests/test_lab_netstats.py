"""The lab's link and TCP counters (tfsim/lab/netstats.py): parsed from the kernel's own
output, and read from a real emulated cluster whose shaper is made to drop."""

import os
import shutil
import subprocess

import pytest

from tfsim.lab.netstats import TcpCounters, parse_proc_net, parse_qdisc_stats, tcp_counters

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("tc") is None, reason="needs root and tc")


def test_this_kernels_tcp_tables_have_every_counter_kept():
    tables = {}
    for name in ("/proc/net/snmp", "/proc/net/netstat"):
        with open(name) as handle:
            tables.update(parse_proc_net(handle.read()))
    counters = tcp_counters(tables)
    assert counters.retrans_segs == tables[("Tcp", "RetransSegs")]
    assert counters.rto_timeouts == tables[("TcpExt", "TCPTimeouts")]
    assert counters.loss_probes == tables[("TcpExt", "TCPLossProbes")]


def test_qdisc_counters_are_summed_over_a_hierarchy():
    text = ("qdisc netem 1: root refcnt 2 limit 100000 delay 1ms\n"
            " Sent 3000 bytes 2 pkt (dropped 1, overlimits 0 requeues 0)\n backlog 0b 0p requeues 0\n"
            "qdisc tbf 2: parent 1: rate 100Mbit burst 96Kb lat 5ms\n"
            " Sent 2500 bytes 2 pkt (dropped 4, overlimits 9 requeues 1)\n backlog 0b 0p requeues 1\n")
    counters = parse_qdisc_stats(text)
    assert (counters.sent_bytes, counters.sent_packets, counters.dropped, counters.overlimits) == (5500, 4, 5, 9)
    assert parse_qdisc_stats("") == parse_qdisc_stats("no qdisc here")


def test_a_table_whose_value_line_is_missing_is_skipped():
    assert parse_proc_net("Tcp: RetransSegs\nUdp: InDatagrams\n1 2\n") == {}
    assert tcp_counters({}) == TcpCounters()


@needs_root
def test_a_shaper_that_drops_and_tcp_that_recovers_are_counted():
    from tfsim.lab.netns import EmulatedCluster, Transport
    from tfsim.lab.netstats import read_host_counters

    # A 2 Mbit/s link with a 1,500-byte queue must drop a bulk transfer's packets, and TCP
    # must recover. A drop at the sender's own shaper is local congestion: the segment is sent
    # again without counting as retransmitted, so the recovery may show as a timeout only.
    transport = Transport(queue_bytes=1500)
    with EmulatedCluster(["a", "b"], rate_bit=2_000_000, transport=transport) as cluster:
        a, b = cluster.hosts["a"], cluster.hosts["b"]
        before = read_host_counters(a.namespace, cluster.bridge_namespace, cluster.port_of("a"))
        server = subprocess.Popen([*b.exec_prefix(), "python3", "-c",
                                   "import socket; s = socket.create_server(('0.0.0.0', 5099)); c, _ = s.accept()\n"
                                   "while c.recv(65536): pass"])
        try:
            subprocess.run([*a.exec_prefix(), "python3", "-c",
                            "import socket, time\n"
                            "for _ in range(50):\n"
                            f"    try: s = socket.create_connection(('{b.address}', 5099)); break\n"
                            "    except OSError: time.sleep(0.1)\n"
                            "s.sendall(b'x' * 600_000); s.close()"], check=True, timeout=60)
        finally:
            server.wait(timeout=30)
        after = read_host_counters(a.namespace, cluster.bridge_namespace, cluster.port_of("a"))
    assert before.egress.sent_bytes < 10_000 and before.tcp.retrans_segs == 0
    assert after.egress.sent_bytes > 600_000
    assert after.egress.dropped > 0
    recovery = after.tcp.retrans_segs + after.tcp.rto_timeouts + after.tcp.loss_probes + after.tcp.fast_retrans
    assert recovery > 0


def test_the_shapers_buffer_is_tbfs_limit():
    from tfsim.lab.netns import Shaper, Transport

    rate = 100_000_000  # 12.5 MB/s
    burst = Shaper.of(rate).burst_bytes
    assert Transport(queue_ms=5).buffer_bytes(rate) == 62_500 + burst
    assert Transport(queue_ms=50).buffer_bytes(rate) == 625_000 + burst
    assert Transport(queue_bytes=2_000_000).buffer_bytes(rate) == 2_000_000
    assert Transport(queue_bytes=1500).buffer_bytes(rate) == burst  # tbf's limit holds the bucket at least


def test_an_overflow_is_expected_once_w_windows_exceed_the_buffer():
    import dataclasses

    from simulate.cluster import ClusterModel
    from tfsim.lab.validate import LabSetting, overflow_columns

    setting = LabSetting(name="t", model="tiny", batch_size=32, rate_bit=100_000_000, workers=(1, 2, 3, 4),
                         queue_ms=5.0)
    cluster = ClusterModel(downlink_Bps=12.5e6, uplink_Bps=12.5e6, queue_window_uplink_bytes=65_160.0)
    expected = [overflow_columns(setting, cluster, w)["overflow_expected"] for w in (1, 2, 3, 4)]
    assert expected == [False, False, True, True]  # 160.8 KB holds two 65 KB windows, not three
    deep = dataclasses.replace(setting, queue_ms=50.0)
    assert not any(overflow_columns(deep, cluster, w)["overflow_expected"] for w in (1, 2, 3, 4))
    no_window = dataclasses.replace(cluster, queue_window_uplink_bytes=0.0)
    assert not overflow_columns(setting, no_window, 4)["overflow_expected"]


def test_keep_captures_needs_no_timeline():
    # It keeps the profiling run's capture too, so that a calibration can be run again.
    from tfsim.cli import build_parser
    from tfsim.cli.lab import settings_of

    for extra, timeline in (([], False), (["--timeline"], True)):
        args = build_parser().parse_args(["lab", "--model", "tiny", "--keep-captures", "--out", "unused", *extra])
        _, settings = settings_of(args)
        assert [(s.keep_captures, s.timeline) for s in settings] == [(True, timeline)]
    _, settings = settings_of(build_parser().parse_args(["lab", "--model", "tiny", "--out", "unused"]))
    assert [s.keep_captures for s in settings] == [False]
