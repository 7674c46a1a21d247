"""A job written for this lab run only, outside tfsim's zoo, the lab's models and every job the
model was judged on so far: ``sparse_tower``, four embedding tables on the PS (20,000 x 32
floats, 2.56 MB each), eight ids per table and example looked up there (sparse gradients back),
then a tower of 12 small dense layers (96 units) on the worker. Per step at batch 256: about
1.1 MB of looked-up rows down and as many sparse gradient rows (with their indices) up, plus
0.5 MB of dense weights each way; many small ops, so recording a trace costs its tasks a good
share of their CPU.

Used with ``PYTHONPATH=bench/results/fresh-2026-11-28b`` and
``model_fn = "fresh_jobs_b:sparse_tower"`` (the ``--model-fn`` contract: ``f(options) ->
(loss, batch_size)``, ``tf.compat.v1`` ops on synthetic input, called inside
``replica_device_setter``).
"""

from __future__ import annotations

import tensorflow as tf

tf1 = tf.compat.v1

TABLES = 4
VOCABULARY = 20_000
EMBEDDING_WIDTH = 32
IDS_PER_TABLE = 8
TOWER_LAYERS = 12
TOWER_UNITS = 96
CLASSES = 10


def sparse_tower(options):
    batch = int(options.batch_size or 256)
    pooled = []
    for k in range(TABLES):
        with tf1.variable_scope(f"table{k}"):
            table = tf1.get_variable("embeddings", [VOCABULARY, EMBEDDING_WIDTH],
                                     initializer=tf1.random_uniform_initializer(-0.05, 0.05))
            ids = tf1.random.uniform([batch, IDS_PER_TABLE], maxval=VOCABULARY, dtype=tf.int64,
                                     name="synthetic_ids")
            pooled.append(tf.reduce_mean(tf.nn.embedding_lookup(table, ids), axis=1))
    x = tf.concat(pooled, axis=1)
    width = TABLES * EMBEDDING_WIDTH
    for k in range(TOWER_LAYERS):
        with tf1.variable_scope(f"tower{k}"):
            w = tf1.get_variable("weights", [width, TOWER_UNITS], initializer=tf1.glorot_uniform_initializer())
            b = tf1.get_variable("biases", [TOWER_UNITS], initializer=tf1.zeros_initializer())
            x = tf.nn.relu(tf.matmul(x, w) + b)
            width = TOWER_UNITS
    with tf1.variable_scope("logits"):
        w = tf1.get_variable("weights", [width, CLASSES], initializer=tf1.glorot_uniform_initializer())
        b = tf1.get_variable("biases", [CLASSES], initializer=tf1.zeros_initializer())
        logits = tf.matmul(x, w) + b
    labels = tf1.random.uniform([batch], maxval=CLASSES, dtype=tf.int32, name="synthetic_labels")
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)), batch
