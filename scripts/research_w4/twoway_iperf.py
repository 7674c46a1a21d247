"""Two-way bulk transfer through the lab's emulated PS link: how much of the link one TCP flow gets
when the other direction is loaded (its ACKs queue behind the other direction's data).

    python scripts/research_w4/twoway_iperf.py [--congctl cubic] [--seconds 4]
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2])); sys.path.insert(0, str(Path(__file__).resolve().parent))

def main():
    from labrun import apply_congctl, apply_queue

    from tfsim.lab.netns import EmulatedCluster
    ap = argparse.ArgumentParser(); ap.add_argument("--congctl"); ap.add_argument("--seconds", type=float, default=4); ap.add_argument("--queue", default="latency50")
    ap.add_argument("--rate-mbit", type=float, default=400)
    a = ap.parse_args()
    names = ["ps0", "w0", "w1", "w2"]
    out = {}
    with EmulatedCluster(names, rate_bit=int(a.rate_mbit * 1e6)) as cl:
        apply_queue(cl, names, int(a.rate_mbit * 1e6), a.queue)
        if a.congctl: apply_congctl(cl, names, a.congctl)
        ps = cl.hosts["ps0"]
        servers = [subprocess.Popen(ps.exec_prefix() + ["iperf3", "-s", "-p", str(5201 + i)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(4)]
        time.sleep(0.5)
        def client(host, port, reverse=False, extra=()):
            return subprocess.Popen(cl.hosts[host].exec_prefix() + ["iperf3", "-c", ps.address, "-p", str(port), "-t", str(a.seconds), "-J", *(["-R"] if reverse else []), *extra], stdout=subprocess.PIPE, text=True)
        def rate(proc):
            j = json.loads(proc.communicate()[0]); return j["end"]["sum_received"]["bits_per_second"] / 8e6
        try:
            tests = {
                "up alone (w0->ps)": [("w0", 5201, False)],
                "down alone (ps->w0)": [("w0", 5201, True)],
                "up w0 + down w1 (two hosts)": [("w0", 5201, False), ("w1", 5202, True)],
                "up w0,w1 + down w2": [("w0", 5201, False), ("w1", 5202, False), ("w2", 5203, True)],
                "down w0,w1 + up w2": [("w0", 5201, True), ("w1", 5202, True), ("w2", 5203, False)],
                "up w0,w1 + down w2,w0?": [("w0", 5201, False), ("w1", 5202, False), ("w2", 5203, True), ("w2", 5204, True)],
            }
            for name, spec in tests.items():
                procs = [client(h, p, r) for h, p, r in spec]
                rates = [rate(x) for x in procs]
                downs = sum(r for (h, p, rev), r in zip(spec, rates) if rev); ups = sum(r for (h, p, rev), r in zip(spec, rates) if not rev)
                out[name] = {"flows_MBps": [round(r, 1) for r in rates], "down_MBps": round(downs, 1), "up_MBps": round(ups, 1)}
                print(name, out[name], flush=True)
                time.sleep(0.5)
        finally:
            for s in servers: s.terminate()
    print(json.dumps({"congctl": a.congctl or "bbr", "queue": a.queue, "results": out}))

if __name__ == "__main__":
    main()
