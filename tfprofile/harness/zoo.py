"""Built-in models, written in raw TF1 ops (``get_variable``, ``nn.conv2d``, ``matmul``).

The architectures follow the TensorFlow CNN benchmarks (``tf_cnn_benchmarks``), so that
a profile here has the layer structure, parameter count and transfer pattern of the
models the papers measured:

========== ================================= =======================
name       architecture                      default image size
========== ================================= =======================
tiny       2 conv + 2 fc, for fast tests     32
alexnet    5 conv + 3 fc (227 px input)      227
vgg11      VGG configuration A               224
resnet50   ResNet-50 v1, bottleneck blocks   224
inception3 Inception-v3 (no auxiliary head)  299
wide_mlp   5 dense layers: one 16 MiB, three (no images)
           4 MiB, one 200 KB weight tensor
========== ================================= =======================

``wide_mlp`` puts several 4-16 MiB tensors in flight at once, the case where gRPC's HTTP/2
flow control shapes the transfers; it exists to calibrate transfer models.

Differences from tf_cnn_benchmarks, on purpose: no dropout (randomness that changes no
transfer), and batch normalisation without moving averages (they are not trained
parameters and add no gradient traffic). Batch norm keeps its trainable offset and scale.

A user's own model follows the same contract as the functions here (see
:class:`ModelOptions` and :func:`build_model`): it is called inside the replica device
setter and returns ``(loss, batch_size)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import tensorflow as tf

tf1 = tf.compat.v1


@dataclasses.dataclass(frozen=True)
class ModelOptions:
    """What a model function receives.

    ``image_size`` of 0 means the model's default. ``num_classes`` of 0 likewise.
    ``zero_init`` initialises every weight to zero: the same ops, sizes and timings (kernels
    do not depend on values), but packet captures of the run compress a thousandfold.
    """

    batch_size: int
    image_size: int = 0
    num_classes: int = 0
    zero_init: bool = False


DEFAULT_IMAGE_SIZE = {"tiny": 32, "alexnet": 227, "vgg11": 224, "resnet50": 224, "inception3": 299, "wide_mlp": 32}
DEFAULT_CLASSES = {"tiny": 10, "alexnet": 1000, "vgg11": 1000, "resnet50": 1000, "inception3": 1000,
                   "wide_mlp": 10}
MIN_IMAGE_SIZE = {"tiny": 8, "alexnet": 67, "vgg11": 32, "resnet50": 32, "inception3": 75, "wide_mlp": 1}


class _Layers:
    """Small helper that names variables layer by layer, like the benchmarks' ConvNetBuilder."""

    def __init__(self, zero_init: bool = False) -> None:
        self._counts: dict[str, int] = {}
        self._zero = zero_init

    def _init(self, initializer):
        return tf1.zeros_initializer() if self._zero else initializer

    def _scope(self, kind: str) -> str:
        n = self._counts.get(kind, 0)
        self._counts[kind] = n + 1
        return f"{kind}{n}"

    def conv(self, x, filters, k, stride=1, padding="SAME", relu=True, bn=False, kw=None):
        kh, kw = k, (k if kw is None else kw)
        with tf1.variable_scope(self._scope("conv")):
            w = tf1.get_variable(
                "weights", [kh, kw, int(x.shape[-1]), filters],
                initializer=self._init(tf1.variance_scaling_initializer()),
            )
            y = tf.nn.conv2d(x, w, strides=[1, stride, stride, 1], padding=padding)
            if bn:
                y = self._batch_norm(y)
            else:
                b = tf1.get_variable("biases", [filters], initializer=self._init(tf1.zeros_initializer()))
                y = tf.nn.bias_add(y, b)
        return tf.nn.relu(y) if relu else y

    def _batch_norm(self, x):
        channels = int(x.shape[-1])
        gamma = tf1.get_variable("gamma", [channels], initializer=self._init(tf1.ones_initializer()))
        beta = tf1.get_variable("beta", [channels], initializer=tf1.zeros_initializer())
        y, _, _ = tf1.nn.fused_batch_norm(x, gamma, beta, epsilon=1e-3, is_training=True)
        return y

    def fc(self, x, units, relu=True):
        with tf1.variable_scope(self._scope("affine")):
            w = tf1.get_variable("weights", [int(x.shape[-1]), units],
                                 initializer=self._init(tf1.variance_scaling_initializer()))
            b = tf1.get_variable("biases", [units], initializer=tf1.zeros_initializer())
            y = tf.nn.bias_add(tf.matmul(x, w), b)
        return tf.nn.relu(y) if relu else y

    @staticmethod
    def max_pool(x, k, stride, padding="VALID"):
        return tf.nn.max_pool2d(x, k, stride, padding)

    @staticmethod
    def avg_pool(x, k, stride, padding="VALID"):
        return tf.nn.avg_pool2d(x, k, stride, padding)

    @staticmethod
    def flatten(x):
        return tf.reshape(x, [-1, int(x.shape[1]) * int(x.shape[2]) * int(x.shape[3])])


