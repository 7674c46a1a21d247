"""Feasibility check of ns-3 (pip package ns3 3.44) for mechanism 1: does ns-3's TcpBbr reproduce a flow
that stays slow after a competitor leaves, with the reverse direction loaded?

Topology: PS -- R at 400 Mbit/s (the shared link: FIFO queue disc, 2.5 MB), R -- W0..W2 at 10 Gbit/s, 20 us.
Flow A: PS -> W0 bulk 0..3 s. Flow B: PS -> W1 from 1.0 s to 1.5 s. Reverse load: W2 -> PS bulk 0..3 s.
Prints A's goodput per 20 ms around B's stop, and the wall time. Run with the ns3 venv:
    study-data/venv-ns3/bin/python scripts/research_w4/ns3_onoff.py [bbr|cubic] [reverse|noreverse]
"""
import sys
import time

import cppyy

cppyy.cppdef(r"""
#include <vector>
using namespace ns3;
static std::vector<double> g_samples;
static Ptr<PacketSink> g_sink;
void Sample(double dt, double until) {
  g_samples.push_back((double)g_sink->GetTotalRx());
  if (Simulator::Now().GetSeconds() + dt < until) Simulator::Schedule(Seconds(dt), &Sample, dt, until);
}
std::vector<double> RunOnOff(std::string cc, bool reverse, double bStart, double bStop, double until) {
  g_samples.clear();
  Config::SetDefault("ns3::TcpL4Protocol::SocketType", StringValue(cc));
  Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(1448));
  Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(8 << 20));
  Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(8 << 20));
  NodeContainer ps, r, w; ps.Create(1); r.Create(1); w.Create(3);
  PointToPointHelper bott; bott.SetDeviceAttribute("DataRate", StringValue("400Mbps")); bott.SetChannelAttribute("Delay", StringValue("10us"));
  bott.SetQueue("ns3::DropTailQueue", "MaxSize", StringValue("5p"));
  PointToPointHelper fast; fast.SetDeviceAttribute("DataRate", StringValue("10Gbps")); fast.SetChannelAttribute("Delay", StringValue("10us"));
  InternetStackHelper st; st.InstallAll();
  NetDeviceContainer d0 = bott.Install(ps.Get(0), r.Get(0));
  TrafficControlHelper tch; tch.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", StringValue("2500000B"));
  tch.Install(d0);
  Ipv4AddressHelper a; a.SetBase("10.1.0.0", "255.255.255.0"); Ipv4InterfaceContainer i0 = a.Assign(d0);
  std::vector<Ipv4InterfaceContainer> iw;
  for (int k = 0; k < 3; ++k) {
    NetDeviceContainer d = fast.Install(r.Get(0), w.Get(k));
    std::ostringstream base; base << "10.2." << k << ".0"; a.SetBase(base.str().c_str(), "255.255.255.0"); iw.push_back(a.Assign(d));
  }
  Ipv4GlobalRoutingHelper::PopulateRoutingTables();
  uint16_t port = 5000;
  PacketSinkHelper sinkh("ns3::TcpSocketFactory", InetSocketAddress(Ipv4Address::GetAny(), port));
  ApplicationContainer sinks = sinkh.Install(w); sinks.Start(Seconds(0)); sinks.Stop(Seconds(until));
  ApplicationContainer pssink = sinkh.Install(ps.Get(0)); pssink.Start(Seconds(0));
  g_sink = DynamicCast<PacketSink>(sinks.Get(0));
  BulkSendHelper A("ns3::TcpSocketFactory", InetSocketAddress(iw[0].GetAddress(1), port)); A.SetAttribute("MaxBytes", UintegerValue(0));
  ApplicationContainer aa = A.Install(ps.Get(0)); aa.Start(Seconds(0.0)); aa.Stop(Seconds(until));
  BulkSendHelper B("ns3::TcpSocketFactory", InetSocketAddress(iw[1].GetAddress(1), port)); B.SetAttribute("MaxBytes", UintegerValue(0));
  ApplicationContainer bb = B.Install(ps.Get(0)); bb.Start(Seconds(bStart)); bb.Stop(Seconds(bStop));
  if (reverse) {
    BulkSendHelper C("ns3::TcpSocketFactory", InetSocketAddress(i0.GetAddress(0), port)); C.SetAttribute("MaxBytes", UintegerValue(0));
    ApplicationContainer cc2 = C.Install(w.Get(2)); cc2.Start(Seconds(0.0)); cc2.Stop(Seconds(until));
  }
  Simulator::Schedule(Seconds(0.0), &Sample, 0.02, until);
  Simulator::Stop(Seconds(until));
  Simulator::Run();
  Simulator::Destroy();
  return g_samples;
}
""")

cc = {"bbr": "ns3::TcpBbr", "cubic": "ns3::TcpCubic"}[sys.argv[1] if len(sys.argv) > 1 else "bbr"]
reverse = (sys.argv[2] if len(sys.argv) > 2 else "reverse") == "reverse"
t = time.time()
s = list(cppyy.gbl.RunOnOff(cc, reverse, 1.0, 1.5, 2.5))
wall = time.time() - t
rates = [(s[i + 1] - s[i]) / 0.02 / 1e6 for i in range(len(s) - 1)]
print(f"{cc} reverse={reverse}: simulated 2.5 s in {wall:.1f} s wall")
for i in range(40, min(len(rates), 110), 5):
    print(f"  t={i * 0.02:4.2f}s A {' '.join(f'{x:5.1f}' for x in rates[i:i + 5])} MB/s")
