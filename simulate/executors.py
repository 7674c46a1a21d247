"""Where a sweep's configurations run: this machine's worker processes, or a Dask cluster.

A sweep is many independent simulations (:mod:`simulate.sweep`); each is deterministic for its
seed, so where it runs does not change its row. :class:`LocalExecutor` runs them in this
machine's :class:`~simulate.workers.WorkerPool`; :class:`DaskExecutor` hands them to the
scheduler of a running Dask ``distributed`` cluster (``dask://HOST:PORT``), whose workers need
tfsim and its dependencies installed (the ``dask`` extra: ``pip install 'tfsim[dask]'``).
Any object with the same two methods, ``map`` and ``check`` (:class:`Executor`), can be given
instead: ``bench/executor_compare.py`` runs sweeps on Ray through one. docs/architecture.md says
why the CLI offers Dask rather than Ray.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from tfbase.errors import UsageError

DASK_SCHEME = "dask://"
CONNECT_TIMEOUT_S = 10.0  # a scheduler that does not answer within this is unreachable


@dataclasses.dataclass(frozen=True)
class LocalExecutor:
    """This machine's worker processes (:class:`~simulate.workers.WorkerPool`), ``jobs`` at a time."""

    def check(self) -> None:
        """Nothing to check: this machine is here."""

    def map(self, fn: Callable, shared, items: Sequence, *, jobs: int, on_result: Callable | None = None) -> list:
        """``[fn(shared, item) for item in items]``, computed in worker processes;
        ``on_result(index, result)`` is called in this process as each one arrives."""
        from simulate.workers import WorkerPool

        with WorkerPool(min(jobs, len(items)), shared=shared) as pool:
            return pool.map(fn, list(items), on_result=on_result)


@dataclasses.dataclass(frozen=True)
class DaskExecutor:
    """The scheduler of a Dask ``distributed`` cluster at ``address`` (``tcp://HOST:PORT``).

    The shared inputs (the profile, the cluster, the options) are sent to the workers once; each
    configuration is one task. A stop (Ctrl-C, SIGTERM) or an error cancels the tasks not done.
    """

    address: str

    def map(self, fn: Callable, shared, items: Sequence, *, jobs: int = 1, on_result: Callable | None = None) -> list:
        """``[fn(shared, item) for item in items]``, computed by the cluster's workers (``jobs``
        is the cluster's business: its workers and threads); ``on_result(index, result)`` is
        called in this process as each one arrives."""
        client = self._connect()
        futures = []
        try:
            remote = client.scatter(shared, broadcast=True)
            futures = [client.submit(fn, remote, item, pure=False) for item in items]
            if on_result is not None:
                from distributed import as_completed

                index = {future.key: position for position, future in enumerate(futures)}
                for future in as_completed(futures):
                    on_result(index[future.key], future.result())
            return client.gather(futures)
        finally:
            if futures:
                client.cancel(futures)
            client.close()

    def check(self) -> None:
        """Connect to the scheduler and leave, so that an unreachable one fails before a sweep
        starts (:class:`~tfbase.errors.UsageError` naming ``executor``)."""
        self._connect().close()

    def _connect(self):
        try:
            from distributed import Client
        except ImportError:
            raise UsageError("executor", "a Dask executor needs dask's distributed package: "
                                         "pip install 'tfsim[dask]'") from None
        try:
            return Client(self.address, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            raise UsageError("executor", f"cannot reach the Dask scheduler at {self.address}: "
                                         f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None


@runtime_checkable
class Executor(Protocol):
    """What a sweep needs of the place its configurations run.

    ``map(fn, shared, items, jobs=..., on_result=...)`` returns ``[fn(shared, item) for item in
    items]`` in order, calling ``on_result(index, result)`` in the caller's process as each
    result arrives; ``check()`` raises :class:`~tfbase.errors.UsageError` naming ``executor``
    when the place cannot be reached. ``fn`` and its arguments are picklable.
    """

    def map(self, fn: Callable, shared, items: Sequence, *, jobs: int, on_result: Callable | None = None) -> list:
        ...

    def check(self) -> None:
        ...


def parse_executor(text: str | Executor | None) -> Executor:
    """``None`` or ``"local"``: this machine; ``"dask://HOST:PORT"``: a Dask scheduler; an
    executor (any :class:`Executor`) is returned as it is.

    Examples
    --------
    >>> parse_executor("dask://10.0.0.5:8786")
    DaskExecutor(address='tcp://10.0.0.5:8786')
    >>> parse_executor(None)
    LocalExecutor()
    """
    if isinstance(text, Executor):
        return text
    if text is None or text == "local":
        return LocalExecutor()
    if not isinstance(text, str):
        raise UsageError("executor", f"give local or dask://HOST:PORT, not a {type(text).__name__}")
    text = text.strip()
    if not text.startswith(DASK_SCHEME):
        raise UsageError("executor", f"{text!r}: give local or dask://HOST:PORT")
    host, colon, port = text[len(DASK_SCHEME):].rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 2 ** 16:
        raise UsageError("executor", f"{text!r}: give the scheduler as dask://HOST:PORT")
    return DaskExecutor(f"tcp://{host}:{int(port)}")
