// The parameter server's network at packet level, for simulate/packet_replay.py (docs/model.md §12).
//
// A star: one switch, every task's host on a point-to-point link of its own to it, each end of
// every link a drop-tail FIFO of `buffer` bytes served at the link's rate, as the lab's tbf
// shapers are (tfsim/lab/netns.py). Every worker holds two TCP connections with every server,
// as a TF1 job's gRPC channels do: connection A (the worker is the client: its RunGraph and
// RecvTensor requests go up, the parameters and the RunGraph response come down) and connection
// B (the server is the client: its RecvTensor requests go down, the gradients come up).
//
// Each direction of a connection is a byte stream carrying whole messages in the order they were
// sent; a message is delivered when its last byte has been read at the receiver, and Python hears
// of it through one callback taking the message's token. Python's own timed events come back
// through a second callback taking an event id. Nothing here knows about the DAG.

#include <deque>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

namespace tfsim_packet {

using namespace ns3;

struct Stream {  // one direction of one TCP connection
    Ptr<Socket> tx;
    Ptr<Socket> rx;
    uint64_t queued_end = 0;  // bytes the application has handed over so far
    uint64_t written = 0;     // bytes accepted by the sending socket
    uint64_t received = 0;    // bytes read at the receiver
    std::deque<std::pair<uint64_t, int64_t>> pending;  // (stream offset of the last byte + 1, token)
};

struct Counters {
    uint64_t drops = 0;
};

class Network {
  public:
    std::function<void(int64_t)> on_event;      // a Python timer fired: its id
    std::function<void(int64_t)> on_delivered;  // a message arrived whole: its token

    // Streams are numbered ((worker * servers + server) * 2 + connection) * 2 + direction,
    // connection 0 = A, 1 = B; direction 0 = down (server to worker), 1 = up.
    int stream_index(int worker, int server, int connection, int direction) const {
        return ((worker * servers_ + server) * 2 + connection) * 2 + direction;
    }

