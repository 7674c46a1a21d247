"""A calibration in a few lines of text, as ``tfsim calibrate`` prints it."""

from __future__ import annotations

from tfbase.units import format_rate


def _pct(value) -> str:
    return "n/a" if value is None else f"{value * 100:.1f}%"


def format_calibration(document: dict) -> str:
    bw, spread = document["bandwidth_Bps"], document["bandwidth_spread_Bps"]
    iperf, busy = document.get("iperf3_bandwidth_Bps") or bw, document.get("busy_rate_Bps") or {}
    source = document.get("bandwidth_source", "iperf3")
    caps = document.get("connection_cap_Bps") or {}
    lines = []
    for d in ("downlink", "uplink"):
        busy_text = format_rate(busy[d]) if busy.get(d) else "n/a"
        from_text = "from iperf3" if d in caps else f"from the {source}"
        lines.append(f"{d:<8} B {format_rate(bw[d])} {from_text} (iperf3 median of {spread[d]['runs']} "
                     f"{format_rate(iperf[d])}, {format_rate(spread[d]['min'])}..{format_rate(spread[d]['max'])}; "
                     f"capture's busy rate {busy_text})  WIN {document['win_bytes_by_direction'].get(d)} bytes")
        if caps.get(d):
            lines.append(f"{'':<8} each connection at most {format_rate(caps[d])}: the capture's busy rate, well "
                         f"below iperf3's, was the connection's, not the link's")
        o = document["overhead"].get(d)
        if o:
            lines.append(f"{'':<8} overhead {o['alpha_s_per_byte'] * 1e9:.3g} ns/byte + {o['beta_s'] * 1e3:.3g} ms "
                         f"(Theil-Sen, n={o['n']}, R²={o['r2']:.2f}, median |residual| "
                         f"{o['residual_median_abs_s'] * 1e3:.2f} ms)")
    lines.append("stream end-time error (median / p95 over streams >= 100 KB):")
    for model, per in document["transfer_model_error"].items():
        cells = "  ".join(f"{d} {_pct(e.get('median'))} / {_pct(e.get('p95'))}" for d, e in per.items() if d != "all")
        lines.append(f"  {model:<6} {cells}")
    check = document.get("overhead_placement_check") or {}
    if check:
        errs = "  ".join(f"{k} {v * 100:+.1f}%" for k, v in check["relative_error_of_one_worker_step"].items())
        lines.append(f"overhead placement: {document['overhead_placement']} (one-worker step time vs the traced "
                     f"{check['traced_makespan_median_s'] * 1e3:.1f} ms: {errs})")
    lines.append(f"default transfer model: {document['default_transfer']}")
    ps_cpu = document.get("ps_cpu")
    if ps_cpu:
        busy = "".join(f"; {x['cpu_s_per_step'] * 1e3:.2f} ms with {x['workers']} workers ({x['runs']} run(s))"
                         for x in ps_cpu.get("busy", []))
        lines.append(f"PS CPU per worker-step: {ps_cpu['cpu_s_per_step'] * 1e3:.2f} ms with one worker{busy}, on "
                     f"{ps_cpu['cores']:g} core(s) per PS task")
    loss = (document.get("capture_loss") or {}).get("by_direction") or {}
    damaged = {d: v for d, v in loss.items()
               if v.get("lost_bytes") or v.get("skipped_bytes") or v.get("streams_excluded")}
    drops = (document.get("capture_loss") or {}).get("kernel_drops")
    if drops:
        lines.append(f"capture: the kernel dropped {drops} packets while capturing (tcpdump's count)")
    for d, v in damaged.items():
        lines.append(f"capture loss, {d}: {v['lost_fraction'] * 100:.2f}% of its bytes ({v['lost_bytes']} never "
                     f"captured, {v['skipped_bytes']} not decodable); {v['streams_excluded']} tensor streams left out")
    return "\n".join(lines)
