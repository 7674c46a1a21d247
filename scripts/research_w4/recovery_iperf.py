"""How fast a TCP flow takes the link back after a competitor leaves (the on/off pattern of a step).
Flow A (w0 -> ps) runs 3 s with 50 ms reports; flow B (w1 -> ps) runs from 1.0 s for 0.5 s."""
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
    ap = argparse.ArgumentParser(); ap.add_argument("--congctl"); ap.add_argument("--reverse", action="store_true", help="downlink: ps -> workers")
    ap.add_argument("--b-bytes", type=float, default=12e6); ap.add_argument("--queue", default="latency50")
    a = ap.parse_args()
    names = ["ps0", "w0", "w1"]
    with EmulatedCluster(names, rate_bit=400_000_000) as cl:
        apply_queue(cl, names, 400_000_000, a.queue)
        if a.congctl: apply_congctl(cl, names, a.congctl)
        ps = cl.hosts["ps0"]
        servers = [subprocess.Popen(ps.exec_prefix() + ["iperf3", "-s", "-p", str(5201 + i)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(2)]
        time.sleep(0.5)
        rev = ["-R"] if a.reverse else []
        A = subprocess.Popen(cl.hosts["w0"].exec_prefix() + ["iperf3", "-c", ps.address, "-p", "5201", "-t", "3", "-i", "0.1", "-J", *rev], stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        B = subprocess.Popen(cl.hosts["w1"].exec_prefix() + ["iperf3", "-c", ps.address, "-p", "5202", "-n", str(int(a.b_bytes)), "-i", "0.1", "-J", *rev], stdout=subprocess.PIPE, text=True)
        ja = json.loads(A.communicate(timeout=30)[0]); jb = json.loads(B.communicate(timeout=30)[0])
        for s in servers: s.terminate()
    ta0 = ja["start"]["timestamp"]["timesecs"]; tb0 = jb["start"]["timestamp"]["timesecs"]
    print("A (MB/s per 100 ms), B's span marked *:")
    line = []
    for iv in ja["intervals"]:
        s = iv["sum"]; t = s["start"]
        tb = t - (tb0 - ta0)
        b_end = jb["end"]["sum_sent"]["seconds"]
        mark = "*" if 0 <= tb < b_end else " "
        line.append(f"{t:4.2f}{mark}{s['bits_per_second'] / 8e6:5.1f}")
    for i in range(0, len(line), 10):
        print("  ".join(line[i:i + 10]))

if __name__ == "__main__":
    main()
