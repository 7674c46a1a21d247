"""The profile's data types: one SGD step as an operation DAG, and the profiled steps.

These types hold numpy arrays only and import nothing heavy, so that :mod:`simulate`
can depend on them without depending on any trace reader.

Conventions (after Chakra's execution-trace schema): ops are numbered in topological
order (every edge goes from a lower to a higher index); successors are stored in CSR
form, data dependencies apart from control dependencies; units are in field names.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from typing import Any

import numpy as np

# What a profile may hold (docs/formats.md §3): beyond these, a file is refused, so that a
# small file cannot make the simulation allocate or run without bound.
MAX_SERVERS = 256  # parameter-server tasks
MAX_TENSOR_BYTES = 2**40  # one transfer or variable (1 TiB): sums over a step stay far inside int64
MAX_BATCH_SIZE = 2**31 - 1
MAX_DURATION_S = 1e6  # one op's recorded duration; a step's makespan or wall time up to 1e9 s


# A tf2-pss profile's op 0: the coordinator's dispatch of the step to the worker, which no trace
# holds (tfprofile/pssrun.py; docs/model.md §1.5). Its op type is the same name.
DISPATCH_OP = "ClusterCoordinatorDispatch"


class Resource(enum.IntEnum):
    """The one resource each op uses (ICPE §2). The numbering is the tie-break order of docs/model.md §2.4."""

    DOWNLINK = 0  # PS -> worker transfer
    WORKER = 1    # computation at the worker
    UPLINK = 2    # worker -> PS transfer
    PS = 3        # computation at a parameter server

    @property
    def is_link(self) -> bool:
        return self in (Resource.DOWNLINK, Resource.UPLINK)


def _frozen_array(values, dtype) -> np.ndarray:
    array = np.array(values, dtype=dtype)  # a copy: the caller's array stays theirs
    array.setflags(write=False)
    return array


def csr_from_edges(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR (``ptr``, ``idx``) of the edges ``src[k] -> dst[k]`` over ``n`` nodes.

    Successors of node ``i`` are ``idx[ptr[i]:ptr[i+1]]``, sorted ascending; duplicate
    edges are kept once.
    """
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if src.size:
        pairs = np.unique(np.stack([src, dst], axis=1), axis=0)
        src, dst = pairs[:, 0], pairs[:, 1]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(ptr, src + 1, 1)
    return np.cumsum(ptr), dst.astype(np.int64)


