#!/usr/bin/env bash
# Regenerate the real runs bundled in data/ with the project's own harness.
# Needs TensorFlow (`make data` installs it). Takes about 10 minutes on a 2-core machine.
#
# Every run uses one inter-op thread, so that each task runs one op at a time: the model
# of docs/model.md §2.4 (one chunk per worker and resource) then describes the real execution.
set -euo pipefail
cd "$(dirname "$0")/.."
TFSIM=${TFSIM:-.venv/bin/tfsim}
PYTHON=${PYTHON:-$(dirname "$TFSIM")/python}
mkdir -p data/runs data/profiles data/raw
run() {  # name, then collect options
  local name=$1; shift
  "$TFSIM" collect --out "data/runs/$name" --force --no-progress --inter-op-threads 1 "$@"
  rm -rf "data/runs/$name/logs"  # TensorFlow's log chatter, and specs with this machine's paths
  "$TFSIM" profile "data/runs/$name" -o "data/profiles/$name.npz"
}
run tiny       --model tiny       --batch 32 --steps 30
run alexnet    --model alexnet    --batch 16 --steps 20
run vgg11      --model vgg11      --batch 16 --image-size 64 --steps 20
run resnet50   --model resnet50   --batch 8  --image-size 64 --steps 20
run inception3 --model inception3 --batch 8  --image-size 96 --steps 20

# A TF2 ParameterServerStrategy run with its capture (root: tcpdump, iperf3), zero-initialised so that
# the capture compresses; its profile and calibration (docs/formats.md §2.2, docs/calibration.md §8).
mkdir -p data/captures data/clusters
"$TFSIM" collect --api tf2-pss --model tiny --batch 8 --steps 12 --warmup 3 --trace-ms 400 --zero-init \
  --inter-op-threads 1 --capture --out data/captures/tiny_tf2pss --force --no-progress
rm -rf data/captures/tiny_tf2pss/logs
"$TFSIM" profile data/captures/tiny_tf2pss -o data/profiles/tiny_tf2pss.npz
"$TFSIM" calibrate data/captures/tiny_tf2pss -o data/clusters/tiny_tf2pss_lo.json

# Raw single-step files for the parser tests: binary, text format, and Chrome trace JSON.
"$PYTHON" - <<'PY'
import gzip, shutil
from pathlib import Path
from google.protobuf import text_format
from tensorboard.compat.proto import config_pb2

step = Path("data/runs/tiny/trace/step_00002.pb.gz")
raw = gzip.decompress(step.read_bytes())
Path("data/raw/tiny_step.pb").write_bytes(raw)
message = config_pb2.RunMetadata()
message.ParseFromString(raw)
Path("data/raw/tiny_step.pbtxt").write_text(text_format.MessageToString(message))
shutil.copy("data/runs/tiny/trace/step_00000.chrome.json.gz", "data/raw/tiny_step.chrome.json.gz")
shutil.copy("data/runs/tiny/variables.json", "data/raw/tiny_variables.json")
PY
du -sh data
