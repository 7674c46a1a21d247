"""Public names of a package bound on first use.

A package whose public functions live in submodules that import heavy libraries (numba,
pandas, the capture decoders) keeps ``import package`` light by binding those names on first
access. The names must differ from every submodule's name: importing a submodule binds it as
an attribute of the package, which would shadow a function of the same name.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_attributes(package: str, public: Mapping[str, str]) -> tuple[Callable, Callable]:
    """``__getattr__`` and ``__dir__`` for ``package``, whose ``public`` maps each public name to
    the submodule that defines it.

    Examples
    --------
    In a package's ``__init__.py``::

        __getattr__, __dir__ = lazy_attributes(__name__, {"predict": "simulate.sweep"})
    """
    clashes = [name for name, module in public.items() if module.rsplit(".", 1)[-1] == name]
    if clashes:
        raise ValueError(f"{package}: public names equal to their submodule's name: {', '.join(clashes)}")

    def __getattr__(name: str):
        module = public.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # bound once: later lookups do not come here
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(public))

    return __getattr__, __dir__
