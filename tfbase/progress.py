"""Progress bars on stderr (tqdm), without tqdm's monitor thread."""

from __future__ import annotations


def progress_bar(**kwargs):
    """A ``tqdm`` progress bar (keyword arguments as tqdm's), with tqdm's monitor thread off.

    tqdm starts a daemon thread, its monitor, with its first bar, and the thread is still alive
    when a command that a signal stopped exits with the bar open. A daemon thread that wakes while
    the interpreter finalizes can abort it (SIGABRT instead of the signal's exit status: CPython's
    finalization race with daemon threads, python/cpython issues 84058 and 124878), and the
    monitor only thins out the updates of bars that are slow to redraw, which these are not.

    Examples
    --------
    >>> import io
    >>> bar = progress_bar(total=2, file=io.StringIO())
    >>> bar.update(2)
    >>> bar.n
    2
    >>> bar.close()
    """
    from tqdm import tqdm

    tqdm.monitor_interval = 0
    return tqdm(**kwargs)
