"""One packet-level replay per point of saved lab directories, with the transport counters beside
the lab's (a study tool for README.md; needs prototype.patch for TFSIM_BP, DUPTHRESH, DELACK, IW).
Args: a tag, then LAB_DIR:SETTING:W1,W2 ...; env SEG, CC, WIN, STEPS pick the PacketNetwork."""
import os
import sys

sys.path.insert(0, '.')
import pandas as pd

from simulate.cluster_file import load_cluster
from simulate.config import CongestionControl, PacketNetwork, WindowLimit
from simulate.packet_replay import replay_packets
from simulate.prepare import prepare
from tfprofile.profile_io import load_profile

tag = sys.argv[1]
net = PacketNetwork(segment_bytes=int(os.environ.get("SEG", "1448")),
                    congestion_control=CongestionControl[os.environ.get("CC", "reno").upper()],
                    window=WindowLimit(os.environ.get("WIN", "congestion")))
steps = int(os.environ.get("STEPS", "120"))
for spec in sys.argv[2:]:
    lab, setting, ws = spec.split(":")
    res = pd.read_csv(f"{lab}/results.csv")
    res = res[res.setting == setting]
    profile = load_profile(f"{lab}/{setting}/profile.npz")
    cluster = load_cluster(f"{lab}/{setting}/CLUSTER.json")
    first = res.iloc[0]
    for w in [int(x) for x in ws.split(",")]:
        g = prepare(profile, cluster, workers=w)
        r = replay_packets(g, cluster, w, steps=steps, warmup=steps // 6, ps_cores=max(1.0, float(first.ps_cores)),
                           worker_rate=1.0, network=net)
        row = res[res.workers == w].iloc[0]
        meas = float(row.measured_eps)
        print(f"{tag} {setting} W={w} err {r.throughput_eps/meas-1:+.1%} "
              f"local {r.drops_down} port {r.drops_up} rto {r.timeouts} rec {r.recoveries} | "
              f"lab local {row.ps_drops_down_per_run:.0f} port {row.ps_drops_up_per_run:.0f} "
              f"rto {row.rto_timeouts_per_run:.1f}", flush=True)
