"""``tfsim predict``: simulate the job on W workers; the throughput table, JSON, CSV, plot and trace."""

from __future__ import annotations

from pathlib import Path

from tfbase.errors import UsageError
from tfsim.cli.options import (
    PLACEMENT_CHOICES,
    add_cluster_options,
    add_enforcement_option,
    add_mode_option,
    add_output_options,
    add_replicas_option,
    add_seed_option,
    add_steps_options,
    add_sweep_options,
    add_tie_order_option,
    positive_int,
    sweep_journal,
    sweep_run,
    task_hosts,
    with_latency,
)


def register(sub) -> None:
    p = sub.add_parser(
        "predict", help="simulate the job on W workers: throughput table and plot",
        description="Replay a 1-worker profile for W workers (and M parameter servers) with the trace-generation "
                    "simulation of ICPE Alg. 3.1 and report throughput (examples/s, summed over workers) with a "
                    "95% confidence interval, step times and link utilisation, one row per configuration.",
        epilog="Rates: 1gbit, 100mbit, 10Gbps (bits/s) or 125MB/s, 1.25e8 (bytes/s). Lists: --workers 1-16 or "
               "1,2,4,8; --transfer http2,fifo; --sharing ps,fcfs.",
    )
    p.add_argument("profile", type=Path, metavar="PROFILE")
    add_cluster_options(p)
    p.add_argument("--ps", dest="servers", type=positive_int, metavar="M",
                   help="re-partition the variables over M parameter servers, placed as --placement says "
                        "(default: as profiled)")
    p.add_argument("--placement", choices=PLACEMENT_CHOICES, default=None,
                   help="how --ps places the variables, as TensorFlow's replica_device_setter does: round_robin "
                        "(TensorFlow's default: variable i on server i mod M, in creation order, whatever its "
                        "size) or greedy (each variable on the server holding the fewest bytes so far) (default: "
                        "as the profiled job placed them, collect --placement; round_robin if not recorded)")
    add_mode_option(p)
    p.add_argument("--sharing", default="ps", help="link sharing: ps, fcfs, hybrid, flow_cap (default: ps)")
    p.add_argument("--transfer", default=None,
                   help="transfer scheduler(s) and orders, comma-separated: grpc (today's gRPC: whole streams in "
                        "send-ready order, pausing where an HTTP/2 window runs out), http2 (ICPE's model of TF "
                        "1.13's gRPC), fifo (whole streams as they become ready), and transfer orders enforced with "
                        "the priority scheduler: recorded (TensorFlow's order in the profiled run, the reference "
                        "that order gains are measured against), tic and tac (TicTac's), reverse (TIC reversed), "
                        "random (five seeded permutations, random#0..random#4) or the NAME of a --priorities file; "
                        "packet (whole streams in send-ready order over TCP connections simulated packet by packet "
                        "by ns-3: drops, retransmissions and timeouts included, up to 64 workers, seconds per "
                        "configuration; pip install 'tfsim[packet]'); auto (per W: packet from W = 2 where the "
                        "PS's port has a bounded buffer (calibrated or --buffer), the cluster's default at W = 1, "
                        "without a buffer or where packet cannot run; the transfer column says which ran) "
                        "(default: the cluster's default_transfer, grpc for clusters calibrated from TF 2.x "
                        "captures; http2 without a calibration)")
    p.add_argument("--packet-cc", choices=("reno", "cubic", "bbr"), default="reno",
                   help="the congestion control of --transfer packet's TCP senders (default: reno, which "
                        "predicted the lab's Linux senders best; ns-3's bbr is not Linux's, docs/model.md §12)")
    p.add_argument("--packet-window", choices=("congestion", "queue_window"), default="congestion",
                   help="what bounds a --transfer packet connection's bytes in flight: its congestion window "
                        "(default), or also the calibrated queue window (the one-worker capture's; "
                        "docs/model.md §12)")
    p.add_argument("--priorities", type=Path, action="append", default=[], metavar="NAME=FILE|FILE",
                   help="a TicTac priority file (name<TAB>priority); its order is used by --transfer NAME "
                        "(default NAME: the file's stem). Repeatable.")
    add_enforcement_option(p)
    add_tie_order_option(p)
    p.add_argument("--flow-cap", metavar="RATE", help="per-flow cap for --sharing flow_cap")
    add_steps_options(p, steps=1000)
    p.add_argument("--stagger", type=float, default=1.0, metavar="STEPS",
                   help="workers start spread evenly over this many profiled steps, as real workers never start "
                        "at one instant (default: 1; 0 starts all at once, as the papers' algorithm does, and "
                        "leaves them in lock step)")
    add_seed_option(p)
    add_replicas_option(p)
    p.add_argument("--ci-target", type=float, metavar="F",
                   help="double the steps until the 95%% half-width is below F x throughput")
    p.add_argument("--settle", action="store_true",
                   help="double the steps until each run's rate settles: its second half of measured steps "
                        "within 5%% of its first (the table's drift column names the rows that have not)")
    p.add_argument("--trace-out", type=Path, metavar="OUT.json",
                   help="write a Chrome trace (Perfetto, chrome://tracing) of a simulated run")
    p.add_argument("--trace-workers", type=positive_int, help="workers in the traced run (default: the largest W)")
    p.add_argument("--trace-steps", type=positive_int, default=3, help="steps per worker in the trace (default: 3)")
    plan = p.add_argument_group("cost and what-ifs")
    plan.add_argument("--price", metavar="worker=P,ps=P",
                      help="$/hour of a worker host and of a PS host: adds $/hour and $ per million examples, and "
                           "the configurations no other beats on both throughput and cost")
    plan.add_argument("--examples", type=float, metavar="N", help="an epoch's examples: adds hours per epoch")
    plan.add_argument("--buffer", metavar="SIZE",
                      help="the links' buffer at the PS's port (e.g. 160kb, 2mb), in place of the cluster's "
                           "(CLUSTER.json buffer_bytes): the queue the model builds at a link holds no more; also say "
                           "from which W the workers' uploads, each connection keeping the calibrated queue window "
                           "queued there, overflow it (the model's links do not lose the packets, so expect the real "
                           "job somewhat below the table from there; docs/model.md §4.5, §10); stated in --json as "
                           "buffer")
    plan.add_argument("--target", type=float, metavar="EPS",
                      help="with --price: the cheapest configuration reaching this many examples/s")
    plan.add_argument("--deadline", type=float, metavar="HOURS",
                      help="with --price and --examples: the cheapest configuration finishing an epoch in time")
    plan.add_argument("--compute-scale", type=float, default=1.0, metavar="F",
                      help="what-if: the workers' computation takes F times as long (0.5: a host twice as fast); "
                           "transfers and the calibration stay as they are")
    plan.add_argument("--ps-compute-scale", type=float, default=1.0, metavar="F",
                      help="what-if: the parameter servers' computation takes F times as long")
    plan.add_argument("--worker-speed", metavar="F,F,...|lognormal:SIGMA",
                      help="stragglers: worker 0, 1, ... compute at these speeds (others at 1; 0.5 is twice as slow), "
                           "or every worker at a speed drawn from a lognormal of median 1 (seeded by --seed); async "
                           "workers wait for no one, a sync barrier waits for the slowest")
    add_output_options(p)
    add_sweep_options(p)
    p.set_defaults(handler=run)


