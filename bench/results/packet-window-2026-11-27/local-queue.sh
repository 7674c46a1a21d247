#!/bin/bash
# Run as root with iperf3 installed (make system-deps); CC=bbr|cubic picks the congestion control.
# Namespaces are removed on exit. See README.md in this directory.
set -e
ip netns add tsqA; ip netns add tsqB
trap 'ip netns del tsqA 2>/dev/null; ip netns del tsqB 2>/dev/null' EXIT
ip link add ethA netns tsqA type veth peer name ethB netns tsqB
ip -n tsqA addr add 10.77.0.1/24 dev ethA; ip -n tsqB addr add 10.77.0.2/24 dev ethB
ip -n tsqA link set ethA up; ip -n tsqB link set ethB up; ip -n tsqA link set lo up; ip -n tsqB link set lo up
# sender A's own egress: 100 Mbit/s, 5 ms queue (as the lab's)
ip netns exec tsqA tc qdisc add dev ethA root tbf rate 100mbit burst 98304 latency 5ms
ip netns exec tsqB iperf3 -s -D -1 -p 5299 >/dev/null 2>&1; sleep 0.5
ip netns exec tsqA nstat -n >/dev/null
ip netns exec tsqA iperf3 -c 10.77.0.2 -p 5299 -t 4 -C ${CC:-bbr} -J > /tmp/tsq-local.json
echo "local shaper (sender's own egress):"; ip netns exec tsqA tc -s qdisc show dev ethA | grep -E "dropped|backlog" | head -2
ip netns exec tsqA nstat | grep -E "TcpRetransSegs|TcpExtTCPTimeouts|TcpExtTCPLossProbes" || true
python3 -c "import json;d=json.load(open('/tmp/tsq-local.json'));print('Mbit/s', round(d['end']['sum_sent']['bits_per_second']/1e6,1), 'retransmits', d['end']['sum_sent'].get('retransmits'))"
