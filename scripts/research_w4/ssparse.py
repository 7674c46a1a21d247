"""Parse ss -tinH samples (T <unix> lines between them) into rows with every numeric field."""
import re

HEAD = re.compile(r"^(\S+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)")
def parse(path):
    rows, t, head = [], None, None
    for line in open(path):
        if line.startswith("T "):
            t = float(line.split()[1]); continue
        m = HEAD.match(line)
        if m:
            head = m; continue
        if head is None: continue
        r = {"t": t, "recv_q": int(head.group(2)), "send_q": int(head.group(3)), "local": head.group(4), "peer": head.group(5)}
        s = line
        for key in ("cwnd", "unacked", "notsent", "retrans", "lost", "mss", "bytes_sent", "bytes_acked", "bytes_received", "segs_out", "data_segs_out", "delivered"):
            mm = re.search(rf"\b{key}:(\d+)", s)
            if mm: r[key] = int(mm.group(1))
        mm = re.search(r"\brtt:([\d.]+)/([\d.]+)", s)
        if mm: r["rtt_ms"] = float(mm.group(1))
        mm = re.search(r"minrtt:([\d.]+)", s)
        if mm: r["minrtt_ms"] = float(mm.group(1))
        mm = re.search(r"bbr:\(bw:([\d.]+)([KMG]?)bps", s)
        if mm: r["bbr_bw_bps"] = float(mm.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[mm.group(2)]
        mm = re.search(r"pacing_gain:([\d.]+)", s)
        if mm: r["pacing_gain"] = float(mm.group(1))
        for key in ("pacing_rate", "delivery_rate", "send"):
            mm = re.search(rf"\b{key} ([\d.]+)([KMG]?)bps", s)
            if mm: r[key + "_bps"] = float(mm.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[mm.group(2)]
        r["app_limited"] = "app_limited" in s
        r["cc"] = s.split()[0]
        rows.append(r); head = None
    return rows