    // Each direction of each host's link: a shaper of `rate` (wire bits/s), as tbf: with a bucket of
    // `bucket` bytes filled at that rate and spent at `peak` (0: no bucket, a plain FIFO at `rate`),
    // holding at most `buffer` bytes before it drops; the wire itself is much faster.
    void build(int workers, int servers, double rate_down_bps, double rate_up_bps, double peak_down_bps,
               double peak_up_bps, uint32_t bucket_down_bytes, uint32_t bucket_up_bytes, uint32_t peak_bucket_bytes,
               uint32_t buffer_down_bytes,
               uint32_t buffer_up_bytes, double one_way_delay_s, const std::string& congestion_control,
               uint32_t segment_bytes, double min_rto_s, uint32_t send_buffer_bytes, uint32_t receive_buffer_bytes,
               uint32_t initial_cwnd,
               uint32_t seed, double cap_down_bps, double cap_up_bps) {
        workers_ = workers;
        servers_ = servers;
        cap_down_bps_ = cap_down_bps;
        cap_up_bps_ = cap_up_bps;
        paced_ = congestion_control == "ns3::TcpBbr";
        RngSeedManager::SetSeed(1 + seed);
        RngSeedManager::SetRun(1);
        Config::SetDefault("ns3::TcpL4Protocol::SocketType", StringValue(congestion_control));
        Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(segment_bytes));
        Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(send_buffer_bytes));
        Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(receive_buffer_bytes));
        Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(initial_cwnd));
        Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(2));
        Config::SetDefault("ns3::TcpSocket::DelAckTimeout", TimeValue(MilliSeconds(40)));
        Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(Seconds(min_rto_s)));
        Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(MilliSeconds(1)));
        Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(true));
        // Linux paces the senders whose congestion control asks for it (BBR); the others send
        // as their window allows, at most at a calibrated connection cap (SenderCap).
        uint32_t packet_bytes = segment_bytes + 80;  // headers and options, with room
        if (peak_bucket_bytes < packet_bytes) peak_bucket_bytes = packet_bytes;

        NodeContainer sw;
        sw.Create(1);
        hosts_.Create(servers + workers);  // servers first, then workers
        InternetStackHelper internet;
        internet.Install(sw);
        internet.Install(hosts_);
        double wire_bps = 40.0 * (rate_down_bps > rate_up_bps ? rate_down_bps : rate_up_bps);
        if (peak_down_bps * 4 > wire_bps) wire_bps = 4 * peak_down_bps;
        if (peak_up_bps * 4 > wire_bps) wire_bps = 4 * peak_up_bps;

        Ipv4AddressHelper address;
        address.SetBase("10.1.0.0", "255.255.255.252");
        addresses_.clear();
        for (int h = 0; h < servers + workers; ++h) {
            bool is_server = h < servers;
            PointToPointHelper p2p;
            p2p.SetChannelAttribute("Delay", TimeValue(Seconds(one_way_delay_s)));
            p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(uint64_t(wire_bps))));
            p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue("1p"));
            // A segment leaves whole: the links' MTU holds the largest one TCP makes.
            p2p.SetDeviceAttribute("Mtu", UintegerValue(segment_bytes + 100 > 1500 ? segment_bytes + 100 : 1500));
            NetDeviceContainer devices = p2p.Install(hosts_.Get(h), sw.Get(0));
            // Device 0 is the host's egress, device 1 the switch's egress to the host.
            bool out_down = is_server;
            QueueDiscContainer out_q = Shaper(devices.Get(0), out_down ? rate_down_bps : rate_up_bps,
                                              out_down ? peak_down_bps : peak_up_bps,
                                              out_down ? bucket_down_bytes : bucket_up_bytes,
                                              out_down ? buffer_down_bytes : buffer_up_bytes, packet_bytes,
                                              peak_bucket_bytes);
            QueueDiscContainer in_q = Shaper(devices.Get(1), out_down ? rate_up_bps : rate_down_bps,
                                             out_down ? peak_up_bps : peak_down_bps,
                                             out_down ? bucket_up_bytes : bucket_down_bytes,
                                             out_down ? buffer_up_bytes : buffer_down_bytes, packet_bytes,
                                             peak_bucket_bytes);
            if (is_server) {  // the server's port: the bottleneck each way
                out_q.Get(0)->TraceConnectWithoutContext(
                    "Drop", MakeBoundCallback(&Network::CountDrop, &server_drops_down_));
                in_q.Get(0)->TraceConnectWithoutContext(
                    "Drop", MakeBoundCallback(&Network::CountDrop, &server_drops_up_));
            }
            Ipv4InterfaceContainer ifaces = address.Assign(devices);
            address.NewNetwork();
            addresses_.push_back(ifaces.GetAddress(0));
        }
        Ipv4GlobalRoutingHelper::PopulateRoutingTables();

        streams_.assign(size_t(workers) * servers * 4, Stream());
        // Listeners: servers accept connection A on port 7000, workers accept B on 7001.
        for (int h = 0; h < servers + workers; ++h) {
            SenderCap(h < servers);  // an accepted socket inherits its listener's
            Ptr<Socket> listener = Socket::CreateSocket(hosts_.Get(h), TcpSocketFactory::GetTypeId());
            listener->Bind(InetSocketAddress(Ipv4Address::GetAny(), h < servers ? 7000 : 7001));
            listener->Listen();
            listener->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                        MakeCallback(&Network::Accepted, this));
            listeners_.push_back(listener);
        }
        // Connecting sends a SYN, which the queue discs can take only once the simulation runs.
        Simulator::ScheduleNow(&Network::Connect, this);
    }

    // Hand `bytes` to a stream; `token` comes back through on_delivered once all have arrived.
    void send(int stream, uint64_t bytes, int64_t token) {
        Stream& s = streams_[stream];
        s.queued_end += bytes;
        s.pending.emplace_back(s.queued_end, token);
        Pump(stream);
    }

    void schedule(double delay_s, int64_t id) {
        Simulator::Schedule(Seconds(delay_s), &Network::Fire, this, id);
    }

    double now() const { return Simulator::Now().GetSeconds(); }
    void run() { Simulator::Run(); }
    void stop() { Simulator::Stop(); }
    void destroy() { Simulator::Destroy(); }
    bool connected() const { return accepted_ == 2 * workers_ * servers_; }
    uint64_t drops_down() const { return server_drops_down_; }
    uint64_t drops_up() const { return server_drops_up_; }
    uint64_t recoveries() const { return recoveries_; }
    uint64_t timeouts() const { return timeouts_; }

  private:
    int workers_ = 0;
    int servers_ = 0;
    NodeContainer hosts_;
    std::vector<Ipv4Address> addresses_;
    std::vector<Stream> streams_;
    std::vector<Ptr<Socket>> listeners_;
    std::map<Socket*, int> tx_stream_;  // socket -> the stream it sends
    std::map<Socket*, int> rx_stream_;  // socket -> the stream it receives
    int accepted_ = 0;
    uint64_t server_drops_down_ = 0;
    uint64_t server_drops_up_ = 0;
    uint64_t recoveries_ = 0;
    uint64_t timeouts_ = 0;
    double cap_down_bps_ = 0;
    double cap_up_bps_ = 0;
    bool paced_ = false;

    void Connect() {
        for (int w = 0; w < workers_; ++w) {
            for (int m = 0; m < servers_; ++m) {
                // A: the worker connects to the server.
                SenderCap(false);
                Ptr<Socket> a = Socket::CreateSocket(hosts_.Get(servers_ + w), TcpSocketFactory::GetTypeId());
                a->Bind();
                a->Connect(InetSocketAddress(addresses_[m], 7000));
                Attach(a, stream_index(w, m, 0, 1), stream_index(w, m, 0, 0));
                // B: the server connects to the worker.
                SenderCap(true);
                Ptr<Socket> b = Socket::CreateSocket(hosts_.Get(m), TcpSocketFactory::GetTypeId());
                b->Bind();
                b->Connect(InetSocketAddress(addresses_[servers_ + w], 7001));
                Attach(b, stream_index(w, m, 1, 0), stream_index(w, m, 1, 1));
            }
        }
    }

    // The sockets made next send down (a server's) or up (a worker's): a calibrated cap on one
    // worker's connection in that direction (docs/model.md §4.8) paces them at most at it.
    void SenderCap(bool down) const {
        double cap = down ? cap_down_bps_ : cap_up_bps_;
        Config::SetDefault("ns3::TcpSocketState::EnablePacing", BooleanValue(paced_ || cap > 0));
        Config::SetDefault("ns3::TcpSocketState::MaxPacingRate",
                           DataRateValue(DataRate(cap > 0 ? uint64_t(cap) : uint64_t(4e9))));
    }

    static QueueDiscContainer Shaper(Ptr<NetDevice> device, double rate_bps, double peak_bps, uint32_t bucket_bytes,
                                     uint32_t buffer_bytes, uint32_t packet_bytes, uint32_t peak_bucket_bytes) {
        TrafficControlHelper tc;
        uint32_t burst = bucket_bytes > packet_bytes ? bucket_bytes : packet_bytes;
        tc.SetRootQueueDisc("ns3::TbfQueueDisc", "MaxSize",
                            QueueSizeValue(QueueSize(QueueSizeUnit::BYTES, buffer_bytes > burst ? buffer_bytes : burst)),
                            "Burst", UintegerValue(burst), "Rate", DataRateValue(DataRate(uint64_t(rate_bps))));
        QueueDiscContainer q = tc.Install(device);
        if (peak_bps > rate_bps) {
            q.Get(0)->SetAttribute("Mtu", UintegerValue(peak_bucket_bytes));
            q.Get(0)->SetAttribute("PeakRate", DataRateValue(DataRate(uint64_t(peak_bps))));
        }
        return q;
    }

    static void CountDrop(uint64_t* counter, Ptr<const QueueDiscItem>) { ++*counter; }

    void Fire(int64_t id) { on_event(id); }

    void Attach(Ptr<Socket> socket, int sends, int receives) {
        streams_[sends].tx = socket;
        streams_[receives].rx = socket;
        tx_stream_[PeekPointer(socket)] = sends;
        rx_stream_[PeekPointer(socket)] = receives;
        socket->SetRecvCallback(MakeCallback(&Network::Receive, this));
        socket->SetSendCallback(MakeCallback(&Network::SpaceAvailable, this));
        socket->TraceConnectWithoutContext("CongState", MakeCallback(&Network::CongestionState, this));
    }

    void CongestionState(TcpSocketState::TcpCongState_t, TcpSocketState::TcpCongState_t now) {
        if (now == TcpSocketState::CA_LOSS) ++timeouts_;
        if (now == TcpSocketState::CA_RECOVERY) ++recoveries_;
    }

    void Accepted(Ptr<Socket> socket, const Address& from) {
        // The peer's address names its host; the listener's port names the connection.
        Ipv4Address peer = InetSocketAddress::ConvertFrom(from).GetIpv4();
        Address local;
        socket->GetSockName(local);
        uint16_t port = InetSocketAddress::ConvertFrom(local).GetPort();
        int peer_host = -1;
        for (size_t h = 0; h < addresses_.size(); ++h) {
            if (addresses_[h] == peer) peer_host = int(h);
        }
        Ptr<Node> node = socket->GetNode();
        int own_host = -1;
        for (uint32_t h = 0; h < hosts_.GetN(); ++h) {
            if (hosts_.Get(h) == node) own_host = int(h);
        }
        if (port == 7000) {  // A, at server own_host from worker peer_host
            int w = peer_host - servers_, m = own_host;
            Attach(socket, stream_index(w, m, 0, 0), stream_index(w, m, 0, 1));
        } else {  // B, at worker own_host from server peer_host
            int w = own_host - servers_, m = peer_host;
            Attach(socket, stream_index(w, m, 1, 1), stream_index(w, m, 1, 0));
        }
        ++accepted_;
    }

    void SpaceAvailable(Ptr<Socket> socket, uint32_t) {
        auto found = tx_stream_.find(PeekPointer(socket));
        if (found != tx_stream_.end()) Pump(found->second);
    }

    void Pump(int stream) {
        Stream& s = streams_[stream];
        if (!s.tx) return;
        while (s.written < s.queued_end) {
            uint32_t room = s.tx->GetTxAvailable();
            if (room == 0) return;
            uint64_t left = s.queued_end - s.written;
            uint32_t n = uint32_t(left < room ? left : room);
            int sent = s.tx->Send(Create<Packet>(n));
            if (sent <= 0) return;
            s.written += uint64_t(sent);
        }
    }

    void Receive(Ptr<Socket> socket) {
        auto found = rx_stream_.find(PeekPointer(socket));
        if (found == rx_stream_.end()) return;
        Stream& s = streams_[found->second];
        Ptr<Packet> packet;
        while ((packet = socket->Recv())) {
            s.received += packet->GetSize();
        }
        while (!s.pending.empty() && s.pending.front().first <= s.received) {
            int64_t token = s.pending.front().second;
            s.pending.pop_front();
            on_delivered(token);
        }
    }
};

}  // namespace tfsim_packet
