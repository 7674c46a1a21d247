"""What the compiled kernel (:mod:`simulate.kernel`) reads and writes: two NamedTuples of numpy
arrays, laid out by :func:`simulate.engine.kernel_inputs` and
:func:`simulate.engine.kernel_outputs`. Apart from both, so that neither imports the other.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class KernelInputs(NamedTuple):
    """What the kernel reads: the graph, the cluster and the settings of one run, laid out.

    ``n_ops`` ops, ``S`` profiled steps, ``W`` workers of ``N`` steps, ``n_slots`` slots per
    worker (see the module docstring), ``2M`` links, ``H`` hosts; -1 stands for none.
    """

    succ_ptr: np.ndarray           # (n_ops + 1,) CSR successors of each op, in the order they are examined
    succ_idx: np.ndarray           # (docs/model.md §2.4: ascending, or tie-ordered per slot)
    roots: np.ndarray              # the ops without predecessors, in the order a step queues them (the same rule)
    in_degree: np.ndarray          # (n_ops,) predecessors of each op
    op_slot: np.ndarray            # (n_ops,) each op's slot in a worker's layout
    op_fifo_link: np.ndarray       # (n_ops,) a message's link, whose queue it waits behind; -1 for others
    work: np.ndarray               # (S, n_ops) bytes for a transfer, seconds for a computation
    priority: np.ndarray           # (n_ops,) Scheduler.PRIORITY serves the lowest first
    strict: bool                   # Scheduler.PRIORITY holds a transfer back until its turn (Enforcement.STRICT)
    need: np.ndarray               # (n_ops,) strict: transfers of the op's slot that must have started first
    samples: np.ndarray            # (W, N) the profiled step that worker w replays as its k-th
    n_slots: int
    slot_link: np.ndarray          # (n_slots,) each slot's link, -1 for a computation slot
    slot_scheduler: np.ndarray     # (n_slots,) a Scheduler code
    slot_queue_cap: np.ndarray     # (n_slots,) ops one worker can have queued on the slot
    slot_host: np.ndarray          # (W * n_slots,) the host of each computation slot, or -1
    slot_work_scale: np.ndarray    # (W * n_slots,) a computation's work there is multiplied by this (stragglers)
    link_capacity_Bps: np.ndarray  # (2M,) links m (server m's downlink) and M + m (its uplink): peak rates
    link_sustained_Bps: np.ndarray  # (2M,) the rate once a link's tokens run out (= peak without a bucket)
    link_bucket_bytes: np.ndarray  # (2M,) token bucket size; 0: no bucket, the peak is sustained
    link_queue_window_bytes: np.ndarray  # (2M,) bytes a busy connection keeps in the link's FIFO; 0: no FIFO wait
    link_buffer_bytes: np.ndarray  # (2M,) the most bytes the link's FIFO holds (inf: unbounded)
    link_connection_cap_Bps: np.ndarray  # (2M,) the most one worker's connection moves on the link (inf: no cap)
    link_reverse: np.ndarray       # (2M,) the other direction of the same server's link
    link_direction: np.ndarray     # (2M,) a Direction code
    n_servers: int
    share: int                     # a Share code
    flow_cap_Bps: float            # Share.FLOW_CAP: no flow above it
    win_bytes: float               # Scheduler.HTTP2: ICPE's window WIN (else inf)
    sync: bool                     # a barrier after every step (sync and all-reduce modes)
    host_cores: np.ndarray         # (H,)
    flow_window_t_s: np.ndarray    # (2, K) per Direction, the receiver's window timeline (grpc)
    flow_window_bytes: np.ndarray  # (2, K) ascending times, non-decreasing windows
    flow_window_n: np.ndarray      # (2,) entries of each timeline
    flow_update_delay_s: np.ndarray  # (2,) from a chunk's end to the WINDOW_UPDATE returning it
    start_at_s: np.ndarray         # (W,) when each worker starts its first step
    trace_steps: int               # trace the chunks of each worker's first steps


class KernelOutputs(NamedTuple):
    """Where the kernel writes: step times, and the trace rows (up to its capacity ``C``)."""

    step_start_s: np.ndarray            # (W, N)
    step_end_s: np.ndarray              # (W, N)
    trace_worker_step_slot: np.ndarray  # (C, 3)
    trace_op: np.ndarray                # (C,)
    trace_span_s: np.ndarray            # (C, 2) the chunk's start and end
