"""Building the records made by the thousand per capture, without a frozen dataclass's ``__init__``.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__`` (the class's
own ``__setattr__`` refuses), looked up and called once per field: on
:class:`~netcapture.http2.Http2Frame`, 17 fields, that cost as much as decoding an intact
control frame. :func:`positional_maker` returns a function that builds the same object
(equal, hashing, printing and pickling alike) from every field, in order, by setting the
class's slots directly (or, for a class without slots, filling the instance's ``__dict__`` in
one call). It serves dataclasses with no ``__post_init__`` and only init fields;
:func:`positional_maker` refuses any other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

_RESERVED = frozenset({"record"})  # the name the made function uses itself


def positional_maker(cls: type) -> Callable[..., object]:
    """A function ``make(field_1, ..., field_n)`` equivalent to ``cls(field_1, ..., field_n)`` for a
    frozen dataclass (every field given, in declaration order, positionally).

    Raises :class:`TypeError` for a class it cannot build that way.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__, which a maker would skip")
    fields = dataclasses.fields(cls)
    names = [field.name for field in fields]
    if any(not field.init for field in fields) or any(name.startswith("_") or name in _RESERVED for name in names):
        raise TypeError(f"{cls.__name__} has fields a maker cannot set by name")
    namespace = {"_new": object.__new__, "_cls": cls}
    if "__slots__" in cls.__dict__:
        namespace.update({f"_set_{name}": getattr(cls, name).__set__ for name in names})
        body = "".join(f"    _set_{name}(record, {name})\n" for name in names)
    else:  # the fields in declaration order, as __init__ would have added them
        body = f"    record.__dict__.update({{{', '.join(f'{name!r}: {name}' for name in names)}}})\n"
    source = f"def make_{cls.__name__}({', '.join(names)}):\n    record = _new(_cls)\n{body}    return record\n"
    exec(source, namespace)  # as dataclasses makes __init__: one straight-line function per class
    maker = namespace[f"make_{cls.__name__}"]
    maker.__doc__ = f"{cls.__name__}(*fields), built slot by slot (netcapture.records)."
    return maker
