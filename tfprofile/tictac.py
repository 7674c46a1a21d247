"""TicTac's transfer priorities (TIC, TAC) and scheduling-efficiency metrics over an :class:`OpGraph`.

After Hashemi, Jyothi and Campbell, "TicTac: Accelerating Distributed Deep Learning with
Communication Scheduling", SysML 2019 (§3-5, Algorithms 1-3, Eqs. 1-6), with the details of
docs/model.md §8 and of TicTac's public implementation.

Terms used throughout:

* **recv ops** (TicTac's *R*): the parameter transfers, DOWNLINK transfers that carry bytes
  (``graph.resource == Resource.DOWNLINK`` and ``size_bytes > 0``), i.e. the parameter reads a
  PS sends to the worker. ``recv`` arrays hold their op indices in ascending order; "recv
  position ``j``" means ``recv[j]``.
* **control transfers**: DOWNLINK transfers of 0 bytes, the tokens of control edges that cross
  from a PS to the worker. They are not parameters and are not ranked: each inherits the
  priority of the parameter read it travels with (:func:`inherit_priorities`,
  docs/model.md §8.5).
* **time oracle** (TicTac §3.1, §5): one time per op, in seconds for TAC (:func:`time_oracle`),
  in "transfers" for TIC (Eq. 5, :func:`tic_time`).
* **ordering**: an :class:`Ordering` holds one priority number per recv (lower goes first), as
  TicTac's enforcement module reads them: ranks ``0..n_s-1`` per parameter server.

Several parameter servers. TicTac enforces priorities per channel: each PS counts the transfers
it has handed to gRPC for a worker and holds a transfer back until the counter reaches its
priority number (§5.1). So a priority number is meaningful only among the recvs of one server.
Here, as in TicTac's implementation (``partition_devices``), TIC and TAC are computed once over
the whole step DAG with the recvs of every server outstanding together (the channels run in
parallel, so every server's transfers are pending at the start of a step), giving one global key
per recv (TIC: ``M+``; TAC: the removal index). The key is then projected onto each server:
a recv's priority is the number of recvs *of the same server* whose key is strictly smaller
(:func:`rank_per_server`). Equal keys share the lower rank; TAC keys are distinct, so each
server's TAC priorities are exactly ``0..n_s-1``. With one server the projection is the identity
on ranks.

Every function is deterministic; the random ordering depends only on its seed.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
import re

import numpy as np

from tfbase.errors import InputError, UsageError
from tfbase.fileio import read_input, write_text
from tfprofile.dag import OpGraph, Profile, Resource

__all__ = [
    "POLICIES", "CommDependencies", "Efficiency", "Ordering", "Policy", "ProfileEfficiency", "Properties",
    "comm_dependencies", "compute_ordering", "control_transfers", "efficiency", "format_priorities",
    "inherit_priorities", "makespan_bounds", "parse_policy", "parse_priorities", "precedes", "priority_per_op",
    "profile_efficiency", "random_order", "rank_per_server", "read_priorities", "recorded_order", "recv_ops",
    "resource_classes", "reverse_tic", "scheduling_efficiency", "speedup", "tac", "tic", "tic_time",
    "time_oracle", "update_properties", "write_priorities",
]


class Policy(enum.Enum):
    """How an ordering ranks the parameter transfers (docs/model.md §8)."""

    TIC = "tic"                  # TicTac Alg. 2: the DAG alone
    TAC = "tac"                  # TicTac Alg. 3: the DAG and a time oracle
    REVERSE_TIC = "reverse_tic"  # TIC reversed: a deliberately bad order
    RANDOM = "random"            # a seeded permutation
    RECORDED = "recorded"        # the order the profiled run started its transfers in


POLICIES = tuple(policy.value for policy in Policy)

_WORD_BITS = 64


# ---------------------------------------------------------------------------- recvs and dependencies

def _is_recv(graph: OpGraph) -> np.ndarray:
    return (graph.resource == Resource.DOWNLINK) & (graph.size_bytes > 0)


def recv_ops(graph: OpGraph) -> np.ndarray:
    """Op indices of the recv ops (TicTac's R): the parameter transfers, DOWNLINK transfers of
    nonzero size, ascending."""
    return np.flatnonzero(_is_recv(graph))


def control_transfers(graph: OpGraph) -> np.ndarray:
    """Op indices of the control transfers: DOWNLINK transfers of 0 bytes (a control edge's
    token from a PS to the worker), ascending. They are not ranked (:func:`inherit_priorities`)."""
    return np.flatnonzero((graph.resource == Resource.DOWNLINK) & (graph.size_bytes == 0))


@dataclasses.dataclass(frozen=True, eq=False)
class CommDependencies:
    """Communication dependencies ``op.dep`` of every op (TicTac §4.1) as bitsets.

    Attributes:
        recv: (n_recv,) op indices of the recv ops, ascending; bit ``j`` stands for ``recv[j]``.
        bits: (n_ops, ceil(n_recv / 64)) uint64; bit ``j % 64`` of word ``j // 64`` of row ``i``
            is set iff ``recv[j]`` is in ``op_i.dep``.
    """

    recv: np.ndarray
    bits: np.ndarray

    @property
    def n_recv(self) -> int:
        return len(self.recv)

    def matrix(self, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        """``dep`` as a boolean matrix (rows of ``bits`` selected by ``rows``, n_recv columns)."""
        return _bits_to_matrix(self.bits[rows], self.n_recv)

    def members(self, op: int) -> np.ndarray:
        """Recv positions ``j`` with ``recv[j]`` in ``op.dep``, ascending."""
        return np.flatnonzero(self.matrix(np.array([op]))[0])


def _bits_to_matrix(bits: np.ndarray, n_columns: int) -> np.ndarray:
    words = np.ascontiguousarray(bits, dtype="<u8")  # little-endian words: byte k holds bits 8k..8k+7
    as_bytes = words.view(np.uint8).reshape(words.shape[0], 8 * words.shape[1])
    return np.unpackbits(as_bytes, axis=1, count=n_columns, bitorder="little").astype(bool)


def _levels(graph: OpGraph) -> np.ndarray:
    """Longest-path depth of every op (0 for roots): all predecessors of a level-k op lie below k."""
    ptr, idx = graph.pred_ptr.tolist(), graph.pred_idx.tolist()
    level = [0] * graph.n_ops
    for op in range(graph.n_ops):  # ops are in topological order, so predecessors are done
        start, end = ptr[op], ptr[op + 1]
        if start < end:
            level[op] = 1 + max(level[p] for p in idx[start:end])
    return np.array(level, dtype=np.int64)


def comm_dependencies(graph: OpGraph) -> CommDependencies:
    """``op.dep`` for every op: the recvs it depends on, directly or transitively (TicTac §4.1).

    A recv depends on itself and on every recv upstream of it (TicTac's implementation stops at
    recvs because its recvs are roots; here a recv downstream of another one truly needs both).
    Computed as bitsets: each op's row is the OR of its predecessors' rows, one level of the DAG
    at a time, so the work is a few numpy calls per level rather than a graph traversal in Python.
    """
    recv = recv_ops(graph)
    n_recv = len(recv)
    n_words = -(-n_recv // _WORD_BITS)
    bits = np.zeros((graph.n_ops, n_words), dtype=np.uint64)
    position = np.arange(n_recv)
    bits[recv, position // _WORD_BITS] = np.left_shift(np.uint64(1), (position % _WORD_BITS).astype(np.uint64))
    if n_words == 0:
        return CommDependencies(recv=recv, bits=bits)
    level = _levels(graph)
    by_level = np.argsort(level, kind="stable")
    bounds = np.searchsorted(level[by_level], np.arange(level.max() + 2))
    ptr, idx = graph.pred_ptr, graph.pred_idx
    for depth in range(1, level.max() + 1):
        ops = by_level[bounds[depth]:bounds[depth + 1]]
        starts, counts = ptr[ops], ptr[ops + 1] - ptr[ops]
        offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
        flat = idx[np.repeat(starts - offsets, counts) + np.arange(counts.sum())]
        bits[ops] |= np.bitwise_or.reduceat(bits[flat], offsets, axis=0)
    return CommDependencies(recv=recv, bits=bits)


# ---------------------------------------------------------------------------- time oracles

def tic_time(graph: OpGraph) -> np.ndarray:
    """TicTac's general time oracle (Eq. 5, Alg. 2): 1 for a recv op, 0 for every other op
    (control transfers included: they carry no parameter)."""
    return _is_recv(graph).astype(np.float64)


def time_oracle(profile: Profile, bandwidth_Bps: float | None = None) -> np.ndarray:
    """TAC's time oracle (TicTac §5): seconds per op, shape (n_ops,).

    Every op gets the minimum of its recorded durations over the profiled steps
    (``profile.duration_s.min(axis=0)``), as TicTac's oracle takes the minimum of repeated runs.
    With ``bandwidth_Bps``, every transfer (DOWNLINK and UPLINK alike, since the bandwidth
    describes the link in each direction) instead takes ``size_bytes / bandwidth_Bps``: the
    time on a dedicated link (§3.1), free of the queueing a recorded RecvTensor span includes.
    """
    time_s = profile.duration_s.min(axis=0).astype(np.float64)
    if bandwidth_Bps is not None:
        bandwidth_Bps = _check_bandwidth(bandwidth_Bps)
        links = np.isin(profile.graph.resource, [Resource.DOWNLINK, Resource.UPLINK])
        time_s[links] = profile.graph.size_bytes[links] / bandwidth_Bps
    return time_s


def _check_bandwidth(bandwidth_Bps: float) -> float:
    value = float(bandwidth_Bps)
    if not (math.isfinite(value) and value > 0):
        raise UsageError("bandwidth_Bps", f"must be a positive number of bytes/s, not {bandwidth_Bps!r}")
    return value


def _check_time(graph: OpGraph, time: np.ndarray) -> np.ndarray:
    time = np.asarray(time, dtype=np.float64)
    if time.shape != (graph.n_ops,):
        raise UsageError("time", f"needs one time per op ({graph.n_ops}), not shape {time.shape}")
    if not np.isfinite(time).all() or (time < 0).any():
        raise UsageError("time", "op times must be finite and non-negative")
    return time


# ---------------------------------------------------------------------------- Alg. 1: properties

@dataclasses.dataclass(frozen=True, eq=False)
class Properties:
    """TicTac's op properties for one outstanding set R (Alg. 1), in the time oracle's unit.

    Attributes:
        m: (n_ops,) communication time M. For a recv, ``Time(recv)`` (its own transfer, whether
            or not it is still outstanding); for any other op, ``Σ Time(r)`` over
            ``r ∈ op.dep ∩ R``.
        p: (n_recv,) directly-dependent compute load P: ``Σ Time(op)`` over the non-recv ops
            (worker and PS computation and uplinks alike: all work the recv alone unblocks)
            whose ``dep ∩ R`` is exactly ``{r}``; 0 for recvs not in R.
        m_plus: (n_recv,) impending communication load M+: ``min op.M`` over the non-recv ops
            with ``|dep ∩ R| > 1`` and ``r`` in ``dep``; +inf if there is none or r is not in R.
    """

    m: np.ndarray
    p: np.ndarray
    m_plus: np.ndarray


def _properties_core(dep: np.ndarray, weight: np.ndarray, recv_time: np.ndarray,
                     outstanding: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Alg. 1 lines 2-17 over rows ``dep`` (bool, rows x n_recv) of non-recv ops of time ``weight``.

    Rows may stand for several ops with the same ``dep`` (``weight`` then sums their times).
    Returns the rows' M, and P and M+ per recv position.
    """
    n_recv = len(recv_time)
    live = np.flatnonzero(outstanding)
    d = dep[:, live]
    count = d.sum(axis=1)
    # A masked row sum, not a matrix product: equal sets must give bit-equal M, or M+ ties break by rounding.
    m = np.where(d, recv_time[live], 0.0).sum(axis=1)
    single = count == 1
    only = live[np.argmax(d[single], axis=1)] if single.any() else np.zeros(0, dtype=np.int64)
    p = np.bincount(only, weights=weight[single], minlength=n_recv).astype(np.float64)
    m_plus = np.full(n_recv, np.inf)
    multi = count > 1
    if multi.any():
        m_plus[live] = np.where(d[multi], m[multi, None], np.inf).min(axis=0)
    return m, p, m_plus


def update_properties(graph: OpGraph, deps: CommDependencies, time: np.ndarray,
                      outstanding: np.ndarray | None = None) -> Properties:
    """TicTac's UpdateProperties (Alg. 1) for the recvs still outstanding.

    ``time`` is the time oracle (one value per op); ``outstanding`` is a boolean mask over recv
    positions (default: every recv outstanding). The loop of Alg. 1 line 9 runs over the ops
    that are not recvs, as TicTac's implementation does: a completed recv's own time is transfer
    time, which no recv's completion unblocks as computation.
    """
    time = _check_time(graph, time)
    outstanding = np.ones(deps.n_recv, bool) if outstanding is None else np.asarray(outstanding, bool)
    if outstanding.shape != (deps.n_recv,):
        raise UsageError("outstanding", f"needs one flag per recv ({deps.n_recv}), not shape {outstanding.shape}")
    comp = np.flatnonzero(~_is_recv(graph))
    rows_m, p, m_plus = _properties_core(deps.matrix(comp), time[comp], time[deps.recv], outstanding)
    m = time.copy()  # a recv's own M is Time(recv)
    m[comp] = rows_m
    return Properties(m=m, p=p, m_plus=m_plus)


# ---------------------------------------------------------------------------- orderings

def _empty(dtype) -> np.ndarray:
    return np.zeros(0, dtype=dtype)


@dataclasses.dataclass(frozen=True, eq=False)
class Ordering:
    """Priority numbers for the recv ops of one graph (lower number: transferred first).

    Attributes:
        policy: a :class:`Policy` value ("tic", "tac", "reverse_tic", "random", "recorded"),
            or "file" (read from a priority file).
        recv: (k,) op indices of the ordered recvs (parameter transfers), ascending.
        name: (k,) their op names (the rendezvous keys TicTac's file uses).
        server: (k,) their parameter-server index.
        key: (k,) the policy's global sort key over all servers (TIC: M+, possibly +inf;
            TAC: removal index; recorded: median start, +inf if never recorded; lower first,
            equal keys unordered).
        priority: (k,) int64 priority numbers, ranks of ``key`` within each server.
        control: (c,) op indices of the control transfers (0 bytes), ascending; not ranked.
        control_name: (c,) their op names.
        control_priority: (c,) the priority each inherits, as a float: +inf for none (it then
            goes after every transfer that has one, as an op a priority file does not list).
        control_source: (c,) the recv each inherits from, -1 for none or one read from a file.
    """

    policy: str
    recv: np.ndarray
    name: np.ndarray
    server: np.ndarray
    key: np.ndarray
    priority: np.ndarray
    control: np.ndarray = dataclasses.field(default_factory=lambda: _empty(np.int64))
    control_name: np.ndarray = dataclasses.field(default_factory=lambda: _empty(str))
    control_priority: np.ndarray = dataclasses.field(default_factory=lambda: _empty(np.float64))
    control_source: np.ndarray = dataclasses.field(default_factory=lambda: _empty(np.int64))

    def __len__(self) -> int:
        return len(self.recv)

    def as_mapping(self) -> dict[str, int]:
        """Op name -> priority number (the shape :func:`simulate.prepare.prepare` takes): every
        recv, then every control transfer that has a priority."""
        out = {str(n): int(p) for n, p in zip(self.name, self.priority)}
        out.update(self.control_mapping())
        return out

    def control_mapping(self) -> dict[str, int]:
        """Control transfer name -> its inherited priority, for those that have one."""
        return {str(n): int(p) for n, p in zip(self.control_name, self.control_priority) if math.isfinite(p)}

    def order(self) -> np.ndarray:
        """Op indices in transfer order: by priority, then server, then op index."""
        return self.recv[np.lexsort((self.recv, self.server, self.priority))]


def rank_per_server(key: np.ndarray, server: np.ndarray) -> np.ndarray:
    """Priority numbers from a global key: per server, the count of that server's strictly smaller keys.

    This is TicTac's normalisation of a priority list per device: ranks ``0..n_s-1`` on each
    server, equal keys sharing the lower rank (so ``[5, 5, 7] -> [0, 0, 2]``).
    """
    key = np.asarray(key, dtype=np.float64)
    server = np.asarray(server)
    priority = np.empty(len(key), dtype=np.int64)
    for s in np.unique(server):
        members = np.flatnonzero(server == s)
        priority[members] = np.searchsorted(np.sort(key[members]), key[members], side="left")
    return priority


def _server_ancestors_levels(graph: OpGraph, op: int):
    """The ancestors of ``op`` on its own server (PS ops and transfers of ``graph.server[op]``),
    one breadth-first level at a time, nearest first."""
    server = graph.server[op]
    seen, frontier = set(), [op]
    while frontier:
        level = []
        for node in frontier:
            for pred in graph.predecessors(node).tolist():
                if pred not in seen and graph.server[pred] == server:
                    seen.add(pred)
                    level.append(pred)
        if level:
            yield level
        frontier = level


def inherit_priorities(graph: OpGraph, recv: np.ndarray, priority: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The priority each control transfer inherits, and the recv it inherits from.

    A control transfer (0 bytes) carries a control edge from a PS op to the worker; in
    TensorFlow's graphs it is cut from the same variable read as a parameter transfer (the PS
    op ``conv0/Conv2D/ReadVariableOp`` sends the tensor to the worker and a token for the
    gradient's shape). So it inherits that read's priority: walking up its own server's ops
    from the transfer, nearest level first, the first level whose ops send parameter transfers
    of the same server decides; among those, the lowest priority (lowest op index on a tie).
    Equal priorities are not ordered against each other, so the token neither waits for its
    read nor holds it up. A control transfer with no such read gets none (+inf, source -1).

    Parameters
    ----------
    graph : OpGraph
        The profile's DAG.
    recv, priority : numpy.ndarray
        The ranked recvs (op indices) and their priority numbers.

    Returns
    -------
    tuple of numpy.ndarray
        Per control transfer (:func:`control_transfers` order): the priority (float, +inf for
        none) and the recv's op index (-1 for none).

    Examples
    --------
    >>> import tfprofile
    >>> from tfprofile import tictac
    >>> graph = tfprofile.load_profile("data/profiles/tiny.npz").graph
    >>> order = tictac.tic(graph)
    >>> inherited, source = tictac.inherit_priorities(graph, order.recv, order.priority)
    >>> [str(graph.name[op]) for op in tictac.control_transfers(graph)], inherited.tolist()
    (['edge_15_conv0/Conv2D/ReadVariableOp', 'edge_22_conv1/Conv2D/ReadVariableOp'], [0.0, 2.0])
    >>> [str(graph.name[op]) for op in source]
    ['edge_18_conv0/Conv2D/ReadVariableOp', 'edge_24_conv1/Conv2D/ReadVariableOp']
    """
    control = control_transfers(graph)
    rank = dict(zip(np.asarray(recv).tolist(), np.asarray(priority).tolist()))
    inherited = np.full(len(control), np.inf)
    source = np.full(len(control), -1, dtype=np.int64)
    for k, op in enumerate(control.tolist()):
        for level in _server_ancestors_levels(graph, op):
            reads = sorted({s for node in level for s in graph.successors(node).tolist() if s in rank})
            if reads:
                best = min(reads, key=lambda r: (rank[r], r))
                inherited[k], source[k] = rank[best], best
                break
    return inherited, source


def _ordering(graph: OpGraph, policy: Policy, recv: np.ndarray, key: np.ndarray) -> Ordering:
    priority = rank_per_server(key, graph.server[recv])
    control = control_transfers(graph)
    inherited, source = inherit_priorities(graph, recv, priority)
    return Ordering(policy=policy.value, recv=recv, name=graph.name[recv], server=graph.server[recv],
                    key=np.asarray(key, dtype=np.float64), priority=priority, control=control,
                    control_name=graph.name[control], control_priority=inherited, control_source=source)


NO_RECVS = "has no parameter transfers (recv ops of nonzero size): there is nothing to order"


def _require_recvs(recv: np.ndarray) -> None:
    if len(recv) == 0:
        raise InputError(None, f"the profile {NO_RECVS}")


def tic(graph: OpGraph, deps: CommDependencies | None = None) -> Ordering:
    """Timing-Independent Communication scheduling (TicTac Alg. 2; docs/model.md §8.3).

    Properties (Alg. 1) are computed once with every recv outstanding and the general oracle of
    Eq. 5 (recv 1, everything else 0), so a recv's M+ is the fewest recvs any multi-recv op
    needs together with it. Priority = M+ (Alg. 2 line 4), as ranks: recvs with equal M+ share
    the lower rank, a recv no multi-recv op needs (M+ = +inf) comes last. Depends on the DAG only.

    Parameters
    ----------
    graph : OpGraph
        The profile's DAG.
    deps : CommDependencies, optional
        :func:`comm_dependencies` of ``graph``, when already computed.

    Returns
    -------
    Ordering
        The recvs (DOWNLINK transfers) and their priority numbers, per parameter server.

    Examples
    --------
    >>> import tfprofile
    >>> from tfprofile import tictac
    >>> profile = tfprofile.load_profile("data/profiles/tiny.npz")
    >>> order = tictac.tic(profile.graph)
    >>> len(order), order.priority[:6].tolist()
    (8, [0, 0, 2, 2, 4, 4])
    """
    deps = comm_dependencies(graph) if deps is None else deps
    _require_recvs(deps.recv)
    props = update_properties(graph, deps, tic_time(graph))
    return _ordering(graph, Policy.TIC, deps.recv, props.m_plus)


def reverse_tic(graph: OpGraph, deps: CommDependencies | None = None) -> Ordering:
    """TIC's order reversed (key ``-M+``): the recvs TIC sends last go first; ties stay ties."""
    forward = tic(graph, deps)
    return _ordering(graph, Policy.REVERSE_TIC, forward.recv, -forward.key)


def random_order(graph: OpGraph, seed: int = 0) -> Ordering:
    """A random permutation of the recvs, reproducible from ``seed`` (numpy's default generator)."""
    recv = recv_ops(graph)
    _require_recvs(recv)
    key = np.random.default_rng(seed).permutation(len(recv))
    return _ordering(graph, Policy.RANDOM, recv, key)


def recorded_order(profile: Profile) -> Ordering:
    """The order the profiled run started its parameter transfers in (docs/model.md §8.5).

    Key: a recv's median recorded start (``profile.start_s``, relative to its step's start)
    over the profiled steps that recorded it; a recv no step recorded gets +inf and goes last.
    Ranked per server like every key (:func:`rank_per_server`): equal medians share a number,
    and the priority scheduler then takes them in the order they became ready. On every
    bundled capture this is exactly the order of the worker's RecvTensor streams (their HTTP/2
    stream ids), step by step. Raises :class:`InputError` when no step recorded any start
    (e.g. a hand-made profile): there is no recorded order.

    Examples
    --------
    >>> import tfprofile
    >>> from tfprofile import tictac
    >>> order = tictac.recorded_order(tfprofile.load_profile("data/profiles/tiny.npz"))
    >>> order.priority.tolist()
    [2, 3, 1, 0, 7, 4, 6, 5]
    """
    recv = recv_ops(profile.graph)
    _require_recvs(recv)
    starts = profile.start_s[:, recv]
    seen = np.isfinite(starts).any(axis=0)
    if not seen.any():
        raise InputError(None, "the profile records no start time for any parameter transfer: it has no "
                               "recorded order")
    key = np.full(len(recv), np.inf)
    key[seen] = np.nanmedian(starts[:, seen], axis=0)
    return _ordering(profile.graph, Policy.RECORDED, recv, key)


def precedes(m_a: float, p_a: float, m_plus_a: float, m_b: float, p_b: float, m_plus_b: float) -> bool:
    """TAC's comparator (Alg. 3 lines 1-9, Eq. 6): should recv A be transferred before recv B?

    ``A ≺ B  ⇔  min(P_B, M_A) < min(P_A, M_B)``, and when the two are equal, ``M+_A < M+_B``.

    This is Case 1 of §4.3 (Eq. 6), derived from ``Makespan(A→B) < Makespan(B→A)``
    with ``Makespan(A→B) = M_A + max(P_A, M_B) + P_B``, and it is what TicTac's public
    implementation computes. Alg. 3 as printed swaps the two sides (``min(P_A, M_B) <
    min(P_B, M_A)``), which would send the transfer that unblocks *less* computation first and
    contradicts the paper's own Fig. 1a and Fig. 4a examples.
    """
    first, second = min(p_b, m_a), min(p_a, m_b)
    if first != second:
        return first < second
    return m_plus_a < m_plus_b


def _comparator_minimum(m: np.ndarray, p: np.ndarray, m_plus: np.ndarray) -> int:
    """Position of the minimum of the candidates under :func:`precedes` (Alg. 3 line 16).

    The comparator with its M+ tie-break is not transitive in general, despite §4.3: with
    (M, P, M+) = a (1, 1, 2), b (1, 2, 3), c (2, 1, 1), a ≺ b ≺ c ≺ a. So "the minimum" is
    defined as: the candidate preceded by the fewest others (none, whenever a minimal element
    exists), then the lowest op index.
    That is the minimum whenever the comparator orders the candidates consistently, and it does
    not depend on the order in which candidates are scanned.
    """
    loss = np.minimum(p[None, :], m[:, None])  # loss[a, b] = min(P_b, M_a): a's side of Eq. 6 for a before b
    first = (loss < loss.T) | ((loss == loss.T) & (m_plus[:, None] < m_plus[None, :]))
    return int(np.argmin(first.sum(axis=0)))


def tac(graph: OpGraph, time: np.ndarray, deps: CommDependencies | None = None) -> Ordering:
    """Timing-Aware Communication scheduling (TicTac Alg. 3).

    While recvs are outstanding: update the properties (Alg. 1) for the outstanding set, take the
    minimum outstanding recv under :func:`precedes` (see :func:`_comparator_minimum` for ties),
    give it the next number (0, 1, ...) and remove it. ``time`` is the time oracle, one value
    per op (:func:`time_oracle`).

    Non-recv ops with the same ``dep`` always have the same ``dep ∩ R``, so they are merged into
    one row whose weight is their total time, and rows whose ``dep ∩ R`` has emptied are dropped:
    each step then costs O(rows x outstanding recvs) vectorised work.

    The comparator is not transitive (docs/model.md §8.4), so the result can depend on the
    tie rule: among recvs that no other recv strictly precedes the lowest index goes first.

    Parameters
    ----------
    graph : OpGraph
        The profile's DAG.
    time : numpy.ndarray
        The time oracle, seconds per op (:func:`time_oracle`).
    deps : CommDependencies, optional
        :func:`comm_dependencies` of ``graph``, when already computed.

    Returns
    -------
    Ordering
        The recvs and their priority numbers (the order they were removed in, per server).

    Examples
    --------
    >>> import tfprofile
    >>> from tfprofile import tictac
    >>> profile = tfprofile.load_profile("data/profiles/tiny.npz")
    >>> order = tictac.tac(profile.graph, tictac.time_oracle(profile))
    >>> order.priority[:8].tolist()
    [0, 1, 2, 3, 4, 5, 6, 7]
    """
    time = _check_time(graph, time)
    deps = comm_dependencies(graph) if deps is None else deps
    recv = deps.recv
    _require_recvs(recv)
    comp = np.flatnonzero(~_is_recv(graph))
    comp = comp[deps.bits[comp].any(axis=1)]  # ops needing no recv never contribute to P or M+
    rows, group = np.unique(deps.bits[comp], axis=0, return_inverse=True)
    dep = _bits_to_matrix(rows, deps.n_recv)
    weight = np.bincount(group.reshape(-1), weights=time[comp], minlength=len(rows))
    recv_time = time[recv]
    outstanding = np.ones(len(recv), dtype=bool)
    removal = np.empty(len(recv), dtype=np.int64)
    for count in range(len(recv)):
        _, p, m_plus = _properties_core(dep, weight, recv_time, outstanding)
        live = np.flatnonzero(outstanding)
        chosen = live[_comparator_minimum(recv_time[live], p[live], m_plus[live])]
        removal[chosen] = count
        outstanding[chosen] = False
        keep = dep[:, outstanding].any(axis=1)
        dep, weight = dep[keep], weight[keep]
    return _ordering(graph, Policy.TAC, recv, removal)


def parse_policy(policy: Policy | str) -> Policy:
    """A :class:`Policy` from itself or its value; :class:`UsageError` naming ``policy`` otherwise."""
    if isinstance(policy, Policy):
        return policy
    try:
        return Policy(policy)
    except ValueError:
        raise UsageError("policy", f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}") from None


def compute_ordering(profile: Profile, policy: Policy | str, *, bandwidth_Bps: float | None = None,
                     seed: int = 0) -> Ordering:
    """The ordering ``policy`` (a :class:`Policy` or its value) gives ``profile``'s recvs.

    TAC uses :func:`time_oracle` (with ``bandwidth_Bps`` if given); "recorded" uses the
    profile's recorded starts (:func:`recorded_order`); the others ignore the durations;
    "random" uses ``seed``. Control transfers inherit their read's priority
    (:func:`inherit_priorities`). Raises :class:`UsageError` for an unknown policy and
    :class:`InputError` for a profile without parameter transfers.
    """
    policy = parse_policy(policy)
    if bandwidth_Bps is not None:
        _check_bandwidth(bandwidth_Bps)
    graph = profile.graph
    if policy is Policy.TAC:
        return tac(graph, time_oracle(profile, bandwidth_Bps))
    if policy is Policy.RANDOM:
        return random_order(graph, seed)
    if policy is Policy.RECORDED:
        return recorded_order(profile)
    return tic(graph) if policy is Policy.TIC else reverse_tic(graph)


def priority_per_op(graph: OpGraph, ordering: Ordering) -> np.ndarray:
    """One float per op: the recv's priority number, +inf for ops without one."""
    out = np.full(graph.n_ops, np.inf)
    out[ordering.recv] = ordering.priority
    return out


# ---------------------------------------------------------------------------- Eqs. 1-4: efficiency

def resource_classes(graph: OpGraph) -> tuple[np.ndarray, tuple[str, ...]]:
    """The resources D of Eq. 2: one id per op and the resources' labels.

    A worker step uses WORKER (the worker's computation, one resource) and, for each parameter
    server s, DOWNLINK/ps<s>, UPLINK/ps<s> and PS/ps<s>: each server's links and computation are
    separate resources, as in tfsim's simulation (docs/model.md §2.4). Resources no op uses get no id.
    """
    resource = graph.resource.astype(np.int64)
    server = np.maximum(graph.server.astype(np.int64), 0)
    raw = np.where(resource == Resource.WORKER, -1, server * 4 + resource)
    used, ids = np.unique(raw, return_inverse=True)
    labels = tuple("WORKER" if r < 0 else f"{Resource(int(r % 4)).name}/ps{int(r // 4)}" for r in used)
    return ids.reshape(-1).astype(np.int64), labels


def makespan_bounds(graph: OpGraph, time_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 1 and Eq. 2: ``U = Σ Time(op)`` and ``L = max over resources d of Σ Time(op on d)``.

    ``time_s`` has shape (n_ops,) or (steps, n_ops); U and L have the leading shape (0-d arrays
    for one step). Resources as in :func:`resource_classes`.
    """
    time_s = np.asarray(time_s, dtype=np.float64)
    if time_s.shape[-1:] != (graph.n_ops,):
        raise UsageError("time_s", f"needs one time per op ({graph.n_ops}) in its last axis, not shape {time_s.shape}")
    ids, labels = resource_classes(graph)
    upper = time_s.sum(axis=-1)
    return upper, _resource_loads(time_s, ids, len(labels)).max(axis=-1)


def _resource_loads(time_s: np.ndarray, ids: np.ndarray, n_resources: int) -> np.ndarray:
    """Σ time per resource, in a last axis of length max(n_resources, 1) (one zero load for no ops)."""
    columns = [time_s[..., ids == k].sum(axis=-1) for k in range(n_resources)]
    return np.stack(columns or [np.zeros(time_s.shape[:-1])], axis=-1)


def efficiency(upper_s, lower_s, makespan_s) -> np.ndarray:
    """Scheduling efficiency, Eq. 3: ``E = (U − m) / (U − L)``; NaN where ``U == L``.

    1 is a makespan at the lower bound, 0 at the upper bound. E leaves [0, 1] when the makespan
    leaves [L, U]; that happens with recorded durations when ops overlapped on one resource
    (e.g. concurrent RecvTensor spans), since L then exceeds what the resource really did.
    """
    upper, lower, makespan = (np.asarray(x, dtype=np.float64) for x in (upper_s, lower_s, makespan_s))
    spread = upper - lower
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(spread != 0, (upper - makespan) / np.where(spread != 0, spread, 1.0), np.nan)


def speedup(upper_s, lower_s) -> np.ndarray:
    """Speedup bound, Eq. 4: ``S = (U − L) / L``, the best over the worst schedule; NaN where ``L == 0``."""
    upper, lower = np.asarray(upper_s, dtype=np.float64), np.asarray(lower_s, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(lower != 0, (upper - lower) / np.where(lower != 0, lower, 1.0), np.nan)


@dataclasses.dataclass(frozen=True)
class Efficiency:
    """Eqs. 1-4 for one step: bounds U and L, the makespan m, E and S (NaN where undefined)."""

    upper_s: float
    lower_s: float
    makespan_s: float
    efficiency: float
    speedup: float
    bottleneck: str  # the resource that sets L


def scheduling_efficiency(graph: OpGraph, time_s: np.ndarray, makespan_s: float) -> Efficiency:
    """E and S (Eqs. 1-4) of one step whose ops took ``time_s`` and which lasted ``makespan_s``."""
    time_s = np.asarray(time_s, dtype=np.float64)
    if time_s.shape != (graph.n_ops,):
        raise UsageError("time_s", f"needs one time per op ({graph.n_ops}), not shape {time_s.shape}")
    upper, lower = makespan_bounds(graph, time_s)
    return Efficiency(upper_s=float(upper), lower_s=float(lower), makespan_s=float(makespan_s),
                      efficiency=float(efficiency(upper, lower, makespan_s)), speedup=float(speedup(upper, lower)),
                      bottleneck=_bottlenecks(graph, time_s[None, :])[0])


def _bottlenecks(graph: OpGraph, time_s: np.ndarray) -> list[str]:
    ids, labels = resource_classes(graph)
    if not labels:
        return [""] * len(time_s)
    return [labels[k] for k in np.argmax(_resource_loads(time_s, ids, len(labels)), axis=1)]


@dataclasses.dataclass(frozen=True, eq=False)
class ProfileEfficiency:
    """Eqs. 1-4 for every profiled step (arrays of length S).

    ``times`` says where the op times come from: ``"dedicated"`` (transfers at size/B, the
    link alone, as TicTac §3.1 assumes; computation as profiled) or ``"recorded"`` (the
    trace's durations, which overlap on a resource when transfers ran concurrently). E is
    NaN in a step whose makespan lies outside [L, U]: there it measures no schedule.
    """

    upper_s: np.ndarray
    lower_s: np.ndarray
    makespan_s: np.ndarray
    efficiency: np.ndarray
    speedup: np.ndarray
    bottleneck: tuple[str, ...]
    times: str = "dedicated"
    steps_outside_bounds: int = 0

    def summary(self) -> dict[str, object]:
        """Mean and median of each quantity over the steps where it is defined (None if nowhere)."""
        def stats(values: np.ndarray) -> dict[str, float | None]:
            finite = values[np.isfinite(values)]
            return {"mean": float(finite.mean()) if finite.size else None,
                    "median": float(np.median(finite)) if finite.size else None}

        labels, counts = np.unique(np.array(self.bottleneck, dtype=str), return_counts=True)
        return {
            "steps": len(self.makespan_s), "times": self.times,
            "efficiency": stats(self.efficiency), "speedup": stats(self.speedup),
            "makespan_s": stats(self.makespan_s), "upper_s": stats(self.upper_s), "lower_s": stats(self.lower_s),
            "bottleneck": str(labels[np.argmax(counts)]) if len(labels) else None,
            "steps_lower_above_makespan": int((self.lower_s > self.makespan_s).sum()),
            "steps_outside_bounds": self.steps_outside_bounds,
        }


def dedicated_times(profile: Profile, bandwidth_Bps) -> np.ndarray:
    """Per-step op times with every transfer alone on its link: size / B (``bandwidth_Bps``: one
    rate, or (downlink, uplink)); computation as profiled. Shape (S, n_ops)."""
    down, up = (bandwidth_Bps, bandwidth_Bps) if np.isscalar(bandwidth_Bps) else bandwidth_Bps
    for rate in (down, up):
        if not (rate is not None and math.isfinite(rate) and rate > 0):
            raise UsageError("bandwidth_Bps", f"a link rate must be positive, not {rate}")
    graph = profile.graph
    time_s = np.array(profile.duration_s, dtype=np.float64)
    size = graph.size_bytes.astype(np.float64)
    for resource, rate in ((Resource.DOWNLINK, down), (Resource.UPLINK, up)):
        mask = graph.resource == resource
        time_s[:, mask] = size[mask] / float(rate)
    return time_s


def profile_efficiency(profile: Profile, bandwidth_Bps=None) -> ProfileEfficiency:
    """E and S of every profiled step, against ``profile.step_makespan_s``.

    With ``bandwidth_Bps`` (one rate, or (downlink, uplink); e.g. the calibrated cluster's),
    the bounds use dedicated times (:func:`dedicated_times`), as TicTac §3.1 defines them.
    Without, the recorded durations: on a trace whose transfers overlapped (a loopback run's
    RecvTensor spans) L then exceeds what the link did, and E is not meaningful; such steps,
    and any whose makespan lies outside [L, U], get E = NaN (counted in
    ``steps_outside_bounds``), so that E is always in [0, 1] where it is given.
    """
    time_s = profile.duration_s if bandwidth_Bps is None else dedicated_times(profile, bandwidth_Bps)
    upper, lower = makespan_bounds(profile.graph, time_s)
    makespan = profile.step_makespan_s
    values = efficiency(upper, lower, makespan)
    outside = np.isfinite(values) & ((values < 0) | (values > 1))
    values = np.where(outside, np.nan, values)
    return ProfileEfficiency(upper_s=upper, lower_s=lower, makespan_s=makespan.copy(), efficiency=values,
                             speedup=speedup(upper, lower), bottleneck=tuple(_bottlenecks(profile.graph, time_s)),
                             times="recorded" if bandwidth_Bps is None else "dedicated",
                             steps_outside_bounds=int(outside.sum()))


# ---------------------------------------------------------------------------- TicTac's priority file

_PRIORITY = re.compile(r"[0-9]{1,18}")  # fits int64
MAX_PRIORITY_FILE_BYTES = 64 * 2**20


def format_priorities(ordering: Ordering) -> str:
    """TicTac's priority file: ``name<TAB>priority``, one line per recv, by (priority, name);
    then, apart, one line per control transfer that inherited a priority, by (priority, name).

    The control transfers come last so that the parameter transfers' ranking reads on its own;
    the file stays in TicTac's format (no comment lines, which TicTac's reader does not know).
    """
    controls = ordering.control_mapping()
    for name in [*ordering.name.tolist(), *controls]:
        if "\t" in name or "\n" in name or "\r" in name or not name:
            raise UsageError("ordering", f"op name {str(name)!r} cannot be written to a priority file")
    lines = sorted(zip(ordering.priority.tolist(), ordering.name.tolist()))
    lines += sorted((priority, name) for name, priority in controls.items())
    return "".join(f"{name}\t{priority}\n" for priority, name in lines)


def write_priorities(path: str | os.PathLike, ordering: Ordering) -> None:
    """Write ``ordering`` as TicTac's priority file, atomically."""
    write_text(path, format_priorities(ordering))


def parse_priorities(text: str, graph: OpGraph, source: str | os.PathLike | None = None) -> Ordering:
    """Read TicTac's priority file text against ``graph`` (policy "file").

    Each non-blank line is ``name<TAB>priority`` with a recv (DOWNLINK) op's name and a
    non-negative integer; the priorities are kept as written. A listed DOWNLINK op of 0 bytes
    is a control transfer: it keeps the priority written (its source is -1). Recvs the file
    does not list have no priority (TicTac leaves such ops unordered). Raises :class:`InputError` naming ``source``
    and the line for a malformed line, a name twice, a name not in the graph or not a recv, or a
    file that lists nothing.
    """
    index, seen = graph.index, {}
    ops, priorities = [], []
    for number, raw in enumerate(text.split("\n"), start=1):
        raw = raw.removesuffix("\r")
        if not raw.strip():
            continue
        fields = raw.split("\t")
        if len(fields) != 2:
            raise InputError(source, f"line {number}: expected 'name<TAB>priority', got {raw[:80]!r}")
        name, value = fields[0], fields[1].strip()
        if not _PRIORITY.fullmatch(value):
            raise InputError(source, f"line {number}: priority {value[:40]!r} is not a non-negative integer "
                                     "(at most 18 digits)")
        if name in seen:
            raise InputError(source, f"line {number}: {name!r} is listed twice (first on line {seen[name]})")
        op = index.get(name)
        if op is None:
            raise InputError(source, f"line {number}: {name!r} is not an op of this profile")
        if graph.resource[op] != Resource.DOWNLINK:
            raise InputError(source, f"line {number}: {name!r} is not a recv (DOWNLINK) op")
        seen[name] = number
        ops.append(op)
        priorities.append(int(value))
    if not ops:
        raise InputError(source, "lists no priorities")
    ops_arr, prio = np.array(ops, dtype=np.int64), np.array(priorities, dtype=np.int64)
    by_op = np.argsort(ops_arr)
    ops_arr, prio = ops_arr[by_op], prio[by_op]
    ranked = graph.size_bytes[ops_arr] > 0
    recv, control = ops_arr[ranked], ops_arr[~ranked]
    return Ordering(policy="file", recv=recv, name=graph.name[recv], server=graph.server[recv],
                    key=prio[ranked].astype(np.float64), priority=prio[ranked], control=control,
                    control_name=graph.name[control], control_priority=prio[~ranked].astype(np.float64),
                    control_source=np.full(len(control), -1, dtype=np.int64))


def read_priorities(path: str | os.PathLike, graph: OpGraph) -> Ordering:
    """Read TicTac's priority file at ``path`` (see :func:`parse_priorities`)."""
    raw = read_input(path, limit=MAX_PRIORITY_FILE_BYTES, what="priority file", gunzip=False)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(path, "not a text (UTF-8) priority file") from None
    return parse_priorities(text, graph, path)

