#!/usr/bin/env bash
# Regenerate the bundled captures of data/captures/ (needs root for tcpdump, TensorFlow, iperf3).
#
#   data/captures/make_captures.sh [OUT_DIR]      (default: the directory of this script)
#
# For each capture: tcpdump on lo (large buffer, full snaplen) around a real `tfsim collect`
# run, then only the run's own connections (its ports from run.json) are kept, gzip'd, in the
# run directory (without logs/), so that `tfsim calibrate data/captures/NAME` reads it as it
# reads a run collected with --capture. Then three `iperf3 -J` runs on loopback in each
# direction, into each capture's iperf3/ (uplink_K.json, and downlink_K.json with -R), and the
# three forward runs also into iperf3/lo_runK.json (the reader tests' inputs).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here}"
root="$(cd "$here/../.." && pwd)"
tfsim="${TFSIM:-$root/.venv/bin/tfsim}"
python="${PYTHON:-$root/.venv/bin/python}"
work="$(mktemp -d)"
tcpdump_pid=""
iperf_pid=""
cleanup() {
  [ -n "$tcpdump_pid" ] && kill "$tcpdump_pid" 2>/dev/null || true
  [ -n "$iperf_pid" ] && kill "$iperf_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# capture NAME FORMAT(pcap|pcapng) ENV... -- COLLECT_ARGS...
capture() {
  local name="$1" format="$2"; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local raw="$work/$name.raw.pcap"
  tcpdump -i lo -B 262144 -s 0 --time-stamp-precision nano -w "$raw" 'tcp' 2>"$work/$name.tcpdump.log" &
  tcpdump_pid=$!
  sleep 1
  env "${envs[@]}" "$tfsim" collect "$@" --out "$work/$name.run" --force --no-progress
  sleep 1
  kill -INT "$tcpdump_pid"; wait "$tcpdump_pid" || true; tcpdump_pid=""
  cat "$work/$name.tcpdump.log" >&2
  local filter
  filter="$("$python" -c '
import json, sys
cluster = json.load(open(sys.argv[1]))["cluster"]
ports = [a.rsplit(":", 1)[1] for tasks in cluster.values() for a in tasks]
print(" or ".join("port " + p for p in ports))' "$work/$name.run/run.json")"
  rm -rf "$out/$name"
  cp -r "$work/$name.run" "$out/$name"
  rm -rf "$out/$name/logs"
  if [ "$format" = pcapng ]; then
    tcpdump -r "$raw" -w "$work/$name.pcap" "$filter"
    editcap -F pcapng "$work/$name.pcap" "$work/$name.pcapng"
    gzip -9 -c "$work/$name.pcapng" >"$out/$name/capture.pcapng.gz"
  else
    # microsecond timestamps, as tcpdump writes by default
    tcpdump -r "$raw" --time-stamp-precision micro -w "$work/$name.pcap" "$filter" 2>/dev/null \
      || tcpdump -r "$raw" -w "$work/$name.pcap" "$filter"
    gzip -9 -c "$work/$name.pcap" >"$out/$name/capture.pcap.gz"
  fi
}

# 1. The tiny model with TensorFlow's default gRPC settings (4 MiB windows).
capture tiny_lo pcap -- --model tiny --steps 4 --warmup 1 --inter-op-threads 1
# 2. Smaller tensors (16 px images: a 128 KiB weight) with the receive window pinned to
#    64 KiB and BDP probing off, so that streams stall on flow control; pcapng, nanoseconds.
capture tiny16_lo_smallwin pcapng TF_GRPC_DEFAULT_OPTIONS=grpc.http2.bdp_probe=0,grpc.http2.lookahead_bytes=65535 \
  -- --model tiny --image-size 16 --steps 4 --warmup 1 --inter-op-threads 1

# 3. iperf3 on loopback, three repetitions each way, for every capture's run directory.
mkdir -p "$out/iperf3"
port="$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
for i in 0 1 2; do
  for direction in uplink downlink; do
    iperf3 -s -1 -B 127.0.0.1 -p "$port" >/dev/null 2>&1 &
    iperf_pid=$!
    sleep 1
    reverse=""
    [ "$direction" = downlink ] && reverse="-R"
    iperf3 -c 127.0.0.1 -p "$port" -J -t 2 $reverse >"$work/${direction}_$i.json"
    wait "$iperf_pid" || true; iperf_pid=""
  done
  cp "$work/uplink_$i.json" "$out/iperf3/lo_run$((i + 1)).json"
done
for name in tiny_lo tiny16_lo_smallwin; do
  mkdir -p "$out/$name/iperf3"
  cp "$work"/uplink_*.json "$work"/downlink_*.json "$out/$name/iperf3/"
done
ls -la "$out"/*
