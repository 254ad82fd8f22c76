"""Libraries' INFO logging held back while the package runs them."""

import contextlib
import logging

__all__ = ["warnings_only"]


@contextlib.contextmanager
def warnings_only(*names: str):
    """The loggers ``names`` at WARNING or above for the duration (their own levels restored after): their
    INFO messages name nothing the package's output does not, and reach stderr whenever the root logger is at
    INFO or below (fairseq's imports set it to DEBUG). Warnings and errors pass."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(max(logger.getEffectiveLevel(), logging.WARNING))
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
