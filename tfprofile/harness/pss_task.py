"""The tasks of a TF2 ``ParameterServerStrategy`` job: what ``tfsim collect --api tf2-pss`` starts.

Run by :mod:`tfprofile.harness.task` when the spec's ``api`` is ``tf2-pss`` (docs/formats.md §2.8):

- A **PS** or **worker** task starts TensorFlow's profiler server on its own port
  (``tf.profiler.experimental.server.start``), then a ``tf.distribute.Server`` of its job,
  and serves until the launcher stops it. Worker 0 also has TensorFlow dump the graphs of
  the training function as it partitions them (``TF_DUMP_GRAPH_PREFIX``): these partition
  graphs are the DAG's structure, as ``partition_graphs`` are in a TF1 RunMetadata.
- The **coordinator** (the cluster's ``chief``) builds the model under
  ``strategy.scope()``, schedules warm-up steps, then starts a profiler trace of every PS and
  worker task (``tf.profiler.experimental.client.trace``) and schedules the measured steps
  while it runs (the first ``traced_steps`` of them; the rest once the trace has ended). It
  writes the run directory: ``trace/<task>.xplane.pb.gz`` (one XSpace per
  task), ``graphs/*.pbtxt.gz`` (the partition graphs), ``variables.json``, ``tensors.json``
  (the size of every tensor of the training function, which the traces do not record),
  per-worker step times and ``versions.json``. With a host per task it first checks what each
  server's host does beside training and fetches iperf3's results from worker 0's host, and
  after the last step the capture from the host that took it
  (:mod:`tfprofile.harness.pss_handoff`); then it tells every server's host that the job is
  over (or, when it stops early, that it failed).

A model is the same function as for TF1 (``f(options) -> (loss, batch_size)``, written with
``tf.compat.v1`` ops on its own synthetic input). Wrapped in ``tf.compat.v1.make_template``,
its first call, eager and under the strategy's scope, creates the variables on the PS tasks;
every later call, inside the ``tf.function`` step, reuses them. The step is plain SGD, like
the TF1 job's: ``v.assign_sub(learning_rate * gradient)`` for each trainable variable, or
``v.scatter_sub`` of the scaled rows for a sparse gradient (``IndexedSlices``, an embedding's).

Each step returns the worker's index (from a per-worker dataset: its input pipeline id)
and ``tf.timestamp()`` taken before the model and after the updates, so that the step times
are the workers' own, not the coordinator's.
"""

from __future__ import annotations

import contextlib
import ctypes
import gzip
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

from tfprofile.harness import pss_handoff
from tfprofile.harness.task_common import emit_progress, load_model_fn, step_times_csv

# The name of the step function: TensorFlow names it __inference_<name>_<n>, and the graph dump
# filter (a substring) selects its graphs only.
STEP_FUNCTION = "tfsim_train_step"
# The partition graphs as they run: after the post-partitioning passes (oneDNN's rewrites included).
FINAL_PARTITION_STAGE = "after_partition_passes"
# A server task names its process after itself (``/proc/self/comm``, at most 15 bytes): the
# dataset function reads a worker's index there. Not the command line: a task forked from the
# lab's fork server keeps the server's.
WORKER_NAME_PATTERN = r"(?s)^tfsim-worker([0-9]+)\s*$"
_PR_SET_NAME = 15
# Time the profiler servers take to start a trace once asked (measured here: well under this).
TRACE_START_S = 0.5
# After a trace, each task still pays for it: writing and sending its XSpace, and, under a CPU
# quota, the throttled periods that work leaves behind (a lab tiny job at 0.33 core: the first
# step after the trace took 85 ms where the others took 16-60). Steps run this long after the
# trace has ended are left out of the measured ones, so that the untraced steps and the third
# CPU reading measure the job, not the trace's after-effects; several of the kernel's 100 ms
# quota periods.
POST_TRACE_SETTLE_S = 0.3
# How long a failed coordinator tries to tell the servers' hosts that it stopped.
RELEASE_WAIT_S = 10.0