def worker_speeds(text: str | None, seed: int):
    """--worker-speed as the library's WorkerSpeeds, or None."""
    from simulate.config import WorkerSpeeds

    return WorkerSpeeds.parse(text, seed) if text else None


def _names(text: str) -> list[str]:
    return list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))


def run(args) -> int:
    from simulate.chrome_trace import write_chrome_trace
    from simulate.cluster_file import resolve_cluster
    from simulate.config import CongestionControl, Enforcement, PacketNetwork, Placement, TieOrder, WindowLimit
    from simulate.orderings import expand_random, ordering_priorities, read_priority_files
    from simulate.planning import Prices, add_costs, cheapest
    from simulate.sweep import default_jobs, parse_workers, plan_sweep, plan_traced_run, traced_run
    from simulate.whatif import scale_compute
    from tfbase.figures import save_figure
    from tfbase.fileio import Outputs, atomic_output, write_json
    from tfbase.units import format_rate, parse_rate, parse_size
    from tfprofile.profile_io import load_profile
    from tfsim.cli.console import console
    from tfsim.plots import throughput_figure
    from tfsim.prediction import (
        buffer_fields,
        drift_fields,
        format_costs,
        format_ordering_summary,
        format_table,
        ordering_fields,
        ordering_summary,
        plan_fields,
        prediction_document,
        prediction_settings,
        ps_cpu_fields,
        reference_sentence,
        settings_sentences,
    )

    with Outputs() as outputs:
        # Every output is checked (and staged) before anything is read or simulated.
        json_out = outputs.file(args.json, "--json") if args.json else None
        csv_out = outputs.file(args.csv, "--csv") if args.csv else None
        plot_out = outputs.file(args.plot, "--plot", binary=True) if args.plot else None
        trace_out = outputs.file(args.trace_out, "--trace-out") if args.trace_out else None
        console.text_to_stderr = outputs.to_stdout
        run_options = sweep_run(args, outputs)

        profile = scale_compute(load_profile(args.profile), worker=args.compute_scale, ps=args.ps_compute_scale)
        prices = Prices.parse(args.price) if args.price else None
        if (args.target is not None or args.deadline is not None) and prices is None:
            raise UsageError("--target" if args.target is not None else "--deadline", "needs --price")
        if args.deadline is not None and args.examples is None:
            raise UsageError("--deadline", "needs --examples (an epoch's size)")
        cluster = with_latency(resolve_cluster(args.cluster, parse_rate(args.bandwidth, "bandwidth")
                                               if args.bandwidth else None), args.latency)
        buffer = parse_size(args.buffer, "buffer") if args.buffer else None
        if buffer is not None:
            cluster = cluster.with_buffer(buffer)
        if args.transfer is None:
            args.transfer = cluster.default_transfer
        transfers = expand_random(_names(args.transfer))
        sharings = _names(args.sharing)
        if not transfers or not sharings:
            raise UsageError("--transfer" if not transfers else "--sharing",
                             "give at least one transfer scheduler and sharing model")
        priorities = read_priority_files(profile, args.priorities)
        priorities.update(ordering_priorities(profile, [t for t in transfers if t not in priorities],
                                              bandwidth_Bps=cluster.downlink_Bps, seed=args.seed))
        flow_cap = parse_rate(args.flow_cap, "flow_cap_Bps") if args.flow_cap else None
        sweep = plan_sweep(
            profile, cluster, workers=args.workers, servers=args.servers, mode=args.mode, sharing=sharings,
            transfer=transfers, priorities=priorities, steps=args.steps, warmup=args.warmup, seed=args.seed,
            flow_cap_Bps=flow_cap, cores=args.cores, colocation=task_hosts(args), ci_target=args.ci_target,
            settle=args.settle,
            stagger=args.stagger, worker_speed=worker_speeds(args.worker_speed, args.seed), replicas=args.replicas,
            enforcement=args.enforcement, tie_order=args.tie_order, placement=args.placement,
            network=PacketNetwork(congestion_control=CongestionControl[args.packet_cc.upper()],
                                  window=WindowLimit(args.packet_window)))
        trace_options = dict(workers=args.trace_workers or max(parse_workers(args.workers)), transfer=transfers[0],
                             priorities=priorities, sharing=sharings[0], mode=args.mode, servers=args.servers,
                             cores=args.cores, colocation=task_hosts(args), steps=args.trace_steps, seed=args.seed,
                             flow_cap_Bps=flow_cap,
                             stagger=args.stagger, enforcement=args.enforcement, tie_order=args.tie_order,
                             placement=args.placement)
        if trace_out is not None:
            plan_traced_run(profile, cluster, **trace_options, workers_parameter="trace_workers",
                            steps_parameter="trace_steps")
        run_options = sweep_journal(run_options, [sweep])
        console.release()  # every input is checked: from here on, warnings and progress as they come

        frame = sweep.run(jobs=args.jobs or default_jobs(), progress=not args.no_progress, **run_options)
        model = profile.meta.get("model") or Path(args.profile).stem
        out = console.out
        caps = "".join(f", each {direction} connection at most {format_rate(cap)}"
                       for direction, cap in cluster.connection_caps_Bps.items())
        longest = int(frame["steps"].max())
        steps_text = f"{args.steps}" if longest == args.steps else f"{args.steps} to {longest:,}"
        print(f"{model}, batch {profile.batch_size}: downlink {format_rate(cluster.downlink_Bps)}, "
              f"uplink {format_rate(cluster.uplink_Bps)}{caps}, {args.mode} SGD ({steps_text} steps per worker, "
              f"first {args.warmup} dropped; * = saturation point)", file=out)
        enforcement, tie_order = Enforcement(args.enforcement), TieOrder(args.tie_order)
        settings = prediction_settings(enforcement, tie_order)
        for sentence in settings_sentences(enforcement, tie_order):
            print(sentence, file=out)
        if args.cores is None and task_hosts(args) is None and cluster.ps_host_cores is not None:
            print(f"each task on a host of its own, as in the calibration run: PS {cluster.ps_host_cores:g}, worker "
                  f"{cluster.worker_host_cores:g} model core(s) (the cluster's hosts; --ps-cores, --worker-cores or "
                  "--cores to change)", file=out)
        if args.servers is not None:
            placement = sweep.options["placement"]
            print(f"variables re-placed over {args.servers} parameter server(s) "
                  f"{'round robin' if placement is Placement.ROUND_ROBIN else 'greedily by bytes'} "
                  f"(--placement {placement.value})", file=out)
        print(format_table(frame), file=out)
        extra = dict(settings)
        if args.servers is not None:
            extra["placement"] = sweep.options["placement"].value
        if frame["policy"].nunique() > 1 and len(sharings) == 1:
            summary = ordering_summary(frame)
            print(file=out)
            print(format_ordering_summary(summary), file=out)
            print(reference_sentence(), file=out)
            extra.update(ordering_fields(summary))
            if "random_spread" in extra:
                print(extra["random_spread"], file=out)
            print(extra["ordering_verdict"], file=out)
        if prices is not None:
            frame = add_costs(frame, prices, servers=max(profile.graph.n_servers, 1), examples=args.examples)
            print(file=out)
            print(format_costs(frame), file=out)
            if args.target is not None or args.deadline is not None:
                best = cheapest(frame, target_eps=args.target, deadline_h=args.deadline)
                extra["plan"] = plan_fields(best)
                print(extra["plan"]["text"], file=out)
        moving = drift_fields(frame)
        if moving is not None:
            extra["drift"] = moving
            hint = ("even after doubling their steps up to the cap" if args.settle
                    else f"--settle, or e.g. --steps {4 * args.steps}")
            print(f"{moving['text']}: {hint}", file=out)
        ps_cpu = ps_cpu_fields(frame, cluster)
        if ps_cpu is not None:
            extra["ps_cpu"] = ps_cpu
            print(ps_cpu["text"], file=out)
        if buffer is not None:
            extra["buffer"] = buffer_fields(cluster, buffer)
            print(extra["buffer"]["text"], file=out)
        if json_out is not None:
            write_json(json_out, prediction_document(frame, profile_path=args.profile, cluster=cluster, extra=extra))
        if csv_out is not None:
            with atomic_output(csv_out) as handle:
                frame.to_csv(handle, index=False, float_format="%.9g")
        if plot_out is not None:
            save_figure(throughput_figure(frame, title=f"{model} (batch {profile.batch_size}) on "
                                                       f"{format_rate(cluster.downlink_Bps)} links"), plot_out)
        if trace_out is not None:
            # A few steps of the largest (or the chosen) configuration, every chunk recorded.
            write_chrome_trace(traced_run(profile, cluster, **trace_options), trace_out)
        outputs.commit()
    return 0
