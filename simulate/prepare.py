"""Turn a profile and a cluster into the graph the engine replays (ICPE §3.4, §5; docs/model.md §2.1-2.2).

Preparation is where the model's assumptions become data:

- **Parsing overhead split** (ICPE §3.4): every transfer of ``size`` bytes becomes a
  transfer taking ``size / B`` on its link, followed by a computation op of
  ``alpha * size + beta`` seconds on the receiver (WORKER for a downlink, the server's PS
  for an uplink) that the transfer's former dependents now wait for. With zero overhead
  no extra op is added: a zero-length op could still queue behind others and change
  the result.
- **Parameter-server what-if** (ICPE §5): re-partition the variables over ``servers`` PS
  tasks as TensorFlow's ``replica_device_setter`` places them (round robin in creation order,
  its default, or its greedy rule: each variable to the server holding the fewest bytes;
  ties to the lowest index) and move every op that reads, updates or carries a variable to
  its new server.
- **All-reduce** (TPDS §3.2.2): downlinks carry nothing and every uplink carries
  ``2 (K - 1) / K * size`` bytes at the full link rate.
- **The RPC chain** (docs/model.md §2.9), when the cluster has one: per server, four message
  ops, each a latency of its own that waits behind the queue of the link it crosses (RunGraph
  request, the worker's and the PS's RecvTensor requests, the RunGraph response).
- **The recorded tie order** (docs/model.md §2.4): each op's tie key, the earliest median
  recorded start among the parameter transfers it leads to, by which ops ready at one instant
  on one slot take their turns (``TieOrder.RECORDED``).
- **Link latency** (docs/model.md §11.2), when the cluster has a what-if one: a pure-delay op
  of that latency right after every transfer of the direction (before its parsing), so that
  its bytes reach the receiver that much later while the link is free for the next; each RPC
  message waits the latency of the link it crosses too. In all-reduce, an uplink's ring
  takes 2 (K - 1) hops, each with the uplink's latency.

The result, :class:`SimGraph`, keeps ops in topological order with CSR successors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from simulate.cluster import ClusterModel, OverheadPlacement
from simulate.codes import ParseLane
from simulate.config import Mode, Placement, as_member
from tfbase.errors import InputError, UsageError
from tfprofile.dag import OpGraph, Profile, Resource
from tfprofile.tictac import recorded_order

KIND_COMPUTE, KIND_TRANSFER, KIND_OVERHEAD, KIND_MESSAGE, KIND_LATENCY = 0, 1, 2, 3, 4


@dataclasses.dataclass(frozen=True, eq=False)
class SimGraph:
    """The op DAG as the engine replays it.

    Attributes (length ``n_ops`` unless stated):
        resource, server: as in :class:`~tfprofile.dag.OpGraph` (server -1 for WORKER).
        kind: KIND_COMPUTE, KIND_TRANSFER, KIND_OVERHEAD, KIND_MESSAGE or KIND_LATENCY.
        origin: index of the profile op each op comes from (an overhead or latency op: its
            transfer's; a message: -1).
        succ_ptr, succ_idx: CSR successors, ascending; in_degree: predecessor counts.
        work: (S, n_ops) bytes for transfers, seconds for computation, per profiled step.
        priority: transfer priority (lower first) for the priority scheduler; inf if none.
        parse_lane: a :class:`~simulate.codes.ParseLane` code: ``LANE`` for parse ops on the
            receiver's parse lane (``OverheadPlacement.LANE``), ``DELAY`` for parse ops that are
            pure delays (``OverheadPlacement.DELAY``) and for messages, ``IN_LINE`` for every
            other op.
        fifo_link: for a message op, the link whose queue it crosses (``m`` server m's
            downlink, ``M + m`` its uplink), else -1.
        n_servers: parameter servers M; batch_size: examples per worker step.
        tie_key: the op's key in the recorded tie order (docs/model.md §2.4): the earliest
            median recorded start among the parameter transfers it leads to (itself included);
            inf for an op that leads to none, and for every op of a profile without a recorded
            order (:func:`recorded_tie_key`).
    """

    resource: np.ndarray
    server: np.ndarray
    kind: np.ndarray
    origin: np.ndarray
    succ_ptr: np.ndarray
    succ_idx: np.ndarray
    in_degree: np.ndarray
    work: np.ndarray
    priority: np.ndarray
    n_servers: int
    batch_size: int
    names: np.ndarray
    parse_lane: np.ndarray = None
    fifo_link: np.ndarray = None
    tie_key: np.ndarray = None

    def __post_init__(self) -> None:
        if self.tie_key is None:
            object.__setattr__(self, "tie_key", np.full(len(self.resource), np.inf))
        if self.parse_lane is None:
            object.__setattr__(self, "parse_lane", np.full(len(self.resource), ParseLane.IN_LINE, dtype=np.int8))
        if self.fifo_link is None:
            object.__setattr__(self, "fifo_link", np.full(len(self.resource), -1, dtype=np.int64))

    @property
    def n_ops(self) -> int:
        return len(self.resource)

    @property
    def n_steps(self) -> int:
        return self.work.shape[0]

    def link_bytes_per_step(self) -> np.ndarray:
        """(2, M) bytes per step on each link: row 0 downlinks, row 1 uplinks, per server."""
        out = np.zeros((2, self.n_servers))
        for row, res in enumerate((Resource.DOWNLINK, Resource.UPLINK)):
            mask = self.resource == res
            np.add.at(out[row], self.server[mask], self.work[0, mask])
        return out


def _successors(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR successors of the edges ``src -> dst`` over ``n`` ops (by source, then target; every
    edge kept, so that in-degrees count each), and the in-degrees."""
    order = np.lexsort((dst, src))
    src, dst = src[order], dst[order]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(ptr, src + 1, 1)
    return np.cumsum(ptr), dst, np.bincount(dst, minlength=n).astype(np.int64)


def greedy_partition(sizes_bytes: np.ndarray, servers: int) -> np.ndarray:
    """TensorFlow's greedy PS placement: variable i (in creation order) goes to the server
    with the fewest bytes so far, ties to the lowest index. Returns each variable's server."""
    loads = np.zeros(servers)
    out = np.empty(len(sizes_bytes), dtype=np.int16)
    for i, size in enumerate(sizes_bytes):
        m = int(np.argmin(loads))  # argmin returns the first minimum: the lowest index wins ties
        out[i] = m
        loads[m] += size
    return out


def round_robin_partition(n_variables: int, servers: int) -> np.ndarray:
    """TensorFlow's default PS placement (``replica_device_setter`` without a ``ps_strategy``):
    variable i, in creation order, goes to server ``i mod servers``, whatever its size.

    Examples
    --------
    >>> round_robin_partition(5, 2).tolist()
    [0, 1, 0, 1, 0]
    """
    return (np.arange(n_variables) % servers).astype(np.int16)


def profile_placement(profile: Profile, placement: str | Placement | None = None) -> Placement:
    """The placement a re-partition uses: ``placement`` when given, else the profiled job's own
    (``profile.meta["placement"]``, from its run.json), else TensorFlow's default, round robin.

    Examples
    --------
    >>> import tfprofile
    >>> profile_placement(tfprofile.load_profile("data/profiles/tiny.npz")).value
    'round_robin'
    >>> profile_placement(tfprofile.load_profile("data/profiles/tiny.npz"), "greedy").value
    'greedy'
    """
    if placement is None:
        recorded = profile.meta.get("placement")
        return Placement(recorded) if recorded in {p.value for p in Placement} else Placement.ROUND_ROBIN
    return as_member(Placement, placement, "placement")


def repartition_servers(profile: Profile, servers: int, placement: Placement = Placement.ROUND_ROBIN) -> np.ndarray:
    """Each op's server after re-partitioning the variables over ``servers`` PS tasks, placed
    as ``placement`` says (the profile's variable table is in creation order).

    Ops that carry a variable follow it; PS ops and transfers without one (control tokens,
    the learning rate, the global-step update's constant) take the server of their first
    server-side neighbour that has one, in topological order, else server 0.
    """
    graph = profile.graph
    if servers < 1:
        raise UsageError("servers", f"needs at least 1 parameter server, not {servers}")
    if len(profile.variables) == 0:
        raise UsageError("servers", "re-partitioning needs the profile's variable table (variables.json)")
    if not isinstance(placement, Placement):
        raise UsageError("placement", f"must be a Placement, not {placement!r}")
    if placement is Placement.GREEDY:
        var_server = greedy_partition(profile.variables.size_bytes, servers)
    else:
        var_server = round_robin_partition(len(profile.variables), servers)
    new = np.where(graph.resource == Resource.WORKER, -1, 0).astype(np.int16)
    has_var = graph.variable >= 0
    new[has_var & (graph.resource != Resource.WORKER)] = var_server[graph.variable[has_var & (
        graph.resource != Resource.WORKER)]]
    assigned = has_var | (graph.resource == Resource.WORKER)
    on_server = graph.resource != Resource.WORKER
    for op in range(graph.n_ops):  # predecessors first: ops are in topological order
        if assigned[op] or not on_server[op]:
            continue
        neighbours = np.concatenate([graph.predecessors(op), graph.successors(op)])
        for m in neighbours:
            if on_server[m] and assigned[m]:
                new[op] = new[m]
                break
        assigned[op] = True
    return new


def _priorities(graph: OpGraph, priorities: Mapping[str, float] | np.ndarray | None) -> np.ndarray:
    out = np.full(graph.n_ops, np.inf)
    if priorities is None:
        return out
    if isinstance(priorities, np.ndarray):
        if priorities.shape != (graph.n_ops,):
            raise UsageError("priorities", f"need one priority per op ({graph.n_ops}), not {priorities.shape}")
        return priorities.astype(np.float64)
    links = np.isin(graph.resource, [Resource.DOWNLINK, Resource.UPLINK])
    for name, value in priorities.items():
        op = graph.index.get(name)
        if op is None or not links[op]:
            raise UsageError("priorities", f"{name!r} is not a transfer of this profile")
        out[op] = float(value)
    return out


def prepare(
    profile: Profile,
    cluster: ClusterModel,
    *,
    workers: int = 1,
    mode: Mode = Mode.ASYNC,
    servers: int | None = None,
    priorities: Mapping[str, float] | np.ndarray | None = None,
    placement: str | Placement | None = None,
) -> SimGraph:
    """Build the :class:`SimGraph` for ``profile`` on ``cluster`` (see the module docstring).

    ``servers`` re-partitions the variables over that many PS tasks (None: as profiled),
    placed as ``placement`` says (None: as the profiled job placed them, :func:`profile_placement`).
    ``priorities`` maps transfer names (or gives one value per profile op) to priorities.
    """
    graph = profile.graph
    server = graph.server.copy()
    n_servers = max(graph.n_servers, 1)
    if servers is not None and servers != graph.n_servers:
        server = repartition_servers(profile, servers, profile_placement(profile, placement))
        n_servers = servers
    prio = _priorities(graph, priorities)

    is_down = graph.resource == Resource.DOWNLINK
    is_up = graph.resource == Resource.UPLINK
    size = graph.size_bytes.astype(np.float64)
    overhead = np.zeros(graph.n_ops)
    overhead[is_down] = cluster.overhead_downlink.seconds(size[is_down])
    overhead[is_up] = cluster.overhead_uplink.seconds(size[is_up])
    if mode is Mode.ALLREDUCE:
        size = np.where(is_down, 0.0, size)
        size = np.where(is_up, 2.0 * (workers - 1) / workers * size, size)
        overhead[is_down] = 0.0
    split = overhead > 0

    # New numbering: each overhead op right after its transfer keeps the order topological.
    n_old = graph.n_ops
    new_pos = np.arange(n_old) + np.concatenate([[0], np.cumsum(split)[:-1]])
    n_new = n_old + int(split.sum())
    over_pos = new_pos[split] + 1
    resource = np.empty(n_new, dtype=np.int8)
    new_server = np.empty(n_new, dtype=np.int16)
    kind = np.empty(n_new, dtype=np.int8)
    origin = np.empty(n_new, dtype=np.int64)
    resource[new_pos] = graph.resource
    new_server[new_pos] = server
    kind[new_pos] = np.where(is_down | is_up, KIND_TRANSFER, KIND_COMPUTE)
    origin[new_pos] = np.arange(n_old)
    resource[over_pos] = np.where(is_down[split], Resource.WORKER, Resource.PS)
    new_server[over_pos] = np.where(is_down[split], -1, server[split])
    kind[over_pos] = KIND_OVERHEAD
    origin[over_pos] = np.flatnonzero(split)

    # Edges: a split transfer's successors now hang off its overhead op.
    src_old = np.repeat(np.arange(n_old), np.diff(graph.succ_ptr))
    dst_old = graph.succ_idx
    src = np.where(split[src_old], new_pos[src_old] + 1, new_pos[src_old])
    dst = new_pos[dst_old]
    src = np.concatenate([src, new_pos[split]])
    dst = np.concatenate([dst, over_pos])
    succ_ptr, dst, in_degree = _successors(src, dst, n_new)

    work = np.empty((profile.n_steps, n_new))
    compute_work = np.where(is_down | is_up, size[None, :], profile.duration_s)
    work[:, new_pos] = compute_work
    work[:, over_pos] = overhead[split][None, :]
    priority = np.full(n_new, np.inf)
    priority[new_pos] = prio
    names = np.empty(n_new, dtype=object)
    names[new_pos] = graph.name
    names[over_pos] = np.char.add(graph.name[split].astype(str), "/parse")
    parse_lane = np.full(n_new, ParseLane.IN_LINE, dtype=np.int8)
    parse_lane[over_pos] = {OverheadPlacement.COMPUTE: ParseLane.IN_LINE, OverheadPlacement.LANE: ParseLane.LANE,
                            OverheadPlacement.DELAY: ParseLane.DELAY}[cluster.overhead_placement]
    sim = SimGraph(
        resource=resource, server=new_server, kind=kind, origin=origin, succ_ptr=succ_ptr,
        succ_idx=dst.astype(np.int64), in_degree=in_degree, work=np.ascontiguousarray(work), priority=priority,
        n_servers=n_servers, batch_size=profile.batch_size, names=names.astype(str), parse_lane=parse_lane,
    )
    if mode is Mode.ALLREDUCE:  # nothing goes down; a ring all-reduce crosses 2 (K - 1) uplinks in turn
        sim = with_link_latency(sim, 0.0, 2 * (workers - 1) * cluster.latency_uplink_s)
    else:
        sim = with_link_latency(sim, cluster.latency_downlink_s, cluster.latency_uplink_s)
    if cluster.rpc is not None:
        sim = with_rpc_chain(sim, cluster.rpc, cluster.latency_downlink_s, cluster.latency_uplink_s)
    return dataclasses.replace(sim, tie_key=recorded_tie_key(profile, sim))


def recorded_tie_key(profile: Profile, graph: SimGraph) -> np.ndarray:
    """Each op's key in the recorded tie order (docs/model.md §2.4).

    A parameter transfer's key is its median recorded start, as in the ``recorded`` order
    (:func:`tfprofile.tictac.recorded_order`; never recorded: inf); a control transfer takes the
    key of the parameter read it inherits its priority from (docs/model.md §8.5); every other op
    the smallest key among the ops it leads to (a PS read, the variable it reads, a message
    every transfer waits for), inf if it leads to no transfer with one. Under
    ``TieOrder.RECORDED`` the ops that become ready at one instant on one slot take their turns
    by this key, so that the PS reads the variables, and the link sends them, in the profiled
    run's order.

    Parameters
    ----------
    profile : Profile
        The profile ``graph`` was prepared from.
    graph : SimGraph
        The prepared graph (any renumbering done: ``origin`` maps its transfers to the profile's).

    Returns
    -------
    numpy.ndarray
        One float per op of ``graph``; all inf when the profile has no recorded order (no
        parameter transfer, or no recorded start).

    Examples
    --------
    >>> import tfprofile, simulate
    >>> profile = tfprofile.load_profile("data/profiles/tiny.npz")
    >>> graph = prepare(profile, simulate.ClusterModel.from_bandwidth(125e6))
    >>> down = (graph.kind == KIND_TRANSFER) & (graph.resource == Resource.DOWNLINK) & np.isfinite(graph.tie_key)
    >>> [str(name)[5:] for name in graph.names[down][np.argsort(graph.tie_key[down], kind="stable")][:3]]
    ['25_conv1/BiasAdd/ReadVariableOp', '22_conv1/Conv2D/ReadVariableOp', '24_conv1/Conv2D/ReadVariableOp']
    >>> reads = {str(n): float(k) for n, k in zip(graph.names, graph.tie_key)}  # a transfer, its read, its variable
    >>> reads["conv1/BiasAdd/ReadVariableOp"] == reads["conv1/biases"] == reads["edge_25_conv1/BiasAdd/ReadVariableOp"]
    True
    """
    key = np.full(graph.n_ops, np.inf)
    try:
        order = recorded_order(profile)
    except InputError:  # nothing to order, or nothing recorded: op-index order
        return key
    by_origin = np.full(profile.graph.n_ops, np.inf)
    by_origin[order.recv] = order.key
    inherits = order.control_source >= 0
    by_origin[order.control[inherits]] = by_origin[order.control_source[inherits]]
    transfers = graph.kind == KIND_TRANSFER
    key[transfers] = by_origin[graph.origin[transfers]]
    ptr, idx = graph.succ_ptr, graph.succ_idx
    for op in range(graph.n_ops - 1, -1, -1):  # successors first: ops are in topological order
        if ptr[op + 1] > ptr[op]:
            key[op] = min(key[op], key[idx[ptr[op]:ptr[op + 1]]].min())
    return key


def with_link_latency(graph: SimGraph, downlink_s: float, uplink_s: float) -> SimGraph:
    """``graph`` with a pure-delay op after every transfer of a direction with a latency.

    The delay op (``ParseLane.DELAY``: a slot of its own, overlapping everything) takes over
    the transfer's successors, its parsing op first when it has one, so the link carries the
    bytes at its rate and the receiver sees them ``downlink_s`` or ``uplink_s`` later. It is
    numbered right after its transfer, which keeps the order topological; with no latency the
    graph is returned as it is.

    Parameters
    ----------
    graph : SimGraph
        A prepared graph (before the RPC chain is added).
    downlink_s, uplink_s : float
        The one-way latency of each direction, seconds.

    Returns
    -------
    SimGraph

    Examples
    --------
    >>> import tfprofile, simulate
    >>> profile = tfprofile.load_profile("data/profiles/tiny.npz")
    >>> graph = prepare(profile, simulate.ClusterModel.from_bandwidth(125e6))
    >>> far = with_link_latency(graph, 0.001, 0.002)
    >>> int((far.kind == KIND_LATENCY).sum()) == int((graph.kind == KIND_TRANSFER).sum())
    True
    """
    transfer = graph.kind == KIND_TRANSFER
    is_down = transfer & (graph.resource == Resource.DOWNLINK)
    delay = np.where(is_down, downlink_s, np.where(transfer & (graph.resource == Resource.UPLINK), uplink_s, 0.0))
    split = delay > 0
    if not split.any():
        return graph
    n_old = graph.n_ops
    new_pos = np.arange(n_old) + np.concatenate([[0], np.cumsum(split)[:-1]])
    n_new = n_old + int(split.sum())
    lat_pos = new_pos[split] + 1

    def spread(values, latency_values, dtype):
        out = np.empty(n_new, dtype=dtype)
        out[new_pos] = values
        out[lat_pos] = latency_values
        return out

    # The receiver's side of the link: the worker for a downlink, the transfer's server for an uplink.
    resource = spread(graph.resource, np.where(is_down[split], Resource.WORKER, Resource.PS), np.int8)
    server = spread(graph.server, np.where(is_down[split], -1, graph.server[split]), np.int16)
    src_old = np.repeat(np.arange(n_old), np.diff(graph.succ_ptr))
    src = np.concatenate([np.where(split[src_old], new_pos[src_old] + 1, new_pos[src_old]), new_pos[split]])
    dst = np.concatenate([new_pos[graph.succ_idx], lat_pos])
    succ_ptr, dst, in_degree = _successors(src, dst, n_new)
    work = np.empty((graph.n_steps, n_new))
    work[:, new_pos] = graph.work
    work[:, lat_pos] = delay[split][None, :]
    return SimGraph(
        resource=resource, server=server, kind=spread(graph.kind, KIND_LATENCY, np.int8),
        origin=spread(graph.origin, graph.origin[split], np.int64), succ_ptr=succ_ptr,
        succ_idx=dst.astype(np.int64), in_degree=in_degree, work=np.ascontiguousarray(work),
        priority=spread(graph.priority, np.inf, np.float64), n_servers=graph.n_servers,
        batch_size=graph.batch_size,
        names=spread(graph.names.astype(object), np.char.add(graph.names[split].astype(str), "/latency"),
                     object).astype(str),
        parse_lane=spread(graph.parse_lane, ParseLane.DELAY, np.int8),
        fifo_link=spread(graph.fifo_link, -1, np.int64),
    )


def with_rpc_chain(graph: SimGraph, rpc, latency_downlink_s: float = 0.0, latency_uplink_s: float = 0.0
                   ) -> SimGraph:
    """``graph`` with the step's RPC messages of each server m (docs/model.md §2.9):

    - ``RunGraph`` (uplink m): a root; the PS's ops without predecessors on server m wait
      for it (the PS's part of the step starts when it arrives);
    - ``worker requests`` (uplink m): a root; every downlink transfer of m waits for it;
    - ``PS requests`` (downlink m): after RunGraph; every uplink transfer to m waits for it;
    - ``RunGraph response`` (downlink m): after every op of the PS's part on m (its PS ops,
      the uplinks to it and their parsing) that has no successor among them.

    Each message is a pure-delay op (a slot of its own) whose delay is the rpc's plus the
    what-if latency of the link it crosses, plus, on a link with a queue window, its wait
    behind that link's queue. Ops are renumbered so that
    the order stays topological: the roots first, the responses last.
    """
    M = graph.n_servers
    n_old = graph.n_ops
    n_front = 3 * M  # per server: RunGraph, PS requests, worker requests
    shift = n_front
    res, server = graph.resource, graph.server
    src_old = np.repeat(np.arange(n_old), np.diff(graph.succ_ptr))
    src, dst = [src_old + shift], [graph.succ_idx + shift]
    for m in range(M):
        rungraph, ps_requests, worker_requests, response = 3 * m, 3 * m + 1, 3 * m + 2, shift + n_old + m
        on_ps = ((res == Resource.PS) | (res == Resource.UPLINK)) & (server == m)
        ps_roots = np.flatnonzero((res == Resource.PS) & (server == m) & (graph.in_degree == 0))
        downlinks = np.flatnonzero((res == Resource.DOWNLINK) & (server == m) & (graph.kind == KIND_TRANSFER))
        uplinks = np.flatnonzero((res == Resource.UPLINK) & (server == m) & (graph.kind == KIND_TRANSFER))
        # The PS's part: its ops (their parsing included), and the uplinks it receives.
        part = on_ps
        has_succ_in_part = np.zeros(n_old, dtype=bool)
        np.logical_or.at(has_succ_in_part, src_old, part[graph.succ_idx])
        sinks = np.flatnonzero(part & ~has_succ_in_part)
        for a, b in ((np.array([rungraph]), ps_roots + shift), (np.array([rungraph]), np.array([ps_requests])),
                     (np.array([ps_requests]), uplinks + shift), (np.array([worker_requests]), downlinks + shift),
                     (sinks + shift, np.array([response]))):
            pairs_a, pairs_b = np.meshgrid(a, b, indexing="ij")
            src.append(pairs_a.ravel())
            dst.append(pairs_b.ravel())
    src, dst = np.concatenate(src).astype(np.int64), np.concatenate(dst).astype(np.int64)
    n_new = n_old + 4 * M
    succ_ptr, dst, in_degree = _successors(src, dst, n_new)

    def spliced(values, front, back):
        return np.concatenate([front, values, back])

    servers = np.arange(M)
    front_server = np.repeat(servers, 3)
    front_resource = np.tile([Resource.WORKER, Resource.PS, Resource.WORKER], M)
    front_link = np.ravel(np.column_stack([M + servers, servers, M + servers]))  # uplink, downlink, uplink
    front_delay = np.tile([rpc.rungraph_s + latency_uplink_s, rpc.ps_requests_s + latency_downlink_s,
                           rpc.worker_requests_s + latency_uplink_s], M)
    front_names = [f"{name}{'' if M == 1 else f' ps{m}'}" for m in range(M)
                   for name in ("RunGraph", "PS requests", "worker requests")]
    back_names = [f"RunGraph response{'' if M == 1 else f' ps{m}'}" for m in range(M)]
    S = graph.n_steps
    work = np.concatenate([np.broadcast_to(front_delay, (S, n_front)), graph.work,
                           np.full((S, M), rpc.response_s + latency_downlink_s)], axis=1)
    return SimGraph(
        resource=spliced(graph.resource, front_resource, np.full(M, Resource.PS)).astype(np.int8),
        server=spliced(graph.server, np.where(front_resource == Resource.WORKER, -1, front_server),
                       servers).astype(np.int16),
        kind=spliced(graph.kind, np.full(n_front, KIND_MESSAGE), np.full(M, KIND_MESSAGE)).astype(np.int8),
        origin=spliced(graph.origin, np.full(n_front, -1), np.full(M, -1)).astype(np.int64),
        succ_ptr=succ_ptr, succ_idx=dst, in_degree=in_degree, work=np.ascontiguousarray(work),
        priority=spliced(graph.priority, np.full(n_front, np.inf), np.full(M, np.inf)),
        n_servers=M, batch_size=graph.batch_size,
        names=np.array(front_names + list(graph.names) + back_names, dtype=str),
        parse_lane=spliced(graph.parse_lane, np.full(n_front, ParseLane.DELAY),
                           np.full(M, ParseLane.DELAY)).astype(np.int8),
        fifo_link=spliced(graph.fifo_link, front_link, servers).astype(np.int64),
    )


def check_strict_order(graph: SimGraph) -> None:
    """Refuse priorities that strict enforcement (docs/model.md §3.3) could never carry out.

    Under strict enforcement a transfer starts only after every transfer of its worker and
    link with a strictly lower number has started (no number counts as +inf). If a
    lower-numbered transfer depends, through the DAG, on a higher-numbered one of the same
    link, or such waits form a cycle across links, no worker ever finishes its step.

    Parameters
    ----------
    graph : SimGraph
        The prepared graph, with its priorities.

    Raises
    ------
    UsageError
        Naming ``priorities``, and the two transfers when one waits for the other directly.
    """
    n = graph.n_ops
    links = np.isin(graph.resource, (Resource.DOWNLINK, Resource.UPLINK))
    if graph.parse_lane is not None:
        links &= graph.parse_lane == ParseLane.IN_LINE  # messages are delays of their own, on no link
    # The waits as a graph: the DAG's edges, and per link one virtual node per distinct number
    # ("every transfer numbered up to this has started") chained in ascending order. Kahn's
    # algorithm visits every node exactly when the waits have no cycle.
    src = [np.repeat(np.arange(n), np.diff(graph.succ_ptr))]
    dst = [graph.succ_idx]
    n_nodes = n
    channel = graph.resource.astype(np.int64) * (graph.n_servers + 1) + np.maximum(graph.server, 0)
    for key in np.unique(channel[links]):
        ops = np.flatnonzero(links & (channel == key))
        values, rank = np.unique(graph.priority[ops], return_inverse=True)
        gates = n_nodes + np.arange(values.size)
        n_nodes += values.size
        src += [ops, gates[:-1], gates[rank[rank > 0] - 1]]
        dst += [gates[rank], gates[1:], ops[rank > 0]]
    src_all, dst_all = np.concatenate(src).astype(np.int64), np.concatenate(dst).astype(np.int64)
    order = np.argsort(src_all, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(src_all, minlength=n_nodes))])
    out = dst_all[order]
    left = np.bincount(dst_all, minlength=n_nodes)
    stack = list(np.flatnonzero(left == 0))
    seen = 0
    while stack:
        v = stack.pop()
        seen += 1
        for d in out[ptr[v]:ptr[v + 1]]:
            left[d] -= 1
            if left[d] == 0:
                stack.append(d)
    if seen == n_nodes:
        return
    raise UsageError("priorities", "strict enforcement of this order would deadlock: "
                                   f"{_strict_witness(graph, links, channel, left[:n] > 0)}; number it lower, "
                                   "or use work-conserving enforcement")


