#!/usr/bin/env python3
"""How many bytes per second a parameter server under a CPU quota can move, with the network
out of the way: ``python bench/ps_serve.py --ps-cores 0.2857 [--mb 16] [--streams 4] [--seconds 8]``.

A TF1 PS task runs in a cgroup with the quota (tfsim.lab.cgroups, as the lab's emulated hosts),
a worker task without one, both on loopback. The worker's client keeps ``--streams`` transfers
of a ``--mb`` MB variable in flight at once: reads (PS to worker), adds of a tensor the worker
made (worker to PS, applied on the PS), or both, and reports MB/s per direction and the PS's
CPU time per MB. A study of the lab matrix's finding (bench/results/lab-2026-11-26-matrix: a
0.29-core PS stopped at about 160-185 MB/s in both directions together): can a saturating test
measure that limit in advance? Needs root (cgroups) and TensorFlow.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tfsim.lab.cgroups import LabCgroups  # noqa: E402

PS_CODE = """
import sys, tensorflow as tf
cluster = tf.train.ClusterSpec({"ps": [sys.argv[1]], "worker": [sys.argv[2]]})
tf.distribute.Server(cluster, job_name="ps", task_index=0,
                     config=tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1,
                                                     inter_op_parallelism_threads=1)).join()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def client(ps: str, worker: str, mb: float, streams: int, seconds: float, mode: str) -> dict:
    import tensorflow as tf

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    cluster = tf.train.ClusterSpec({"ps": [ps], "worker": [worker]})
    server = tf.distribute.Server(cluster, job_name="worker", task_index=0)
    n = int(mb * 1e6 / 4)
    reads, adds = [], []
    for k in range(streams):
        with tf1.device("/job:ps/task:0"):
            var = tf1.get_variable(f"v{k}", [n], initializer=tf1.zeros_initializer())
        with tf1.device("/job:worker/task:0"):
            reads.append(tf.reduce_sum(tf.identity(var)))
            delta = tf.fill([n], 1e-6)
        with tf1.device("/job:ps/task:0"):
            adds.append(tf1.assign_add(var, delta, use_locking=False).op)
    sess = tf1.Session(server.target)
    sess.run(tf1.global_variables_initializer())
    done = {"down": 0, "up": 0}
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def loop(op, direction):
        while time.monotonic() < stop:
            sess.run(op)
            with lock:
                done[direction] += 1

    threads = []
    for k in range(streams):
        if mode in ("down", "both"):
            threads.append(threading.Thread(target=loop, args=(reads[k], "down")))
        if mode in ("up", "both"):
            threads.append(threading.Thread(target=loop, args=(adds[k], "up")))
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    return {d: done[d] * mb / elapsed for d in done}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ps-cores", type=float, default=2 / 7)
    parser.add_argument("--mb", type=float, default=16.0)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--modes", default="down,up,both")
    parser.add_argument("--_client", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._client:
        ps, worker, mode, seconds = args._client
        print(json.dumps(client(ps, worker, args.mb, args.streams, float(seconds), mode)))
        return
    for mode in args.modes.split(","):
        ps, worker = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        with LabCgroups() as cgroups:
            group = cgroups.group("ps0", args.ps_cores)
            env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
            ps_proc = subprocess.Popen([*group.wrapper(), sys.executable, "-c", PS_CODE, ps, worker], env=env,
                                       stderr=subprocess.DEVNULL)
            try:
                time.sleep(1.0)
                before = group.stats()
                out = subprocess.run([sys.executable, __file__, "--mb", str(args.mb), "--streams", str(args.streams),
                                      "--_client", ps, worker, mode, str(args.seconds)], env=env,
                                     capture_output=True, text=True, check=True, timeout=600)
                used = group.stats() - before
            finally:
                ps_proc.kill()
                ps_proc.wait()
        rates = json.loads(out.stdout.strip().splitlines()[-1])
        total = rates["down"] + rates["up"]
        print(f"ps {args.ps_cores:.3f} core, {mode}: down {rates['down']:.1f} MB/s, up {rates['up']:.1f} MB/s, "
              f"together {total:.1f} MB/s; PS CPU {used.usage_s:.2f} s, throttled {used.throttled_s:.2f} s "
              f"(includes the client's start-up)", flush=True)


if __name__ == "__main__":
    main()