def _name_this_process(name: str) -> None:
    """Set the process's name (``/proc/self/comm``: the main thread's, which this runs on)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def run_server(spec: dict) -> int:
    """A PS or worker task: profiler server, then the job's server, until stopped."""
    _name_this_process(f"tfsim-{spec['role']}{spec['task_index']}")
    dump = spec.get("graph_dump_dir")
    if dump:  # read by TensorFlow when it first dumps (a task forked from the lab's fork server has imported it)
        os.environ["TF_DUMP_GRAPH_PREFIX"] = dump
        os.environ["TF_DUMP_GRAPH_NAME_FILTER"] = STEP_FUNCTION
    import tensorflow as tf

    label = f"{spec['role']}{spec['task_index']}"
    tf.profiler.experimental.server.start(spec["profiler_ports"][label])
    server = tf.distribute.Server(tf.train.ClusterSpec(spec["cluster"]), job_name=spec["role"],
                                  task_index=spec["task_index"], protocol="grpc", start=True)
    print(f"{label}: serving", file=sys.stderr, flush=True)
    server.join()
    return 0


def _is_keras_model(value) -> bool:
    """A Keras model (Keras 3 or tf_keras), as opposed to a loss tensor: it has layers and variables."""
    return hasattr(value, "trainable_variables") and hasattr(value, "layers") and callable(value)


def _keras_loss(tf, model, batch: int):
    """The loss of a Keras ``model`` on a synthetic batch: uniform inputs of its input shape, and
    class labels for its last axis of logits (sparse softmax cross-entropy, like the zoo's)."""
    shape = [batch, *(int(d) for d in model.input_shape[1:])]
    classes = int(model.output_shape[-1])

    def loss():
        x = tf.random.uniform(shape, name="synthetic_inputs")
        y = tf.random.uniform([batch], maxval=classes, dtype=tf.int32, name="synthetic_labels")
        logits = model(x, training=True)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits), name="loss")

    return loss


def _variables_table(variables) -> list[dict]:
    table = []
    for v, trainable in variables:
        v = getattr(v, "value", v) if not hasattr(v, "device") else v  # a Keras 3 variable wraps a tf.Variable
        shape = [int(d) for d in v.shape]
        count = 1
        for d in shape:
            count *= d
        table.append({"name": v.name.split(":")[0], "shape": shape, "dtype": v.dtype.name,
                      "bytes": count * v.dtype.size, "device": v.device, "trainable": trainable})
    return table


def _tensor_sizes(graph) -> dict[str, int]:
    """Bytes of every output of ``graph``'s ops whose shape and size are known: ``"op:port" -> bytes``."""
    sizes = {}
    for op in graph.get_operations():
        for port, out in enumerate(op.outputs):
            if out.shape.is_fully_defined() and out.dtype.size:
                count = 1
                for d in out.shape:
                    count *= int(d)
                sizes[f"{op.name}:{port}"] = count * out.dtype.size
    return sizes


def _op_variables(graph, variables) -> dict[str, str]:
    """``op name -> variable name`` for every op of the step function ``graph`` that takes a
    variable's handle (reads, updates): the function captures each handle as a placeholder."""
    handles = {}
    for v in variables:
        v = v if hasattr(v, "handle") else getattr(v, "value", v)  # a Keras 3 variable wraps a tf.Variable
        handles[id(v.handle)] = v.name.split(":")[0]
    captured = {internal.op.name: handles[id(external)] for external, internal in graph.captures
                if id(external) in handles}
    return {op.name: captured[t.op.name] for op in graph.get_operations() for t in op.inputs if t.op.name in captured}


PARTITION_GLOB = f"*{STEP_FUNCTION}*_partition_*{FINAL_PARTITION_STAGE}.pbtxt"


def _local_partition_graphs(dump_dir: Path) -> dict[str, bytes]:
    """The dumped final partition graphs of the step function in ``dump_dir`` on this host: name -> text."""
    return {p.name: p.read_bytes() for p in dump_dir.glob(PARTITION_GLOB)}


def _remote_partition_graphs(tf, dump_dir: str, device: str) -> dict[str, bytes]:
    """The same, read on another task's host (worker 0's, when every task has a host of its own)
    by ops placed on that task's ``device``."""
    with tf.device(device):
        names = [n.decode() for n in tf.io.matching_files(f"{dump_dir}/{PARTITION_GLOB}").numpy()]
        return {os.path.basename(n): tf.io.read_file(n).numpy() for n in names}


