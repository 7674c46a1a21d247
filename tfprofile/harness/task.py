"""One task of a TF1 parameter-server job: the process that ``tfsim collect`` starts.

Run as ``python -m tfprofile.harness.task SPEC.json``. The spec (written by
:mod:`tfprofile.harness.launcher`) names the role, the cluster and the run options.

- A **PS** task serves its variables, then waits on a "done" queue of its own and exits
  cleanly once every worker has reported that it finished.
- A **worker** builds the model under ``replica_device_setter``, waits at a start barrier
  so that all workers begin together, runs warm-up steps, then the measured steps
  (async SGD), tracing every K-th one with ``FULL_TRACE`` and partition graphs. Worker 0
  (the chief) initialises the variables and writes the traces and ``variables.json``;
  every worker writes its own step times.

The chief prints one ``TFSIM-PROGRESS {json}`` line per step on stdout for the launcher's
progress bar. Everything TensorFlow logs goes to stderr, which the launcher keeps in a
log file.
"""

from __future__ import annotations

import csv
import gzip
import importlib
import json
import os
import sys
import time
from pathlib import Path

PROGRESS_PREFIX = "TFSIM-PROGRESS "


def _load_model_fn(spec: dict):
    """Return a callable ``options -> (loss, batch_size)`` for the zoo model or the user's function."""
    from tfprofile.harness import zoo

    if spec.get("model_fn"):
        module_name, _, func_name = spec["model_fn"].partition(":")
        module = importlib.import_module(module_name)
        return getattr(module, func_name)
    return lambda options: zoo.build_model(spec["model"], options)


def _emit(kind: str, **fields) -> None:
    print(PROGRESS_PREFIX + json.dumps({"kind": kind, **fields}), flush=True)


def _session_config(tf1, spec: dict, device_filters: list[str]):
    return tf1.ConfigProto(
        intra_op_parallelism_threads=spec["intra_op_threads"],
        inter_op_parallelism_threads=spec["inter_op_threads"],
        device_filters=device_filters,
        allow_soft_placement=False,
    )


def _done_queue(tf, tf1, ps_index: int, capacity: int):
    """The queue on PS ``ps_index`` that each worker feeds once when it is done."""
    with tf1.device(f"/job:ps/task:{ps_index}"):
        return tf1.FIFOQueue(capacity, tf.int32, shapes=[], shared_name=f"tfsim_done_ps{ps_index}",
                             name=f"tfsim_done_ps{ps_index}")


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
    queue = _done_queue(tf, tf1, index, spec["workers"])
    finished = queue.dequeue_many(spec["workers"])
    with tf1.Session(server.target, config=config) as sess:
        sess.run(finished)  # blocks until every worker is done
    # The last worker's enqueue is still waiting for its reply: let it arrive before exiting.
    time.sleep(1.0)
    return 0


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


def run_worker(spec: dict) -> int:
    import tensorflow as tf

    from tfprofile.harness.zoo import ModelOptions

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    index = spec["task_index"]
    chief = index == 0
    workers = spec["workers"]
    out = Path(spec["out_dir"])
    cluster = tf.train.ClusterSpec(spec["cluster"])
    config = _session_config(tf1, spec, ["/job:ps", f"/job:worker/task:{index}"])
    server = tf.distribute.Server(cluster, job_name="worker", task_index=index, config=config)

    setter = tf1.train.replica_device_setter(
        worker_device=f"/job:worker/task:{index}", cluster=cluster, ps_strategy=_ps_strategy(spec))
    with tf1.device(setter):
        global_step = tf1.train.get_or_create_global_step()
        options = ModelOptions(spec["batch_size"], spec["image_size"], spec["num_classes"],
                               spec.get("zero_init", False))
        loss, batch_size = _load_model_fn(spec)(options)
        optimizer = tf1.train.GradientDescentOptimizer(spec["learning_rate"])
        train_op = optimizer.minimize(loss, global_step=global_step)
    init = tf1.global_variables_initializer()
    uninitialized = tf1.report_uninitialized_variables()
    ready, go = _barrier_queues(tf, tf1, workers)
    announce, wait_go = ready.enqueue(1), go.dequeue()
    gather_ready, release = ready.dequeue_many(workers), go.enqueue_many([[1] * workers])
    done_ops = [_done_queue(tf, tf1, p, workers).enqueue(1) for p in range(len(spec["cluster"]["ps"]))]

    trace_options = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE, output_partition_graphs=True)
    step_rows = []
    with tf1.Session(server.target, config=config) as sess:
        if chief:
            sess.run(init)
            with open(out / "variables.json", "w", encoding="utf-8") as handle:
                json.dump({"format": "tfsim.variables/1",
                           "variables": _variables_table(tf1)},
                          handle, indent=2)
            _emit("initialized")
        else:
            while len(sess.run(uninitialized)):
                time.sleep(0.2)
        sess.run(announce)
        if chief:
            sess.run(gather_ready)
            sess.run(release)
        sess.run(wait_go)

        total = spec["warmup_steps"] + spec["steps"]
        traced = 0
        for step in range(total):
            measured = step - spec["warmup_steps"]
            trace = measured >= 0 and chief and measured % spec["trace_every"] == 0
            metadata = tf1.RunMetadata() if trace else None
            start_unix, start = time.time(), time.perf_counter()
            if trace:
                sess.run(train_op, options=trace_options, run_metadata=metadata)
            else:
                sess.run(train_op)
            wall = time.perf_counter() - start
            step_rows.append((index, step, int(measured >= 0), int(trace), f"{start_unix:.6f}", f"{wall:.6f}"))
            if trace:
                data = gzip.compress(metadata.SerializeToString(), mtime=0)
                (out / "trace" / f"step_{measured:05d}.pb.gz").write_bytes(data)
                if traced == 0:  # the same step in TensorFlow's Chrome-trace form, for tools that read it
                    from tensorflow.python.client import timeline

                    chrome = timeline.Timeline(metadata.step_stats).generate_chrome_trace_format(show_dataflow=True)
                    (out / "trace" / f"step_{measured:05d}.chrome.json.gz").write_bytes(
                        gzip.compress(chrome.encode(), mtime=0))
                traced += 1
            if chief:
                _emit("step", step=step + 1, total=total, wall_s=round(wall, 6), traced=traced)

        with open(out / f"step_times.worker{index}.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["worker", "step", "measured", "traced", "start_unix_s", "wall_s"])
            writer.writerows(step_rows)
        if chief:
            versions = {
                "tensorflow": tf.__version__,
                "python": sys.version.split()[0],
                "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default"),
                "grpc_options": os.environ.get("TF_GRPC_DEFAULT_OPTIONS", ""),
            }
            (out / "versions.json").write_text(json.dumps(versions, indent=2), encoding="utf-8")
        for op in done_ops:
            try:
                sess.run(op)
            except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError):
                pass  # that PS already had every worker's report and is shutting down; nothing is lost
    if chief:
        _emit("finished", batch_size=int(batch_size))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    if spec["role"] == "ps":
        code = run_ps(spec)
    else:
        code = run_worker(spec)
    sys.stdout.flush()
    sys.stderr.flush()
    # TensorFlow's gRPC threads can keep a normal interpreter exit waiting; the work is done.
    os._exit(code)


if __name__ == "__main__":
    main()