@dataclasses.dataclass(frozen=True, eq=False)
class OpGraph:
    """One step's operations and dependencies; identical for every step of a profile.

    Attributes (arrays of length ``n_ops`` unless stated):
        name: op name; for a transfer, its rendezvous key (``edge_N_<tensor>``), which is
            also the key in the RecvTensor record and in the captured gRPC request.
        op_type: TensorFlow op type; ``"Transfer"`` for transfers.
        resource: :class:`Resource` value.
        server: parameter-server task index for DOWNLINK, UPLINK and PS ops; -1 for WORKER.
        size_bytes: bytes moved by a transfer; 0 for computation.
        variable: index into the profile's variable table of the parameter an op reads,
            updates or carries (-1 if none).
        data_ptr, data_idx: CSR successors along data edges.
        ctrl_ptr, ctrl_idx: CSR successors along control (``^x``) edges.
    """

    name: np.ndarray
    op_type: np.ndarray
    resource: np.ndarray
    server: np.ndarray
    size_bytes: np.ndarray
    variable: np.ndarray
    data_ptr: np.ndarray
    data_idx: np.ndarray
    ctrl_ptr: np.ndarray
    ctrl_idx: np.ndarray

    def __post_init__(self) -> None:
        fields = {
            "name": str, "op_type": str, "resource": np.int8, "server": np.int16, "size_bytes": np.int64,
            "variable": np.int32, "data_ptr": np.int64, "data_idx": np.int64, "ctrl_ptr": np.int64,
            "ctrl_idx": np.int64,
        }
        for field, dtype in fields.items():
            object.__setattr__(self, field, _frozen_array(getattr(self, field), dtype))
        n = len(self.name)
        for field in ("op_type", "resource", "server", "size_bytes", "variable"):
            if len(getattr(self, field)) != n:
                raise ValueError(f"OpGraph.{field} has {len(getattr(self, field))} entries for {n} ops")
        if n and not np.isin(self.resource, [r.value for r in Resource]).all():
            raise ValueError("OpGraph.resource holds a value that is not a Resource")
        if (self.size_bytes < 0).any():
            raise ValueError("OpGraph.size_bytes has a negative size")
        if (self.size_bytes > MAX_TENSOR_BYTES).any():
            raise ValueError(f"OpGraph.size_bytes has a transfer larger than {MAX_TENSOR_BYTES} bytes (1 TiB)")
        links = np.isin(self.resource, [Resource.DOWNLINK, Resource.UPLINK])
        if (self.size_bytes[~links] != 0).any():
            raise ValueError("OpGraph: a computation op has a nonzero size_bytes")
        worker = self.resource == Resource.WORKER
        if (self.server[worker] != -1).any() or (self.server[~worker] < 0).any():
            raise ValueError("OpGraph.server must be -1 exactly for WORKER ops")
        if n and self.server.max() >= MAX_SERVERS:
            raise ValueError(f"OpGraph.server holds server {int(self.server.max())}: at most {MAX_SERVERS} parameter "
                             "servers")
        for kind in ("data", "ctrl"):
            ptr, idx = getattr(self, f"{kind}_ptr"), getattr(self, f"{kind}_idx")
            if len(ptr) != n + 1 or ptr[0] != 0 or ptr[-1] != len(idx) or (np.diff(ptr) < 0).any():
                raise ValueError(f"OpGraph.{kind}_ptr is not a CSR pointer array for {n} ops")
            src = np.repeat(np.arange(n), np.diff(ptr))
            if len(idx) and (idx.min() < 0 or idx.max() >= n):
                raise ValueError(f"OpGraph.{kind}_idx refers to an op that does not exist")
            if (idx <= src).any():
                raise ValueError(f"OpGraph: a {kind} edge does not go forward; ops must be in topological order")

    @property
    def n_ops(self) -> int:
        return len(self.name)

    @functools.cached_property
    def succ_ptr(self) -> np.ndarray:
        """CSR pointers of all successors (data and control, each successor once)."""
        return self._all_succ[0]

    @functools.cached_property
    def succ_idx(self) -> np.ndarray:
        return self._all_succ[1]

    @functools.cached_property
    def _all_succ(self) -> tuple[np.ndarray, np.ndarray]:
        n = self.n_ops
        src = np.concatenate([np.repeat(np.arange(n), np.diff(self.data_ptr)),
                              np.repeat(np.arange(n), np.diff(self.ctrl_ptr))])
        dst = np.concatenate([self.data_idx, self.ctrl_idx])
        return csr_from_edges(n, src, dst)

    @functools.cached_property
    def pred_ptr(self) -> np.ndarray:
        """CSR pointers of all predecessors (each once)."""
        return self._all_pred[0]

    @functools.cached_property
    def pred_idx(self) -> np.ndarray:
        return self._all_pred[1]

    @functools.cached_property
    def _all_pred(self) -> tuple[np.ndarray, np.ndarray]:
        n = self.n_ops
        src = np.repeat(np.arange(n), np.diff(self.succ_ptr))
        return csr_from_edges(n, self.succ_idx, src)

    def successors(self, op: int) -> np.ndarray:
        return self.succ_idx[self.succ_ptr[op]:self.succ_ptr[op + 1]]

    def predecessors(self, op: int) -> np.ndarray:
        return self.pred_idx[self.pred_ptr[op]:self.pred_ptr[op + 1]]

    @functools.cached_property
    def in_degree(self) -> np.ndarray:
        return np.diff(self.pred_ptr)

    @functools.cached_property
    def roots(self) -> np.ndarray:
        """Ops with no predecessor, in index order: what a step starts with."""
        return np.flatnonzero(self.in_degree == 0)

    @functools.cached_property
    def index(self) -> dict[str, int]:
        """Op name -> op index."""
        return {str(name): i for i, name in enumerate(self.name)}

    @property
    def n_servers(self) -> int:
        return int(self.server.max()) + 1 if self.n_ops and self.server.max() >= 0 else 0


