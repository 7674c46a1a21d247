"""The integer codes that the preparation, the engine's layout and the compiled kernel share.

The kernel takes plain integer arrays, so every enumeration it branches on is an integer
code; each is named here once. The module imports nothing of numba: the preparation and
the engine use the codes without compiling anything, and the kernel reads them as
compile-time constants (numba folds an ``IntEnum`` member into the code). numba's on-disk
cache of the kernel does not notice a change to this file: after renumbering a code, touch
``simulate/kernel.py`` so that the kernel is compiled again.
"""

from __future__ import annotations

import enum


class Action(enum.IntEnum):
    """What one action of an event asks of a worker's slot (the kernel's phase 2)."""

    OP_READY = 0        # op x's predecessors are done: queue it, or start it if its slot is idle
    SLOT_FREE = 1       # slot x has no chunk: take the next queued op, or leave its link or host
    STREAM_RESUMES = 2  # grpc stream x got its window back: queue it again


class ParseLane(enum.IntEnum):
    """Where a parse op runs (:class:`simulate.cluster.OverheadPlacement`); ``IN_LINE`` for every other op."""

    IN_LINE = 0  # on the receiver's compute resource, in line with its other ops
    LANE = 1     # on the receiving task's parse lane, a slot of its own beside the compute slot
    DELAY = 2    # a pure delay: a slot of its own per op, shared with nothing


class Scheduler(enum.IntEnum):
    """How one worker's ready ops on one link slot are served (:class:`simulate.config.Transfer`)."""

    FIFO = 0      # whole streams in ready order (also every compute slot)
    HTTP2 = 1     # ICPE's HTTP/2 model: a stream above one window is cut once and requeued
    PRIORITY = 2  # whole streams, lowest priority number first
    GRPC = 3      # whole streams in ready order, pausing where a flow-control window runs out


class Share(enum.IntEnum):
    """How the workers busy on one link share its bandwidth (docs/model.md §4; :class:`simulate.config.Sharing`)."""

    PS = 0        # processor sharing: 1/n each
    FCFS = 1      # the first busy worker gets it all
    FLOW_CAP = 2  # processor sharing, no flow above a cap
    NONE = 3      # every worker gets the whole link (all-reduce: the ring needs no server)


class Direction(enum.IntEnum):
    """A link's direction: the row of the per-direction flow-control arrays."""

    DOWNLINK = 0  # server to worker
    UPLINK = 1    # worker to server
