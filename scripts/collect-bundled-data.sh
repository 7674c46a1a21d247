#!/usr/bin/env bash
# Regenerate the real runs bundled in data/runs with the project's own harness.
# Needs TensorFlow (make .venv-tf). Takes about 10 minutes on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
TFSIM=${TFSIM:-.venv/bin/tfsim}
out=data/runs
mkdir -p "$out"
run() {  # name, then collect options
  local name=$1; shift
  "$TFSIM" collect --out "$out/$name" --force --no-progress "$@"
  "$TFSIM" profile "$out/$name" -o "data/profiles/$name.npz"
}
mkdir -p data/profiles
run tiny       --model tiny       --batch 32 --steps 30
run alexnet    --model alexnet    --batch 16 --steps 20
run vgg11      --model vgg11      --batch 16 --image-size 64 --steps 20
run resnet50   --model resnet50   --batch 8  --image-size 64 --steps 20
run inception3 --model inception3 --batch 8  --image-size 96 --steps 20
du -sh data
