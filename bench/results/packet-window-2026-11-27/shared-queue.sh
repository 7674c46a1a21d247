#!/bin/bash
# Run as root with iperf3 installed (make system-deps); CC=bbr|cubic picks the congestion control.
# Namespaces are removed on exit. See README.md in this directory.
set -e
for n in tA tA2 tR tB; do ip netns add $n; done
trap 'for n in tA tA2 tR tB; do ip netns del $n 2>/dev/null; done' EXIT
ip -n tR link add br0 type bridge; ip -n tR link set br0 up
i=1
for n in tA tA2 tB; do
  ip link add eth0 netns $n type veth peer name v$i netns tR
  ip -n $n addr add 10.78.0.$i/24 dev eth0; ip -n $n link set eth0 up; ip -n $n link set lo up
  ip -n tR link set v$i master br0; ip -n tR link set v$i up
  ip netns exec $n tc qdisc add dev eth0 root tbf rate 100mbit burst 98304 latency 5ms
  ip netns exec tR tc qdisc add dev v$i root tbf rate 100mbit burst 98304 latency 5ms
  i=$((i+1))
done
ip netns exec tB iperf3 -s -D -p 5301 >/dev/null 2>&1; ip netns exec tB iperf3 -s -D -p 5302 >/dev/null 2>&1; sleep 0.5
ip netns exec tA iperf3 -c 10.78.0.3 -p 5301 -t 4 -C ${CC:-bbr} -J > /tmp/r1.json &
ip netns exec tA2 iperf3 -c 10.78.0.3 -p 5302 -t 4 -C ${CC:-bbr} -J > /tmp/r2.json
wait
echo "B's port on the bridge (remote queue for both senders):"; ip netns exec tR tc -s qdisc show dev v3 | grep dropped
echo "senders' own egress:"; ip netns exec tA tc -s qdisc show dev eth0 | grep dropped; ip netns exec tA2 tc -s qdisc show dev eth0 | grep dropped
for f in r1 r2; do python3 -c "import json;d=json.load(open('/tmp/$f.json'));print('$f Mbit/s', round(d['end']['sum_sent']['bits_per_second']/1e6,1), 'retransmits', d['end']['sum_sent'].get('retransmits'), 'max snd_cwnd', max(i['streams'][0].get('snd_cwnd',0) for i in d['intervals']))"; done
pkill -f "iperf3 -s -D -p 530" || true