def _strict_witness(graph: SimGraph, links: np.ndarray, channel: np.ndarray, stuck: np.ndarray) -> str:
    """Words for one wait of a deadlocking order: a stuck transfer that depends on a
    higher-numbered transfer of its own link, or the lowest-numbered stuck transfer."""
    preds = [[] for _ in range(graph.n_ops)]
    for op in range(graph.n_ops):
        for d in graph.succ_idx[graph.succ_ptr[op]:graph.succ_ptr[op + 1]]:
            preds[d].append(op)
    names = [str(x) for x in graph.names]
    candidates = np.flatnonzero(stuck & links)
    candidates = candidates[np.argsort(graph.priority[candidates], kind="stable")]
    for low in candidates:
        seen, todo = {int(low)}, list(preds[low])
        while todo:
            v = todo.pop()
            if v in seen:
                continue
            seen.add(v)
            if links[v] and channel[v] == channel[low] and graph.priority[v] > graph.priority[low]:
                return (f"{names[low]!r} (priority {graph.priority[low]:g}) depends on {names[v]!r} "
                        f"(priority {graph.priority[v]:g}) of the same link, which may start only after it")
            todo.extend(preds[v])
    low = candidates[0]
    return (f"{names[low]!r} (priority {graph.priority[low]:g}) waits in a cycle of lower-numbered transfers "
            "and the transfers they depend on")
