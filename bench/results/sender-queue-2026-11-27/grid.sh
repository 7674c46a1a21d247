#!/usr/bin/env bash
# The six variants of README.md on the twelve diagnostic points (about 25 min on this machine).
# Run from a worktree of the commit named in README.md with prototype.patch applied:
#   git worktree add /tmp/wt-sq <commit> && cd /tmp/wt-sq && git apply bench/results/sender-queue-2026-11-27/prototype.patch
#   bash bench/results/sender-queue-2026-11-27/grid.sh > grid.txt
set -euo pipefail
here=bench/results/sender-queue-2026-11-27
P="bench/results/auto-2026-11-27/fresh:tiny-200mbit:1,2,3,4 bench/results/auto-2026-11-27/fresh:recommender-200mbit:1,2,3 bench/results/packet-2026-11-26/fresh:recommender-400mbit:2,3 bench/results/lab-2026-11-27-matrix:tiny-50mbit:1,2,3"
run() { env "$@" python "$here/diag.py" "$*" $P 2>&1 | grep "W=" ; }
run TFSIM_BP=0
run TFSIM_BP=1
run TFSIM_BP=1 SEG=65160 DUPTHRESH=1 DELACK=1 IW=1
run TFSIM_BP=1 SEG=65160 DUPTHRESH=1 DELACK=1 IW=1 WIN=queue_window
run TFSIM_BP=1 SEG=65160 DUPTHRESH=1 DELACK=1 IW=1 CC=bbr
run TFSIM_BP=1 CC=bbr
