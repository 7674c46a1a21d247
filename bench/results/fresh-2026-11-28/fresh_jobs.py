"""A job written for this fresh lab run only, outside tfsim's zoo and lab models:
``deep_narrow``, a deep, narrow MLP (32 hidden layers of 128 units on a 256-wide synthetic
input, batch 256): 66 variables of at most 128 KB, about 2.2 MB each way per step. It asks
what the models were not designed on: many small tensors per step (per-tensor RPC and parsing
overheads), a chain of small matmuls on the worker.

Used with ``PYTHONPATH=bench/results/fresh-2026-11-28`` and ``model_fn = "fresh_jobs:deep_narrow"``
(the ``--model-fn`` contract: ``f(options) -> (loss, batch_size)``, ``tf.compat.v1`` ops on
synthetic input, called inside ``replica_device_setter``).
"""

from __future__ import annotations

import tensorflow as tf

tf1 = tf.compat.v1

INPUT_WIDTH = 256
HIDDEN_LAYERS = 32
HIDDEN_UNITS = 128
CLASSES = 10


def deep_narrow(options):
    batch = int(options.batch_size or 256)
    x = tf1.random.uniform([batch, INPUT_WIDTH], name="synthetic_features")
    width = INPUT_WIDTH
    for k in range(HIDDEN_LAYERS):
        with tf1.variable_scope(f"layer{k}"):
            w = tf1.get_variable("weights", [width, HIDDEN_UNITS], initializer=tf1.glorot_uniform_initializer())
            b = tf1.get_variable("biases", [HIDDEN_UNITS], initializer=tf1.zeros_initializer())
            x = tf.nn.relu(tf.matmul(x, w) + b)
            width = HIDDEN_UNITS
    with tf1.variable_scope("logits"):
        w = tf1.get_variable("weights", [width, CLASSES], initializer=tf1.glorot_uniform_initializer())
        b = tf1.get_variable("biases", [CLASSES], initializer=tf1.zeros_initializer())
        logits = tf.matmul(x, w) + b
    labels = tf1.random.uniform([batch], maxval=CLASSES, dtype=tf.int32, name="synthetic_labels")
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)), batch
