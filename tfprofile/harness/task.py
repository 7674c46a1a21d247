"""One task of a TF1 parameter-server job: the process that ``tfsim collect`` starts.

Run as ``python -m tfprofile.harness.task SPEC.json``. The spec (written by
:mod:`tfprofile.harness.launcher`) names the role, the cluster and the run options.

- A **PS** task serves its variables, then waits on a "done" queue of its own and exits
  cleanly once every worker has reported that it finished (or as soon as one reports that
  it failed, with that worker's status).
- A **worker** builds the model under ``replica_device_setter``, waits at a start barrier
  so that all workers begin together, runs warm-up steps, then the measured steps
  (async SGD), tracing every K-th one with ``FULL_TRACE`` and partition graphs. Worker 0
  (the chief) initialises the variables and writes the traces and ``variables.json``;
  every worker writes its own step times.

The chief prints one ``TFSIM-PROGRESS {json}`` line per step on stdout for the launcher's
progress bar. Everything TensorFlow logs goes to stderr, which the launcher keeps in a
log file.

With ``"agreement"`` in the spec (``tfsim collect --role``, one task per host), the tasks
also check that they run the same job: each PS builds the model graph itself and publishes
its record (run options, cluster, the variables and their devices) in a string variable on
its own device; each worker compares its own record with every PS's before training and
stops with status 2 and a ``TFSIM-PROGRESS {"kind": "error"}`` line on a difference. The
other workers hand their step times to the chief through a queue on PS 0, so that only the
chief writes the run directory.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import sys
import time
from pathlib import Path

from tfprofile.harness.task_common import emit_progress, load_model_fn, step_times_csv

DISAGREEMENT_STATUS = 2


class Disagreement(Exception):
    """This task's model or run options differ from another task's."""


def _compress_traces(tf1, trace_dir: Path, steps: list[int]) -> None:
    """Turn each traced step's ``step_NNNNN.pb`` into ``step_NNNNN.pb.gz``, and the first one also
    into TensorFlow's Chrome-trace form, for tools that read it."""
    for k, measured in enumerate(steps):
        raw = trace_dir / f"step_{measured:05d}.pb"
        data = raw.read_bytes()
        (trace_dir / f"step_{measured:05d}.pb.gz").write_bytes(gzip.compress(data, mtime=0))
        raw.unlink()
        if k == 0:
            from tensorflow.python.client import timeline

            chrome = timeline.Timeline(tf1.RunMetadata.FromString(data).step_stats).generate_chrome_trace_format(
                show_dataflow=True)
            (trace_dir / f"step_{measured:05d}.chrome.json.gz").write_bytes(gzip.compress(chrome.encode(), mtime=0))


def _session_config(tf1, spec: dict, device_filters: list[str]):
    return tf1.ConfigProto(
        intra_op_parallelism_threads=spec["intra_op_threads"],
        inter_op_parallelism_threads=spec["inter_op_threads"],
        device_filters=device_filters,
        allow_soft_placement=False,
    )


def _done_queue(tf, tf1, ps_index: int, capacity: int):
    """The queue on PS ``ps_index`` that each worker feeds once when it is done: its exit
    status (0: finished) and its task index."""
    with tf1.device(f"/job:ps/task:{ps_index}"):
        return tf1.FIFOQueue(capacity, [tf.int32, tf.int32], shapes=[[], []], shared_name=f"tfsim_done_ps{ps_index}",
                             name=f"tfsim_done_ps{ps_index}")


def _step_times_queue(tf, tf1, capacity: int):
    """The queue on PS 0 through which the other workers hand their step times to the chief."""
    with tf1.device("/job:ps/task:0"):
        return tf1.FIFOQueue(capacity, [tf.int32, tf.string], shapes=[[], []], shared_name="tfsim_step_times",
                             name="tfsim_step_times")


def _record_variable(tf, tf1, ps_index: int, value: str = ""):
    """The string variable on PS ``ps_index`` that holds that PS's agreement record. It is in
    no collection: no initializer, variable list or trace of the job sees it."""
    with tf1.device(f"/job:ps/task:{ps_index}"):
        return tf1.Variable(value, dtype=tf.string, trainable=False, collections=[], use_resource=True,
                            name=f"tfsim_agreement_ps{ps_index}")


