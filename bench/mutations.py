"""The mutations of the fuzz campaigns (:mod:`fuzz`, :mod:`fuzz_commands`): byte-level damage in
the style of Wireshark's ``editcap -E`` (bit flips, overwrites with interesting values,
truncation, records duplicated, swapped or deleted, length fields corrupted, chunks inserted,
deleted or copied), gzip with a damaged stream, and JSON values replaced, deleted or nested
deeply. Every choice comes from the ``random.Random`` passed in.
"""

from __future__ import annotations

import json
import math
import random

import fuzz_targets
from fuzz_targets import Target

INTERESTING = (0, 1, 7, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)


def compress(data: bytes, rng: random.Random) -> bytes:
    """gzip ``data``; sometimes cut or damage the compressed stream too."""
    import gzip

    packed = gzip.compress(data, compresslevel=1, mtime=0)
    roll = rng.random()
    if roll < 0.1:
        return packed[: rng.randrange(len(packed) + 1)]
    if roll < 0.2:
        position = rng.randrange(len(packed))
        return packed[:position] + bytes([packed[position] ^ (1 << rng.randrange(8))]) + packed[position + 1:]
    if roll < 0.25:
        return packed + packed[: rng.randrange(40)]  # a second member, or trailing garbage
    return packed


def _records(data: bytes, boundaries: list[int]) -> list[tuple[int, int]]:
    edges = sorted({b for b in boundaries if 0 <= b <= len(data)})
    return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]


def mutate(data: bytes, rng: random.Random, target: Target) -> bytes:
    """One mutation of ``data`` (see the module docstring)."""
    operator = rng.choice(MUTATORS)
    return operator(data, rng, target)


def _flip(data, rng, target):
    if not data:
        return bytes([rng.randrange(256)])
    position = rng.randrange(len(data))
    return data[:position] + bytes([data[position] ^ (1 << rng.randrange(8))]) + data[position + 1:]


def _overwrite(data, rng, target):
    if not data:
        return data
    position = rng.randrange(len(data))
    width = rng.choice((1, 1, 2, 4, 8))
    chunk = bytes(rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256))) for _ in range(width))
    return data[:position] + chunk + data[position + width:]


def _truncate(data, rng, target):
    return data[: rng.randrange(len(data) + 1)]


def _truncate_at_boundary(data, rng, target):
    edges = [b for b in target.boundaries(data) if b <= len(data)]
    if not edges:
        return _truncate(data, rng, target)
    edge = rng.choice(edges)
    return data[: max(0, edge + rng.choice((0, 0, 0, -1, 1, 4, 9, 16)))]


def _duplicate_record(data, rng, target):
    records = _records(data, target.boundaries(data))
    if not records:
        return _insert(data, rng, target)
    start, end = rng.choice(records)
    where = rng.choice([e for _, e in records])
    return data[:where] + data[start:end] + data[where:]


def _swap_records(data, rng, target):
    records = _records(data, target.boundaries(data))
    if len(records) < 2:
        return _delete(data, rng, target)
    i = rng.randrange(len(records) - 1)
    (a, b), (c, d) = records[i], records[i + 1]
    return data[:a] + data[c:d] + data[a:b] + data[d:]


def _delete_record(data, rng, target):
    records = _records(data, target.boundaries(data))
    if not records:
        return _delete(data, rng, target)
    start, end = rng.choice(records)
    return data[:start] + data[end:]


def _corrupt_length(data, rng, target):
    edges = target.boundaries(data)
    if not edges or not target.length_fields:
        return _overwrite(data, rng, target)
    edge = rng.choice(edges)
    offset, width, order = rng.choice(target.length_fields)
    position = edge + offset
    if position + width > len(data):
        return _overwrite(data, rng, target)
    old = int.from_bytes(data[position: position + width], "big" if order == ">" else "little")
    limit = (1 << (8 * width)) - 1
    value = rng.choice(INTERESTING + (old + 1, old - 1, old * 2, old // 2, rng.randrange(limit + 1))) & limit
    return data[:position] + value.to_bytes(width, "big" if order == ">" else "little") + data[position + width:]


def _insert(data, rng, target):
    position = rng.randrange(len(data) + 1)
    chunk = bytes(rng.randrange(256) for _ in range(rng.choice((1, 2, 4, 16, 64))))
    return data[:position] + chunk + data[position:]


def _delete(data, rng, target):
    if not data:
        return data
    start = rng.randrange(len(data))
    return data[:start] + data[start + rng.choice((1, 2, 4, 16, 256)):]


def _copy_chunk(data, rng, target):
    if len(data) < 2:
        return data
    start = rng.randrange(len(data))
    chunk = data[start: start + rng.choice((4, 16, 64, 512))]
    where = rng.randrange(len(data) + 1)
    return data[:where] + chunk + data[where:]


MUTATORS = (_flip, _flip, _overwrite, _overwrite, _truncate, _truncate_at_boundary, _duplicate_record,
            _swap_records, _delete_record, _corrupt_length, _corrupt_length, _insert, _delete, _copy_chunk)

JSON_VALUES = (None, True, False, 0, -1, 1, 2 ** 64, 10 ** 400, 1e308, -1e308, math.nan, math.inf, "", "x",
               "1e999", [], {}, [1, 2], {"a": None})


def mutate_json(data: bytes, rng: random.Random) -> bytes:
    """Replace or delete one value of a JSON document, or bury it in deep nesting."""
    document = fuzz_targets.json_seed(data)
    if document is None:
        return data
    paths = []
    _json_paths(document, (), paths, rng)
    if not paths:
        return data
    path = rng.choice(paths)
    roll = rng.random()
    if roll < 0.1:  # deep nesting, written as text (json.dumps would recurse)
        marker = "\x00nest\x00"
        depth = rng.choice((100, 5_000, 200_000))
        inner = json.dumps(_get(document, path), allow_nan=True)
        text = json.dumps(_replaced(document, path, marker), allow_nan=True)
        return text.replace(json.dumps(marker), "[" * depth + inner + "]" * depth, 1).encode()
    value = _DELETE if roll < 0.2 else rng.choice(JSON_VALUES)
    return json.dumps(_replaced(document, path, value), allow_nan=True).encode()


_DELETE = object()


def _json_paths(value, path, out, rng, limit=4000):
    if len(out) >= limit:
        return
    out.append(path)
    if isinstance(value, dict):
        for key, item in value.items():
            _json_paths(item, path + (key,), out, rng, limit)
    elif isinstance(value, list):
        for index, item in enumerate(value[:50]):
            _json_paths(item, path + (index,), out, rng, limit)


def _get(value, path):
    for key in path:
        value = value[key]
    return value


def _replaced(value, path, new):
    if not path:
        return None if new is _DELETE else new
    key, rest = path[0], path[1:]
    if isinstance(value, dict):
        copy = dict(value)
        if not rest and new is _DELETE:
            copy.pop(key, None)
        else:
            copy[key] = _replaced(value[key], rest, new)
        return copy
    copy = list(value)
    if not rest and new is _DELETE:
        del copy[key]
    else:
        copy[key] = _replaced(value[key], rest, new)
    return copy
