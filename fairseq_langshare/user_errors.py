"""The plugin's errors as one line at the command line.

Bad input gets one line that names the problem and the fix. ``langshare`` prints it itself (``cli.main``).
In fairseq's console scripts (``fairseq-train``, ``-generate``, ``-interactive``, ...) the plugin's errors
travel through fairseq's code, so importing the package there (``--user-dir``) installs a ``sys.excepthook``
that prints an uncaught error *raised by the plugin* the way argparse reports a bad option,
``fairseq-train: error: <message>``, instead of a traceback (exit status 1, as before). Nothing of fairseq is
patched: fairseq's own errors keep their traceback, and so does every error outside a fairseq console script
(tests, notebooks, library use). ``LANGSHARE_TRACEBACK=1`` keeps the traceback everywhere. Under
``fairseq-hydra-train`` the plugin sets ``HYDRA_FULL_ERROR=1`` (unless set), so that hydra raises a job's error
to the hook instead of printing it with a traceback itself; fairseq's own errors then show hydra's frames too.
There, an option of the plugin's task, criterion or model config that does not exist or does not take the
value given (omegaconf's ``ConfigKeyError``, ``ValidationError``) is the user's too: one line naming the key.

An error is the plugin's when its class is defined in the package, or when the package's code raised it with a
``raise`` statement (a deliberate refusal, not a bug surfacing from a call), or when such an error is what a
wrapper re-raised (fairseq's trainer turns any failed ``load_state_dict`` into "please ensure that the
architectures match").
"""

import dis
import os
import sys
from typing import Optional

__all__ = ["fairseq_cli", "option_text", "plugin_error", "error_line", "refuse_at_start", "install"]

PACKAGE = __name__.rsplit(".", 1)[0]
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# what a deliberate refusal raises; NotImplementedError (a RuntimeError) marks a bug, not bad input
_REFUSALS = (ValueError, LookupError, OSError, RuntimeError)


def fairseq_cli() -> Optional[str]:
    """The fairseq console script this process runs (``fairseq-train``, ...), or None."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if name.startswith("fairseq-"):
        return name
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)  # python -m fairseq_cli.train
    if spec is not None and spec.name.startswith("fairseq_cli."):
        return "fairseq-" + spec.name.split(".")[1].replace("_", "-")
    return None


_NO_VALUE = object()
_NODE_NAMES = (("arch", "model"), ("criterion", "criterion"))  # hydra's config names these nodes' ``_name``


def option_text(name: str, group: Optional[str] = None, value=_NO_VALUE) -> str:
    """Option ``name`` (of config group ``group``: model, task, optimization, checkpoint, ...) as the user
    writes it: ``--max-update 30`` (a switch alone: ``--lsl-search``) on fairseq-train's command line,
    ``optimization.max_update=30`` under fairseq-hydra-train; without a group, always the flag."""
    if group is not None and fairseq_cli() == "fairseq-hydra-train":
        key = f"{group}.{'_name' if (name, group) in _NODE_NAMES else name}"
        if value is _NO_VALUE:
            return key
        return f"{key}={'null' if value is None else str(value).lower() if isinstance(value, bool) else value}"
    flag = "--" + name.replace("_", "-")
    return flag if value is _NO_VALUE or value is True else f"{flag} {value}"


def _raised_here(error: BaseException) -> bool:
    """Whether the innermost frame is the package's and stopped at a ``raise`` statement."""
    tb = error.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    if not os.path.abspath(code.co_filename).startswith(PACKAGE_DIR + os.sep):
        return False
    return any(i.offset == tb.tb_lasti and i.opname == "RAISE_VARARGS" for i in dis.get_instructions(code))


def _is_plugins(error: BaseException) -> bool:
    module = type(error).__module__
    if (module == PACKAGE or module.startswith(PACKAGE + ".")) and isinstance(error, Exception):
        return True
    return (isinstance(error, _REFUSALS) and not isinstance(error, NotImplementedError)
            and _raised_here(error))


def plugin_error(error: BaseException) -> Optional[BaseException]:
    """The plugin's error that ``error`` is or wraps (its cause or context), or None."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if _is_plugins(error):
            return error
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    return None


def message(error: BaseException) -> str:
    """The one-line message of an exception (a KeyError's is its argument, not its repr)."""
    text = error.args[0] if isinstance(error, KeyError) and error.args else error
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def error_line(error: BaseException, prog: str) -> Optional[str]:
    """``PROG: error: MESSAGE`` for the plugin's error in ``error``, or for a mistyped option of one of its
    configs under fairseq-hydra-train; None leaves the traceback to Python."""
    found = plugin_error(error)
    if found is None:
        said = _config_error(error) if prog == "fairseq-hydra-train" else None
        return None if said is None else f"{prog}: error: {said}"
    return f"{prog}: error: {message(found)}"


def _config_error(error: BaseException) -> Optional[str]:
    """What omegaconf's error says of a key (a ConfigKeyError: no such option) or a value (a ValidationError:
    not of the option's type) of the plugin's task, criterion or model config, with the override that names it
    (``task.KEY``); None for any other error."""
    from omegaconf.errors import ConfigKeyError, ValidationError

    if not isinstance(error, (ConfigKeyError, ValidationError)):
        return None
    config = getattr(error, "object_type", None)
    module = getattr(config, "__module__", "")
    if not (module == PACKAGE or module.startswith(PACKAGE + ".")):
        return None  # fairseq's own configs keep hydra's report
    from fairseq.criterions import CRITERION_DATACLASS_REGISTRY
    from fairseq.models import MODEL_DATACLASS_REGISTRY
    from fairseq.tasks import TASK_DATACLASS_REGISTRY

    group = next((name for name, registry in (("task", TASK_DATACLASS_REGISTRY), ("criterion",
                  CRITERION_DATACLASS_REGISTRY), ("model", MODEL_DATACLASS_REGISTRY))
                  if any(config is c for c in registry.values())), None)
    key = getattr(error, "full_key", None) or getattr(error, "key", None)
    if group is None or not key:
        return None
    said = message(getattr(error, "msg", None) or error)
    if isinstance(error, ConfigKeyError):
        return f"{group}.{key}: no such option of the {group} ({said}): check the key's spelling"
    return f"{group}.{key}: {said}: check the value's type"


def refuse_at_start(error: Exception) -> None:
    """Raise ``error``, found while the package is imported (before ``install`` can act): in the ``langshare``
    command and fairseq's console scripts as one line ``PROG: error: MESSAGE`` and exit status 1."""
    prog = fairseq_cli() or ("langshare" if sys.argv and os.path.basename(sys.argv[0]) == "langshare" else None)
    if prog is None or os.environ.get("LANGSHARE_TRACEBACK"):
        raise error
    sys.stdout.flush()
    print(f"{prog}: error: {message(error)}", file=sys.stderr)
    raise SystemExit(1)


def install() -> None:
    """In a fairseq console script, print the plugin's uncaught errors as one line (see the module doc)."""
    prog = fairseq_cli()
    if prog is None or os.environ.get("LANGSHARE_TRACEBACK") or getattr(sys.excepthook, "_langshare", False):
        return
    if prog == "fairseq-hydra-train":  # hydra prints a job's error with its traceback unless told to raise it
        os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    previous = sys.excepthook

    def excepthook(exc_type, error, tb):
        line = error_line(error, prog) if isinstance(error, Exception) else None
        if line is None:
            return previous(exc_type, error, tb)
        sys.stdout.flush()
        print(line, file=sys.stderr)

    excepthook._langshare = True
    sys.excepthook = excepthook