def _agreement_record(tf1, spec: dict) -> dict:
    """This task's view of the job: run options, cluster, and the global variables."""
    variables = sorted([v.op.name, [int(d) for d in v.shape], v.dtype.base_dtype.name, v.device]
                       for v in tf1.global_variables())
    return {"options": spec["agreement"], "cluster": spec["cluster"], "variables": variables}


def _build_train_graph(tf, tf1, spec: dict, index: int, cluster):
    """The worker's training graph under ``replica_device_setter``: ``(loss, batch_size, train_op)``."""
    from tfprofile.harness.zoo import ModelOptions

    setter = tf1.train.replica_device_setter(
        worker_device=f"/job:worker/task:{index}", cluster=cluster, ps_strategy=_ps_strategy(spec))
    with tf1.device(setter):
        global_step = tf1.train.get_or_create_global_step()
        options = ModelOptions(spec["batch_size"], spec["image_size"], spec["num_classes"],
                               spec.get("zero_init", False))
        loss, batch_size = load_model_fn(spec)(options)
        optimizer = tf1.train.GradientDescentOptimizer(spec["learning_rate"])
        train_op = optimizer.minimize(loss, global_step=global_step)
    return loss, batch_size, train_op


def _ps_record(tf, tf1, spec: dict, cluster) -> str:
    """The agreement record of a PS task: it builds the model graph (never runs it) to list
    the variables the workers will place."""
    with tf.Graph().as_default():
        _build_train_graph(tf, tf1, spec, 0, cluster)
        return json.dumps(_agreement_record(tf1, spec), sort_keys=True)


def _barrier_queues(tf, tf1, capacity: int):
    with tf1.device("/job:ps/task:0"):
        ready = tf1.FIFOQueue(capacity, tf.int32, shapes=[], shared_name="tfsim_ready", name="tfsim_ready")
        go = tf1.FIFOQueue(capacity, tf.int32, shapes=[], shared_name="tfsim_go", name="tfsim_go")
    return ready, go


def run_ps(spec: dict) -> int:
    import tensorflow as tf

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    index = spec["task_index"]
    cluster = tf.train.ClusterSpec(spec["cluster"])
    config = _session_config(tf1, spec, [f"/job:ps/task:{index}"])
    server = tf.distribute.Server(cluster, job_name="ps", task_index=index, config=config)
    record = _record_variable(tf, tf1, index, _ps_record(tf, tf1, spec, cluster)) if "agreement" in spec else None
    queue = _done_queue(tf, tf1, index, spec["workers"])
    report = queue.dequeue()
    status = 0
    with tf1.Session(server.target, config=config) as sess:
        if record is not None:
            sess.run(record.initializer)
            emit_progress("serving")
        for _ in range(spec["workers"]):  # blocks until every worker is done, or one failed
            code, worker = (int(x) for x in sess.run(report))
            if code != 0:
                emit_progress("error", status=code, message=f"ps{index}: worker{worker} stopped with status {code}, "
                                                    f"so this PS stops too (see worker{worker}'s message)")
                status = code
                break
    # The last worker's enqueue is still waiting for its reply: let it arrive before exiting.
    time.sleep(1.0)
    return status


def _variables_table(tf1) -> list[dict]:
    trainable = {v.name for v in tf1.trainable_variables()}
    table = []
    for v in tf1.global_variables():
        shape = [int(d) for d in v.shape]
        dtype = v.dtype.base_dtype
        count = 1
        for d in shape:
            count *= d
        table.append({
            "name": v.op.name,
            "shape": shape,
            "dtype": dtype.name,
            "bytes": count * dtype.size,
            "device": v.device,
            "trainable": v.name in trainable,
        })
    return table


