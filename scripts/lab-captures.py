"""Make the shaped-link captures bundled in data/captures (needs root and TensorFlow).

Each of the first three is a complete run directory of ``wide_mlp`` (one 16 MiB, three 4 MiB
and one 200 KB weight tensor, zero-initialised so that the capture compresses) with 1 PS and
1 worker, each in its own network namespace, their links shaped with tbf, plus iperf3 results
and the tcpdump capture taken on the worker. The fourth, ``tiny_100mbit_w2_ps``, is the lab's
timeline view of a W = 2 run: ``tiny`` with 2 workers on 100 Mbit/s links, every task under
the lab's default CPU quota, captured at the PS (no iperf3). About 3 minutes.
"""

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tfprofile.harness.launcher import CaptureSite, CollectConfig  # noqa: E402
from tfsim.lab.collect import HostQuotas, collect_in_lab  # noqa: E402

SMALL_WINDOW = "grpc.http2.bdp_probe=0,grpc.http2.lookahead_bytes=65535"
SETTINGS = [
    ("wide_1gbit", 1_000_000_000, 6, ()),
    ("wide_100mbit", 100_000_000, 3, ()),
    ("wide_1gbit_smallwin", 1_000_000_000, 3, (("TF_GRPC_DEFAULT_OPTIONS", SMALL_WINDOW),)),
]

for name, rate, steps, env in SETTINGS:
    out = ROOT / "data" / "captures" / name
    config = CollectConfig(out_dir=out, model="wide_mlp", batch_size=16, steps=steps, warmup_steps=1,
                           inter_op_threads=1, capture=True, zero_init=True, env=env, iperf_seconds=2.0)
    collect_in_lab(config, rate, progress=False, overwrite=True)
    shutil.rmtree(out / "logs", ignore_errors=True)
    print(out, flush=True)

out = ROOT / "data" / "captures" / "tiny_100mbit_w2_ps"
config = CollectConfig(out_dir=out, model="tiny", batch_size=32, steps=12, warmup_steps=2, trace_every=13,
                       workers=2, intra_op_threads=1, inter_op_threads=1, capture=True,
                       capture_site=CaptureSite.PS, iperf_repeats=0, zero_init=True)
collect_in_lab(config, 100_000_000, progress=False, overwrite=True, quotas=HostQuotas(2 / 3, 2 / 3))
shutil.rmtree(out / "logs", ignore_errors=True)
print(out, flush=True)