@dataclasses.dataclass(frozen=True, eq=False)
class VariableTable:
    """The job's variables (from the run's ``variables.json``), one entry each."""

    name: np.ndarray
    size_bytes: np.ndarray
    server: np.ndarray
    trainable: np.ndarray

    def __post_init__(self) -> None:
        for field, dtype in (("name", str), ("size_bytes", np.int64), ("server", np.int16), ("trainable", bool)):
            object.__setattr__(self, field, _frozen_array(getattr(self, field), dtype))
        n = len(self.name)
        if any(len(getattr(self, f)) != n for f in ("size_bytes", "server", "trainable")):
            raise ValueError("VariableTable columns differ in length")
        if n and not ((self.size_bytes >= 0) & (self.size_bytes <= MAX_TENSOR_BYTES)).all():
            raise ValueError(f"VariableTable.size_bytes must be between 0 and {MAX_TENSOR_BYTES} bytes (1 TiB)")
        if n and not ((self.server >= 0) & (self.server < MAX_SERVERS)).all():
            raise ValueError(f"VariableTable.server must be a parameter server from 0 to {MAX_SERVERS - 1}")

    @classmethod
    def empty(cls) -> VariableTable:
        return cls(np.array([], dtype=str), np.array([], np.int64), np.array([], np.int16), np.array([], bool))

    def __len__(self) -> int:
        return len(self.name)

    @property
    def trainable_bytes(self) -> int:
        return int(self.size_bytes[self.trainable].sum())


@dataclasses.dataclass(frozen=True, eq=False)
class Profile:
    """S profiled steps of a 1-worker run over one :class:`OpGraph`.

    Attributes:
        graph: the step DAG.
        duration_s: (S, n_ops) recorded duration of every op in every step; for a transfer,
            its RecvTensor record (request or sender-ready to data available, parsing
            included). 0 for ops the trace does not list.
        start_s: (S, n_ops) recorded start relative to the step's start; NaN where unknown.
        step_makespan_s: (S,) span of each traced step, first record start to last end.
        step_wall_s: measured wall time of every measured step of the run (traced or not),
            as the chief worker's client saw it; may be empty.
        batch_size: examples per step and worker.
        variables: the variable table.
        meta: free-form provenance (model, source files, versions), JSON-serialisable.
    """

    graph: OpGraph
    duration_s: np.ndarray
    start_s: np.ndarray
    step_makespan_s: np.ndarray
    step_wall_s: np.ndarray
    batch_size: int
    variables: VariableTable
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        for field in ("duration_s", "start_s", "step_makespan_s", "step_wall_s"):
            object.__setattr__(self, field, _frozen_array(getattr(self, field), np.float64))
        n = self.graph.n_ops
        if self.duration_s.ndim != 2 or self.duration_s.shape[1] != n or self.duration_s.shape[0] < 1:
            raise ValueError(f"Profile.duration_s must have shape (steps >= 1, {n}), not {self.duration_s.shape}")
        if self.start_s.shape != self.duration_s.shape:
            raise ValueError("Profile.start_s and duration_s differ in shape")
        if self.step_makespan_s.shape != (self.duration_s.shape[0],):
            raise ValueError("Profile.step_makespan_s needs one entry per step")
        if not np.isfinite(self.duration_s).all() or (self.duration_s < 0).any():
            raise ValueError("Profile.duration_s must be finite and non-negative")
        if (self.duration_s > MAX_DURATION_S).any():
            raise ValueError(f"Profile.duration_s has an op longer than {MAX_DURATION_S:g} s")
        for field in ("step_makespan_s", "step_wall_s"):
            values = getattr(self, field)
            if not (np.isfinite(values) & (values >= 0) & (values <= 1e3 * MAX_DURATION_S)).all():
                raise ValueError(f"Profile.{field} must be finite, non-negative and at most "
                                 f"{1e3 * MAX_DURATION_S:g} s")
        if np.isinf(self.start_s).any():
            raise ValueError("Profile.start_s must be finite (or NaN: unknown)")
        if isinstance(self.batch_size, bool) or not 1 <= self.batch_size <= MAX_BATCH_SIZE:
            raise ValueError(f"Profile.batch_size must be between 1 and {MAX_BATCH_SIZE}, not {self.batch_size}")

    @property
    def n_steps(self) -> int:
        return self.duration_s.shape[0]

    def bytes_per_step(self, resource: Resource) -> int:
        return int(self.graph.size_bytes[self.graph.resource == resource].sum())