class _GreedyByteStrategy:
    """TensorFlow's greedy PS placement (``GreedyLoadBalancingStrategy`` with
    ``byte_size_load_fn``, which TF 2.x no longer ships): each variable goes to the
    PS task holding the fewest bytes so far, ties to the lowest index (ICPE §5)."""

    def __init__(self, num_tasks: int):
        self.loads = [0] * num_tasks

    def __call__(self, op) -> int:
        import tensorflow as tf

        task = min(range(len(self.loads)), key=lambda i: (self.loads[i], i))
        shape = tf.TensorShape(op.get_attr("shape")) if "shape" in op.node_def.attr else op.outputs[0].shape
        if shape.is_fully_defined():
            self.loads[task] += shape.num_elements() * tf.as_dtype(op.get_attr("dtype")).size
        return task


def _ps_strategy(spec: dict):
    """Round robin (``None``, TensorFlow's default) or greedy by bytes."""
    ps_tasks = len(spec["cluster"]["ps"])
    if spec.get("placement", "round_robin") == "greedy" and ps_tasks > 1:
        return _GreedyByteStrategy(ps_tasks)
    return None


def _check_agreement(tf, tf1, sess, spec: dict, index: int, deadline: float) -> None:
    """Compare this worker's record with every PS's; raise :class:`Disagreement` on a difference."""
    from tfprofile.harness.tfconfig import agreement_difference

    own = _agreement_record(tf1, spec)
    for p in range(len(spec["cluster"]["ps"])):
        variable = _record_variable(tf, tf1, p)
        ready = tf1.is_variable_initialized(variable)
        while not sess.run(ready):
            if time.monotonic() > deadline:
                raise Disagreement(f"ps{p} published no record of its model within {spec['startup_timeout_s']:.0f} s")
            time.sleep(0.2)
        theirs = json.loads(sess.run(variable).decode("utf-8"))
        difference = agreement_difference(own, theirs, f"ps{p}")
        if difference:
            raise Disagreement(f"the model or run options differ from ps{p}'s: {difference}")


def _report_done(tf, sess, done_ops, status_ph, status: int) -> None:
    """Tell every PS that this worker is done, with its exit status."""
    for op in done_ops:
        try:
            sess.run(op, feed_dict={status_ph: status})
        except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError):
            pass  # that PS already had every worker's report and is shutting down; nothing is lost


