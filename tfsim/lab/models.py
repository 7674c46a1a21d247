"""Model functions for ``tfsim collect --model-fn tfsim.lab.models:FUNC`` used by lab studies.

``recommender``: an embedding-heavy recommender-style job, the kind whose W-worker runs
fall below the predicted link limit (bench/results/study-w4/REPORT.md).

``convnet``: a small image classifier whose computation outweighs its transfers on a fast
link (about 1.4 M parameters, 5.5 MB each way per step), the compute-bound corner of the
lab's matrix; on a slow link it turns link-bound within a few workers.

- Three embedding tables live on the PS (``replica_device_setter`` places the variables
  there); ``tf.nn.embedding_lookup`` colocates each gather with its table, so the lookups
  run on the PS: the worker's ids cross to the PS, the gathered rows come back.
- The gradients of the tables are sparse (``IndexedSlices``): the PS pulls the rows'
  gradients and their indices from the worker and applies them with a scatter update.
- A small dense MLP (192 -> 256 -> 128 -> 1) runs on the worker; its weights (~330 KB)
  are read from the PS and their gradients sent back.

Per step and worker at batch 256 (float32, dim 64): gathered rows 256 x (16 + 8 + 4) x 64 x 4 B
= 1.84 MB down, the same in row gradients up, plus the ids (int64, 57 KB) up and the dense
weights/gradients (0.33 MB) each way: about 2.2 MB in each direction. The tables hold
2.0 x 10^5 + 2 x 10^5 rows x 64 floats (~102 MB) on the PS.

Contract (README, ``--model-fn``): ``f(options) -> (loss, batch_size)``, built with
``tf.compat.v1`` ops on synthetic input, called inside ``replica_device_setter``.
"""

from __future__ import annotations

import tensorflow as tf

tf1 = tf.compat.v1

# (name, vocabulary rows, ids per example); every table has EMBED_DIM columns.
TABLES = (("user_items", 200_000, 16), ("item", 100_000, 8), ("context", 100_000, 4))
EMBED_DIM = 64
HIDDEN = (256, 128)


def _init(options, initializer):
    return tf1.zeros_initializer() if getattr(options, "zero_init", False) else initializer


def recommender(options):
    """Embedding lookups on the PS (sparse gradients), a small dense MLP on the worker."""
    batch = int(options.batch_size or 256)
    pooled = []
    for name, rows, ids_per_example in TABLES:
        with tf1.variable_scope(f"embed_{name}"):
            table = tf1.get_variable(
                "table", [rows, EMBED_DIM],
                initializer=_init(options, tf1.random_uniform_initializer(-0.05, 0.05)))
            ids = tf1.random.uniform([batch, ids_per_example], maxval=rows, dtype=tf.int64, name="ids")
            rows_looked_up = tf.nn.embedding_lookup(table, ids, name="lookup")  # [batch, k, dim], on the PS
            pooled.append(tf.reduce_sum(rows_looked_up, axis=1))              # on the worker
    x = tf.concat(pooled, axis=1)
    width = EMBED_DIM * len(TABLES)
    for k, units in enumerate(HIDDEN):
        with tf1.variable_scope(f"dense{k}"):
            w = tf1.get_variable("weights", [width, units],
                                 initializer=_init(options, tf1.glorot_uniform_initializer()))
            b = tf1.get_variable("biases", [units], initializer=tf1.zeros_initializer())
            x = tf.nn.relu(tf.matmul(x, w) + b)
            width = units
    with tf1.variable_scope("logit"):
        w = tf1.get_variable("weights", [width, 1], initializer=_init(options, tf1.glorot_uniform_initializer()))
        b = tf1.get_variable("biases", [1], initializer=tf1.zeros_initializer())
        logits = tf.matmul(x, w) + b
    labels = tf.cast(tf1.random.uniform([batch, 1], maxval=2, dtype=tf.int32), tf.float32)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    return loss, batch


# Per stage, the filters of two 3x3 convolutions followed by a 2x2 max-pool (VGG's pattern: the
# second convolution adds computation, hardly any parameters); then one hidden dense layer.
CONV_STAGES = (32, 64, 128)
CONVS_PER_STAGE = 2
CONV_HIDDEN = 512
CONV_IMAGE_SIZE = 32
CONV_CLASSES = 10


def convnet(options):
    """Three conv + pool stages and two dense layers on synthetic 32 px images, all on the worker."""
    batch = int(options.batch_size or 64)
    x = tf1.random.uniform([batch, CONV_IMAGE_SIZE, CONV_IMAGE_SIZE, 3], name="synthetic_images")
    for stage, filters in enumerate(CONV_STAGES):
        for k in range(CONVS_PER_STAGE):
            with tf1.variable_scope(f"conv{stage}_{k}"):
                w = tf1.get_variable("weights", [3, 3, int(x.shape[-1]), filters],
                                     initializer=_init(options, tf1.glorot_uniform_initializer()))
                b = tf1.get_variable("biases", [filters], initializer=tf1.zeros_initializer())
                x = tf.nn.relu(tf.nn.conv2d(x, w, strides=1, padding="SAME") + b)
        x = tf.nn.max_pool2d(x, 2, 2, "VALID")
    x = tf.reshape(x, [batch, -1])
    for name, units in (("hidden", CONV_HIDDEN), ("logits", CONV_CLASSES)):
        with tf1.variable_scope(name):
            w = tf1.get_variable("weights", [int(x.shape[-1]), units],
                                 initializer=_init(options, tf1.glorot_uniform_initializer()))
            b = tf1.get_variable("biases", [units], initializer=tf1.zeros_initializer())
            x = tf.matmul(x, w) + b
            if name == "hidden":
                x = tf.nn.relu(x)
    labels = tf1.random.uniform([batch], maxval=CONV_CLASSES, dtype=tf.int32, name="synthetic_labels")
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=x)), batch
