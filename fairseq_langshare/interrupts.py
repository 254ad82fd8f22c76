"""Ctrl-C that Python would drop.

A ``KeyboardInterrupt`` raised while a finalizer or a callback runs (a DataLoader shutting its workers
down, an import lock's weakref callback: both seen during in-process fairseq-generate) is printed as
"Exception ignored in ..." and lost, and the command goes on to write its results and exit 0.
``interrupts_kept`` remembers every SIGINT so that the interrupt is raised again where it is safe.
"""

import contextlib
import signal
import threading

__all__ = ["interrupts_kept"]


@contextlib.contextmanager
def interrupts_kept():
    """Yield ``stop_if_interrupted()``, which raises ``KeyboardInterrupt`` if Ctrl-C was pressed since the block
    began (even if that interrupt was swallowed); the end of the block calls it too. Outside the main thread, or
    where SIGINT is ignored, Python's own handling is left alone."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous == signal.SIG_IGN:
        yield lambda: None
        return
    seen = []

    def handler(signum, frame):
        seen.append(signum)
        if callable(previous):
            previous(signum, frame)  # Python's default handler raises KeyboardInterrupt
        raise KeyboardInterrupt

    def stop_if_interrupted():
        if seen:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield stop_if_interrupted
    finally:
        signal.signal(signal.SIGINT, previous)
    stop_if_interrupted()