def run_worker(spec: dict) -> int:
    import tensorflow as tf

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    index = spec["task_index"]
    chief = index == 0
    workers = spec["workers"]
    out = Path(spec["out_dir"])
    cluster = tf.train.ClusterSpec(spec["cluster"])
    config = _session_config(tf1, spec, ["/job:ps", f"/job:worker/task:{index}"])
    server = tf.distribute.Server(cluster, job_name="worker", task_index=index, config=config)

    started = time.monotonic()
    _loss, batch_size, train_op = _build_train_graph(tf, tf1, spec, index, cluster)
    init = tf1.global_variables_initializer()
    uninitialized = tf1.report_uninitialized_variables()
    ready, go = _barrier_queues(tf, tf1, workers)
    announce, wait_go = ready.enqueue(1), go.dequeue()
    gather_ready, release = ready.dequeue_many(workers), go.enqueue_many([[1] * workers])
    status_ph = tf1.placeholder_with_default(0, [], name="tfsim_status")
    done_ops = [_done_queue(tf, tf1, p, workers).enqueue([status_ph, index]) for p in range(len(spec["cluster"]["ps"]))]
    role_mode = "agreement" in spec
    step_queue = _step_times_queue(tf, tf1, workers) if role_mode else None

    trace_options = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE, output_partition_graphs=True)
    step_rows = []
    with tf1.Session(server.target, config=config) as sess:
        try:
            if role_mode:
                try:
                    _check_agreement(tf, tf1, sess, spec, index, started + spec["startup_timeout_s"])
                except Disagreement as exc:
                    emit_progress("error", status=DISAGREEMENT_STATUS, message=f"worker{index}: {exc}")
                    _report_done(tf, sess, done_ops, status_ph, DISAGREEMENT_STATUS)
                    return DISAGREEMENT_STATUS
            if chief:
                sess.run(init)
                with open(out / "variables.json", "w", encoding="utf-8") as handle:
                    json.dump({"format": "tfsim.variables/1",
                               "variables": _variables_table(tf1)},
                              handle, indent=2)
                emit_progress("initialized")
            else:
                while len(sess.run(uninitialized)):
                    time.sleep(0.2)
            sess.run(announce)
            if chief:
                sess.run(gather_ready)
                sess.run(release)
            sess.run(wait_go)

            total = spec["warmup_steps"] + spec["steps"]
            # Steps from this one on run untraced (a profile's untraced tail: the PS's CPU per step
            # without what recording a trace costs it; docs/calibration.md §4.8).
            untraced_from = spec["warmup_steps"] + spec.get("traced_steps", spec["steps"])
            traced = 0
            traces = []
            for step in range(total):
                measured = step - spec["warmup_steps"]
                if chief and step == untraced_from and measured > 0:
                    emit_progress("untraced", step=step)
                trace = (measured >= 0 and chief and measured % spec["trace_every"] == 0
                         and step < untraced_from)
                metadata = tf1.RunMetadata() if trace else None
                start_unix, start = time.time(), time.perf_counter()
                if trace:
                    sess.run(train_op, options=trace_options, run_metadata=metadata)
                else:
                    sess.run(train_op)
                wall = time.perf_counter() - start
                step_rows.append((index, step, int(measured >= 0), int(trace), f"{start_unix:.6f}", f"{wall:.6f}"))
                if trace:
                    # Written as it is, and compressed (and the first one converted) only after the
                    # last step: compressing between steps spends CPU that, under a CPU quota (a
                    # container's limit), the next, untraced step pays for by waiting out the quota's period.
                    (out / "trace" / f"step_{measured:05d}.pb").write_bytes(metadata.SerializeToString())
                    traces.append(measured)
                    traced += 1
                if chief or role_mode:
                    emit_progress("step", step=step + 1, total=total, wall_s=round(wall, 6), traced=traced)
            _compress_traces(tf1, out / "trace", traces)

            if role_mode and not chief:
                sess.run(step_queue.enqueue([index, step_times_csv(step_rows)]))
            else:
                (out / f"step_times.worker{index}.csv").write_text(step_times_csv(step_rows), encoding="utf-8")
            if role_mode and chief and workers > 1:
                _receive_step_times(tf1, sess, step_queue, workers - 1, out, spec["timeout_s"])
            if chief:
                versions = {
                    "tensorflow": tf.__version__,
                    "python": sys.version.split()[0],
                    "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default"),
                    "grpc_options": os.environ.get("TF_GRPC_DEFAULT_OPTIONS", ""),
                }
                (out / "versions.json").write_text(json.dumps(versions, indent=2), encoding="utf-8")
            _report_done(tf, sess, done_ops, status_ph, 0)
        except Exception:
            if role_mode:  # let every PS stop now rather than wait for this worker until its --timeout
                with contextlib.suppress(Exception):
                    _report_done(tf, sess, done_ops, status_ph, 1)
            raise
    if chief:
        emit_progress("finished", batch_size=int(batch_size))
    return 0


def _receive_step_times(tf1, sess, queue, count: int, out: Path, timeout_s: float) -> None:
    """The chief writes the other workers' step times, handed over through PS 0."""
    options = tf1.RunOptions(timeout_in_ms=int(timeout_s * 1000))
    indices, texts = sess.run(queue.dequeue_many(count), options=options)
    for worker, text in zip(indices, texts):
        (out / f"step_times.worker{int(worker)}.csv").write_bytes(text)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    if spec.get("api") == "tf2-pss":
        from tfprofile.harness import pss_task

        code = pss_task.run_coordinator(spec) if spec["role"] == "coordinator" else pss_task.run_server(spec)
    elif spec["role"] == "ps":
        code = run_ps(spec)
    else:
        code = run_worker(spec)
    sys.stdout.flush()
    sys.stderr.flush()
    # TensorFlow's gRPC threads can keep a normal interpreter exit waiting; the work is done.
    os._exit(code)


if __name__ == "__main__":
    main()