def _tiny(L: _Layers, x, classes):
    x = L.max_pool(L.conv(x, 16, 3), 2, 2)
    x = L.max_pool(L.conv(x, 32, 3), 2, 2)
    return L.fc(L.fc(L.flatten(x), 64), classes, relu=False)


def _alexnet(L: _Layers, x, classes):
    x = L.conv(x, 64, 11, stride=4, padding="VALID")
    x = L.max_pool(x, 3, 2)
    x = L.max_pool(L.conv(x, 192, 5), 3, 2)
    x = L.conv(L.conv(L.conv(x, 384, 3), 384, 3), 256, 3)
    x = L.max_pool(x, 3, 2)
    x = L.fc(L.fc(L.flatten(x), 4096), 4096)
    return L.fc(x, classes, relu=False)


def _vgg11(L: _Layers, x, classes):
    for filters, repeats in ((64, 1), (128, 1), (256, 2), (512, 2), (512, 2)):
        for _ in range(repeats):
            x = L.conv(x, filters, 3)
        x = L.max_pool(x, 2, 2)
    x = L.fc(L.fc(L.flatten(x), 4096), 4096)
    return L.fc(x, classes, relu=False)


def _resnet50(L: _Layers, x, classes):
    x = L.conv(x, 64, 7, stride=2, bn=True)
    x = L.max_pool(x, 3, 2, padding="SAME")
    in_filters = 64
    for stage, (depth, blocks) in enumerate(((256, 3), (512, 4), (1024, 6), (2048, 3))):
        for block in range(blocks):
            stride = 2 if (block == 0 and stage > 0) else 1
            if in_filters != depth or stride != 1:
                shortcut = L.conv(x, depth, 1, stride=stride, relu=False, bn=True)
            else:
                shortcut = x
            y = L.conv(x, depth // 4, 1, stride=stride, bn=True)
            y = L.conv(y, depth // 4, 3, bn=True)
            y = L.conv(y, depth, 1, relu=False, bn=True)
            x = tf.nn.relu(y + shortcut)
            in_filters = depth
    x = tf.reduce_mean(x, axis=[1, 2])
    return L.fc(x, classes, relu=False)


def _wide_mlp(L: _Layers, x, classes):
    x = tf.reshape(tf.reduce_mean(x, axis=[1, 2]), [-1, 3])
    x = tf.tile(x, [1, 342])[:, :1024]
    x = L.fc(x, 4096)   # 1024 x 4096 floats: 16 MiB
    x = L.fc(x, 256)    # 4 MiB
    x = L.fc(x, 4096)   # 4 MiB
    x = L.fc(x, 256)    # 4 MiB
    x = L.fc(x, 200)    # 200 KB
    return L.fc(x, classes, relu=False)


def _inception3(L: _Layers, x, classes):
    def c(inp, f, kh, kw=None, stride=1, padding="SAME"):
        return L.conv(inp, f, kh, stride=stride, padding=padding, bn=True, kw=kw)

    def concat(branches):
        return tf.concat(branches, axis=3)

    # Stem.
    x = c(x, 32, 3, stride=2, padding="VALID")
    x = c(x, 32, 3, padding="VALID")
    x = c(x, 64, 3)
    x = L.max_pool(x, 3, 2)
    x = c(x, 80, 1, padding="VALID")
    x = c(x, 192, 3, padding="VALID")
    x = L.max_pool(x, 3, 2)

    def block_a(x, pool_filters):
        b1 = c(x, 64, 1)
        b2 = c(c(x, 48, 1), 64, 5)
        b3 = c(c(c(x, 64, 1), 96, 3), 96, 3)
        b4 = c(L.avg_pool(x, 3, 1, "SAME"), pool_filters, 1)
        return concat([b1, b2, b3, b4])

    def block_b(x):
        b1 = c(x, 384, 3, stride=2, padding="VALID")
        b2 = c(c(c(x, 64, 1), 96, 3), 96, 3, stride=2, padding="VALID")
        b3 = L.max_pool(x, 3, 2)
        return concat([b1, b2, b3])

    def block_c(x, n):
        b1 = c(x, 192, 1)
        b2 = c(c(c(x, n, 1), n, 1, 7), 192, 7, 1)
        b3 = c(c(c(c(c(x, n, 1), n, 7, 1), n, 1, 7), n, 7, 1), 192, 1, 7)
        b4 = c(L.avg_pool(x, 3, 1, "SAME"), 192, 1)
        return concat([b1, b2, b3, b4])

    def block_d(x):
        b1 = c(c(x, 192, 1), 320, 3, stride=2, padding="VALID")
        b2 = c(c(c(c(x, 192, 1), 192, 1, 7), 192, 7, 1), 192, 3, stride=2, padding="VALID")
        b3 = L.max_pool(x, 3, 2)
        return concat([b1, b2, b3])

    def block_e(x):
        b1 = c(x, 320, 1)
        b2 = c(x, 384, 1)
        b2 = concat([c(b2, 384, 1, 3), c(b2, 384, 3, 1)])
        b3 = c(c(x, 448, 1), 384, 3)
        b3 = concat([c(b3, 384, 1, 3), c(b3, 384, 3, 1)])
        b4 = c(L.avg_pool(x, 3, 1, "SAME"), 192, 1)
        return concat([b1, b2, b3, b4])

    x = block_a(x, 32)
    x = block_a(x, 64)
    x = block_a(x, 64)
    x = block_b(x)
    for n in (128, 160, 160, 192):
        x = block_c(x, n)
    x = block_d(x)
    x = block_e(x)
    x = block_e(x)
    x = tf.reduce_mean(x, axis=[1, 2])
    return L.fc(x, classes, relu=False)


_ARCHITECTURES: dict[str, Callable] = {
    "tiny": _tiny,
    "alexnet": _alexnet,
    "vgg11": _vgg11,
    "resnet50": _resnet50,
    "inception3": _inception3,
    "wide_mlp": _wide_mlp,
}

MODELS = tuple(_ARCHITECTURES)


def build_model(name: str, options: ModelOptions):
    """Build a zoo model on synthetic data; return ``(loss, batch_size)``.

    Must be called inside the replica device setter: the variables land on the parameter
    servers, the rest (including the synthetic batch, drawn anew each step) on the worker.
    """
    if name not in _ARCHITECTURES:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    size = options.image_size or DEFAULT_IMAGE_SIZE[name]
    if size < MIN_IMAGE_SIZE[name]:
        raise ValueError(f"{name} needs an image size of at least {MIN_IMAGE_SIZE[name]} px, not {size}")
    classes = options.num_classes or DEFAULT_CLASSES[name]
    batch = options.batch_size
    images = tf.random.uniform([batch, size, size, 3], name="synthetic_images")
    labels = tf.random.uniform([batch], maxval=classes, dtype=tf.int32, name="synthetic_labels")
    logits = _ARCHITECTURES[name](_Layers(options.zero_init), images, classes)
    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    return tf.reduce_mean(xent, name="loss"), batch
