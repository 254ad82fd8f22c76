"""Ctrl-C that Python would drop, or print as a traceback.

A ``KeyboardInterrupt`` raised while a finalizer or a callback runs (a DataLoader shutting its workers
down, an import lock's weakref callback: both seen during in-process fairseq-generate) is printed as
"Exception ignored in ..." and lost, and the command goes on to write its results and exit 0.
``interrupts_kept`` remembers every SIGINT so that the interrupt is raised again where it is safe.

``interrupted_while_starting``: the ``langshare`` command spends its first seconds importing torch and
fairseq, before ``cli.main`` (which reports an interrupt in one line) runs; a Ctrl-C there is one line too.
"""

import contextlib
import os
import signal
import sys
import threading

__all__ = ["interrupts_kept", "interrupted_while_starting"]


@contextlib.contextmanager
def interrupted_while_starting():
    """In the ``langshare`` console script, a Ctrl-C inside the block (the package's imports) ends the process
    with one line and exit status 130; anywhere else (``import fairseq_langshare`` in a script, fairseq's CLIs)
    the interrupt propagates as usual."""
    try:
        yield
    except KeyboardInterrupt:
        if not sys.argv or os.path.basename(sys.argv[0]) != "langshare":
            raise
        command = "langshare" + (f" {sys.argv[1]}" if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "")
        print(f"{command}: interrupted (Ctrl-C) while starting; nothing was done", file=sys.stderr)
        raise SystemExit(130) from None


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