def _keep_partition_graphs(found: dict[str, bytes], dump_dir: str, out: Path) -> list[str]:
    """Write the final partition graphs of the step function (``found``: name -> text, from
    TensorFlow's dump in ``dump_dir``) into ``out/graphs``."""
    if not found:
        raise RuntimeError(f"TensorFlow dumped no partition graph of {STEP_FUNCTION} into {dump_dir}")
    # One instantiation per function; should TensorFlow retrace, the latest dump (highest id) is the one that ran.
    latest = max(n.split("_partition_")[0] for n in found)
    (out / "graphs").mkdir(exist_ok=True)
    names = []
    for dumped in sorted(found):
        if dumped.split("_partition_")[0] != latest:
            continue
        device = dumped.split("_partition_")[1].split(".")[0]
        name = device.strip("_").replace(":", "_").replace("/", "_") + ".pbtxt.gz"
        (out / "graphs" / name).write_bytes(gzip.compress(found[dumped], mtime=0))
        names.append(name)
    return names


def _keep_traces(logdir: Path, out: Path, ports: dict[str, int], hosts: dict[str, str]) -> list[str]:
    """Move the profiler's ``<host>_<port>.xplane.pb`` files to ``out/trace/<task>.xplane.pb.gz``
    (by host and port: tasks on hosts of their own may all have the same port)."""
    wanted = {f"{hosts.get(label, '127.0.0.1')}_{port}": label for label, port in ports.items()}
    ports_of = [key.rpartition("_")[2] for key in wanted]
    names = []
    for p in sorted(logdir.glob("plugins/profile/*/*.xplane.pb")):
        key = p.name[: -len(".xplane.pb")]
        if key not in wanted:  # a host the profiler names otherwise: its port alone, if no other task has it
            port = key.rpartition("_")[2]
            same = [k for k in wanted if k.rpartition("_")[2] == port]
            key = same[0] if len(same) == 1 and ports_of.count(port) == 1 else key
        if key in wanted:
            name = f"{wanted.pop(key)}.xplane.pb.gz"
            (out / "trace" / name).write_bytes(gzip.compress(p.read_bytes(), mtime=0))
            names.append(name)
    if wanted:
        found = ", ".join(sorted(p.name for p in logdir.glob("plugins/profile/*/*.xplane.pb"))) or "none"
        raise RuntimeError(f"the profiler returned no trace of {', '.join(sorted(wanted.values()))} "
                           f"(its files: {found})")
    return names


def run_coordinator(spec: dict) -> int:
    """Build the model, run the steps, trace every task, and write the run directory."""
    import tensorflow as tf

    # The coordinator's context configures the remote tasks' eager contexts (it creates them).
    tf.config.threading.set_intra_op_parallelism_threads(spec["intra_op_threads"])
    tf.config.threading.set_inter_op_parallelism_threads(spec["inter_op_threads"])
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(spec["cluster"]), task_type="chief", task_id=0, rpc_layer="grpc")
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    try:
        batch = _coordinate(tf, spec, strategy, coordinator)
    except pss_handoff.HandoffError as exc:  # a host cannot do what the options ask: said in one line
        _release_servers(tf, spec, pss_handoff.SERVERS_FAILED, wait_s=RELEASE_WAIT_S)
        emit_progress("error", status=exc.status, message=str(exc))
        return exc.status
    except BaseException:
        _release_servers(tf, spec, pss_handoff.SERVERS_FAILED, wait_s=RELEASE_WAIT_S)
        raise
    _release_servers(tf, spec, pss_handoff.SERVERS_DONE)
    emit_progress("finished", batch_size=batch)
    return 0


def _release_servers(tf, spec: dict, word: str, wait_s: float | None = None) -> None:
    """With a host per task, each server's tfsim collect waits for a file on its own host that
    says the job is over (``word``: done, or failed): written there by an op placed on that
    task. Given ``wait_s`` (after a failure, when a server may be gone), at most that long and
    errors ignored."""
    def write() -> None:
        for device, path in spec.get("done_files", {}).items():
            with tf.device(device):
                tf.io.write_file(path, word)

    if wait_s is None:
        write()
        return

    def attempt() -> None:
        with contextlib.suppress(Exception):  # the coordinator's own error is the one to report
            write()

    writer = threading.Thread(target=attempt, daemon=True)
    writer.start()
    writer.join(wait_s)


def _coordinate(tf, spec: dict, strategy, coordinator) -> int:
    """Fetch the links' measurements, build the model, run and trace the steps, and write the
    run directory; return the batch size."""
    from tfprofile.harness.zoo import ModelOptions

    out = Path(spec["out_dir"])
    handoff = spec.get("handoff")
    links = []
    if handoff is not None:  # before the model: iperf3 runs while the job's links are idle
        pss_handoff.check_manifests(tf, spec)
        if handoff["iperf"] is not None:
            links = pss_handoff.fetch_iperf(tf, spec, out)
    options = ModelOptions(spec["batch_size"], spec["image_size"], spec["num_classes"], spec.get("zero_init", False))
    model_fn = load_model_fn(spec)
    batch_size = []

    def model():
        loss, batch = model_fn(options)
        batch_size.append(batch)
        return loss

    template = tf.compat.v1.make_template("model", model)
    with strategy.scope():
        built = template()  # creates the variables, on the PS tasks
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    if _is_keras_model(built):
        forward = _keras_loss(tf, built, batch_size[0])
        # Keras 3's own assign_sub reads the variable to the worker and assigns the result back;
        # the tf.Variable it wraps updates on the PS, as a TF1 job does.
        trainable = [v if isinstance(v, tf.Variable) else v.value for v in built.trainable_variables]
    else:
        forward = template
        trainable = template.trainable_variables
    if not trainable:
        raise RuntimeError("the model created no trainable variable (tf.compat.v1.get_variable)")
    learning_rate = spec["learning_rate"]

    def worker_index():
        # The dataset function is traced once for all workers (and an input context's pipeline id
        # is 0 on every worker): the index comes from the process that builds the dataset, the
        # worker's own, which is named after its task (:func:`_name_this_process`).
        name = tf.io.read_file("/proc/self/comm")
        task = tf.strings.to_number(tf.strings.regex_replace(name, WORKER_NAME_PATTERN, r"\1"), tf.int32)
        return tf.data.Dataset.from_tensors(task).repeat()

    indices = iter(coordinator.create_per_worker_dataset(worker_index))

    def update(variable, gradient):
        # A sparse gradient (an embedding lookup's IndexedSlices: rows and their indices) updates
        # only its rows, with a scatter on the variable's PS, as a TF1 optimizer applies it.
        if isinstance(gradient, tf.IndexedSlices):
            return variable.scatter_sub(tf.IndexedSlices(learning_rate * gradient.values, gradient.indices,
                                                         gradient.dense_shape))
        return variable.assign_sub(learning_rate * gradient)

    def train_step(iterator):
        worker = next(iterator)
        began = tf.timestamp()
        with tf.control_dependencies([began]), tf.GradientTape() as tape:
            loss = forward()
        gradients = tape.gradient(loss, trainable)
        updates = [update(v, g) for v, g in zip(trainable, gradients)]
        updates.append(global_step.assign_add(1))
        with tf.control_dependencies(updates):
            ended = tf.timestamp()
        return worker, began, ended

    train_step.__name__ = STEP_FUNCTION
    step = tf.function(train_step)

    warmup, measured = spec["warmup_steps"], spec["steps"]
    total = warmup + measured
    # The first traced_steps measured steps run while the trace does; the others only once it has
    # ended, untraced. With none (a run that needs no profile, such as the lab's measuring runs)
    # the trace covers the warm-up's later steps instead (the first compiles the step function):
    # a profiler trace without any step is an error.
    traced_count = int(spec.get("traced_steps", measured))
    traced_warmup = max(0, warmup - 1) if traced_count == 0 else 0
    done = 0

    def warm_up(count: int) -> None:
        # A warm-up step is one round of one step per worker, so that every worker has built the
        # step function before the measured steps (a closure goes to whichever worker is free).
        nonlocal done
        for _ in range(count):
            for remote in [coordinator.schedule(step, args=(indices,)) for _ in spec["cluster"]["worker"]]:
                remote.fetch()
            done += 1
            emit_progress("step", step=done, total=total, wall_s=0.0, traced=0)

    warm_up(warmup - traced_warmup)
    with open(out / "variables.json", "w", encoding="utf-8") as handle:
        json.dump({"format": "tfsim.variables/1",
                   "variables": _variables_table([(v, True) for v in trainable] + [(global_step, False)])},
                  handle, indent=2)
    emit_progress("initialized")

    ports = {label: port for label, port in spec["profiler_ports"].items() if not label.startswith("coordinator")}
    hosts = spec.get("profiler_hosts") or {}
    service = ",".join(f"grpc://{hosts.get(label, '127.0.0.1')}:{port}" for label, port in ports.items())
    logdir = out / "profiler"
    trace_window = {}

    def trace():
        trace_window["start"] = time.time()
        try:
            tf.profiler.experimental.client.trace(service, str(logdir), duration_ms=spec["trace_ms"])
        except Exception as exc:  # the profiler's own error, raised again in the coordinator's thread
            trace_window["error"] = exc
        trace_window["end"] = time.time()

    tracer = threading.Thread(target=trace, daemon=True)
    tracer.start()
    time.sleep(TRACE_START_S)
    results = []

    def run(count: int) -> None:
        nonlocal done
        scheduled = [coordinator.schedule(step, args=(indices,)) for _ in range(count)]
        for remote in scheduled:
            worker, began, ended = (float(x) for x in remote.fetch())
            results.append((int(worker), began, ended, True))
            done += 1
            emit_progress("step", step=done, total=total, wall_s=round(ended - began, 6), traced=0)

    def settle() -> None:
        # Rounds of one step per worker until POST_TRACE_SETTLE_S after the trace's end, at least
        # one. They keep their step numbers and are left out of step_times.csv, so that no pair
        # of consecutive rows spans them (the untraced steps' times are taken over such pairs).
        while True:
            for remote in [coordinator.schedule(step, args=(indices,)) for _ in spec["cluster"]["worker"]]:
                worker, began, ended = (float(x) for x in remote.fetch())
                results.append((int(worker), began, ended, False))
            if time.time() - trace_window["end"] >= POST_TRACE_SETTLE_S:
                return

    warm_up(traced_warmup)
    run(traced_count)
    coordinator.join()
    tracer.join()
    if "error" in trace_window:
        raise RuntimeError(f"the profiler trace failed: {trace_window['error']}")
    if traced_count and measured > traced_count:
        settle()
        # The profiler costs every task CPU while it traces: the launcher reads the tasks' CPU
        # here too, so that calibration can take the PS's CPU per step from untraced steps.
        emit_progress("untraced", step=done)
    run(measured - traced_count)
    coordinator.join()

    traced = _keep_traces(logdir, out, ports, hosts)
    shutil.rmtree(logdir, ignore_errors=True)
    dump_dir = spec["graph_dump_dir"]
    found = (_remote_partition_graphs(tf, dump_dir, spec["graph_dump_device"]) if spec.get("graph_dump_device")
             else _local_partition_graphs(Path(dump_dir)))
    graphs = _keep_partition_graphs(found, dump_dir, out)
    graph = step.get_concrete_function(indices).graph
    with open(out / "tensors.json", "w", encoding="utf-8") as handle:
        json.dump({"format": "tfsim.tensors/1", "function": STEP_FUNCTION, "tensors": _tensor_sizes(graph),
                   "op_variables": _op_variables(graph, [*trainable, global_step])}, handle, indent=1)
    if handoff is not None:  # after the last step: the capture holds all of them
        capture = pss_handoff.fetch_capture(tf, spec, out) if handoff["capture_task"] else None
        pss_handoff.write_record(out, capture, links)

    window = (trace_window["start"] + TRACE_START_S, trace_window["end"])
    per_worker: dict[int, int] = {}
    rows = []
    for worker, began, ended, kept in sorted(results, key=lambda r: (r[0], r[1])):
        k = per_worker.get(worker, warmup)
        per_worker[worker] = k + 1
        inside = int(window[0] <= began and ended <= window[1])
        if kept:
            rows.append((worker, k, 1, inside, f"{began:.6f}", f"{ended - began:.6f}"))
    for w in range(len(spec["cluster"]["worker"])):
        mine = [r for r in rows if r[0] == w]
        (out / f"step_times.worker{w}.csv").write_text(step_times_csv(mine), encoding="utf-8")
    versions = {"tensorflow": tf.__version__, "python": sys.version.split()[0],
                "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default"),
                "grpc_options": os.environ.get("TF_GRPC_DEFAULT_OPTIONS", ""),
                "traces": traced, "graphs": graphs}
    (out / "versions.json").write_text(json.dumps(versions, indent=2), encoding="utf-8")
    return int(batch_size[0])
