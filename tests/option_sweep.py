"""Every numeric option of ``langshare`` and of the plugin's fairseq options, tried outside its range.

    python tests/option_sweep.py [--only WORD ...] [--markdown]

Runs, in this process and up to the point where the command would start its work:

* every ``langshare`` subcommand (and ``analyze``/``recipe`` action) with each of its numeric options set just
  outside the range it declares (``option_ranges.Range`` as its argparse type), or to -1 where it declares none;
* ``fairseq-train`` with each option of the plugin's task, criterion and models (one tiny preset per registered
  model) outside the range declared in its dataclass field, and with each declared contradiction
  (``only_with``); ``fairseq-generate`` and ``fairseq-interactive`` with each task option outside its range.

A command that accepts the value is stopped where its work would begin (fairseq's ``Trainer`` is built, a
checkpoint is loaded, a corpus is read); nothing is trained, decoded or written outside a temporary directory.
Each row is what the command answered: its exit status and the last line it printed (the error line), or the
exception of a traceback. The verdict ``ok`` means: exit status not 0, one line, naming the option (or, for a
contradiction, both options), no traceback. Prints a markdown table; exit status 1 if any row is not ``ok``.
"""

import argparse
import contextlib
import dataclasses
import io
import logging
import os
import sys
import tempfile
import typing
from pathlib import Path
from typing import List, NamedTuple, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tiny_corpus, when run as a script

from tiny_corpus import PKG_DIR, make_corpus, task_args  # noqa: E402

TRAIN = ["--criterion", "langshare_label_smoothed_cross_entropy", "--optimizer", "adam", "--lr", "0.005",
         "--max-tokens", "1000", "--cpu", "--num-workers", "0", "--disable-validation", "--max-update", "10"]
ARCHS = ("langshare_transformer_tiny", "clsr_transformer_tiny", "latent_depth_transformer_tiny",
         "adaptive_sparse_transformer_tiny", "lsl_transformer_tiny", "langshare_adapter_transformer_tiny",
         "langshare_multistack_transformer_tiny")
# positional arguments of the langshare subcommands: values that reach the option checks
POSITIONALS = {"checkpoint": "model.pt", "corpus": "corpus", "results": "a.json", "model_dir": "export",
               "runs": "gates.json", "checkpoints": "model.pt", "paper": "lsl", "experiment": "x",
               "direction": "o2m", "methods": None, "save_dir": None}
# langshare subcommands whose at-start checks run after parsing (in their function): run them, with the
# step that starts their work replaced by a stop (module, attribute)
RUN_AFTER_PARSE = {"prepare-gettext": [("fairseq_langshare.data.gettext_corpus", "_resolve_languages"),
                                       ("fairseq_langshare.data.gettext_corpus", "list_languages")]}


class Started(Exception):
    """The command passed its start-up checks and would now do its work."""


class Row(NamedTuple):
    command: str
    option: str
    value: str
    declared: str  # the declared range, or "none"
    status: str  # exit status, "accepted" or "traceback"
    answer: str  # the last line printed, or the exception
    ok: bool


def _stop(*args, **kwargs):
    raise Started()


@contextlib.contextmanager
def _patched(pairs):
    import importlib

    saved = []
    try:
        for module_name, attribute in pairs:
            module = importlib.import_module(module_name)
            saved.append((module, attribute, getattr(module, attribute)))
            setattr(module, attribute, _stop)
        yield
    finally:
        for module, attribute, value in reversed(saved):
            setattr(module, attribute, value)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _verdict(status, answer, *flags) -> bool:
    return status not in ("0", "accepted", "traceback") and "\n" not in answer and all(f in answer for f in flags)


# ----------------------------------------------------------------------------- langshare
def _subparsers(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return {}


def _commands(parser, path=()):
    """(path, parser) of every leaf command under ``parser``."""
    children = _subparsers(parser)
    if not children:
        yield path, parser
        return
    seen = set()
    for name, child in children.items():
        if id(child) not in seen:  # aliases
            seen.add(id(child))
            yield from _commands(child, path + (name,))


def _positionals(parser, tmp) -> List[str]:
    argv = []
    for action in parser._actions:
        if action.option_strings or isinstance(action, argparse._SubParsersAction):
            continue
        if action.nargs in ("?", "*") or POSITIONALS.get(action.dest, "") is None:
            continue
        value = POSITIONALS.get(action.dest, "x")
        argv.append(action.choices[0] if action.choices else str(Path(tmp) / value) if "." in value or
                    action.dest in ("corpus", "model_dir") else value)
    return argv


def _required_options(parser, tmp, skip) -> List[str]:
    argv = []
    for action in parser._actions:
        if action.option_strings and action.required and action.dest != skip:
            argv += [action.option_strings[-1], str(Path(tmp) / "out") if action.dest == "out" else "en"]
    return argv


def langshare_cases(tmp):
    """(command, option, value, declared range, argv, stops) of every numeric option of every subcommand."""
    from fairseq_langshare import cli

    for path, parser in _commands(cli.build_parser()):
        for action in parser._actions:
            kind = getattr(action.type, "kind", action.type)
            if not action.option_strings or kind not in (int, float):
                continue
            declared = getattr(action.type, "range", None)
            values = [declared.outside(kind) if declared is not None else -1]
            values += [""] if getattr(action.type, "is_list", False) else []
            option = max(action.option_strings, key=len)
            for value in (v for v in values if v is not None):
                argv = list(path) + _positionals(parser, tmp) + _required_options(parser, tmp, action.dest) + [
                    f"{option}={value}"]
                if path[0] == "prepare-gettext":
                    argv += ["--locale-dir", str(Path(tmp) / "locale"), "--out", str(Path(tmp) / "gettext")]
                yield ("langshare " + " ".join(path), option, str(value), declared.text if declared else "none",
                       argv, RUN_AFTER_PARSE.get(path[0], []))


def _langshare(argv, stops):
    """(exit status, last line of stderr) of ``langshare ARGV`` in process, stopped where its work begins."""
    from fairseq_langshare import cli

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            if stops:
                with _patched(stops):
                    code = cli.main(argv)
            else:
                cli.build_parser().parse_args(argv)  # parse only: what parsing accepts would start the work
                return "accepted", "parsed; the command would run"
        except SystemExit as exit_:
            code = exit_.code
        except Started:
            return "accepted", "the command would run"
        except Exception as error:  # noqa: BLE001 - what the sweep is for
            return "traceback", f"{type(error).__name__}: {error}".splitlines()[0]
    return str(code), _last_line(err.getvalue())


# ----------------------------------------------------------------------------- fairseq entry points
def _kind(field) -> Optional[type]:
    kind = field.type
    if typing.get_origin(kind) is typing.Union:
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        kind = args[0] if len(args) == 1 else None
    return kind if kind in (int, float) else None


def plugin_fields(config_class, inherited=()):
    """The fields of ``config_class`` the plugin declares (not those of ``inherited`` classes), numeric ones."""
    base = {f.name for cls in inherited for f in dataclasses.fields(cls)}
    for field in dataclasses.fields(config_class):
        if isinstance(field.default, str) and field.default.startswith("${"):
            continue  # fairseq's own option, read by the plugin (--seed, --max-update)
        if field.name not in base and (_kind(field) is not None or "only_with" in field.metadata):
            yield field


def fairseq_cases():
    """(entry point, [argv change], option, value, declared range, names in the answer) of every case."""
    from fairseq.criterions import CRITERION_DATACLASS_REGISTRY
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.models.transformer import TransformerConfig

    from fairseq_langshare.option_ranges import flag
    from fairseq_langshare.tasks.multilingual_langshare import MultilingualLangshareConfig

    criterion = CRITERION_DATACLASS_REGISTRY["langshare_label_smoothed_cross_entropy"]
    groups = [("task", MultilingualLangshareConfig, (), ("train", "generate", "interactive")),
              ("criterion", criterion, (), ("train",))]
    for arch in ARCHS:
        groups.append((arch, ARCH_MODEL_REGISTRY[arch].config_class, (TransformerConfig,), ("train",)))
    for owner, config_class, inherited, entries in groups:
        for field in plugin_fields(config_class, inherited):
            arch = owner if owner.endswith("_tiny") else ARCHS[0]
            declared = field.metadata.get("range")
            kind = _kind(field)
            if kind is not None:
                value = declared.outside(kind) if declared is not None else -1
                if value is not None:
                    for entry in entries:
                        yield entry, arch, [flag(field.name), str(value)], flag(field.name), str(value), \
                            declared.text if declared else "none", (flag(field.name),)
            rule = field.metadata.get("only_with")
            if rule is not None:
                other = next(f for f in dataclasses.fields(config_class) if f.name == rule.other)
                against = next(c.value for c in other.type if c.value not in rule.values)  # a ChoiceEnum
                value = field.default + 1 if kind is int else field.default + 0.5 if kind is float else "x"
                yield "train", arch, [flag(field.name), str(value), flag(rule.other), str(against)], \
                    f"{flag(field.name)} with {flag(rule.other)} {against}", str(value), \
                    f"only with {flag(rule.other)} {' or '.join(rule.values)}", (flag(field.name), flag(rule.other))


def _run_fairseq(entry, argv):
    """(exit status, answer) of fairseq-ENTRY ARGV in process, stopped before it trains or loads a checkpoint."""
    from fairseq import options
    from fairseq_cli import generate, interactive, train

    from fairseq_langshare.user_errors import error_line

    prog = f"fairseq-{entry}"
    stops = {"train": [("fairseq_cli.train", "Trainer")],
             "generate": [("fairseq.checkpoint_utils", "load_model_ensemble")],
             "interactive": [("fairseq.checkpoint_utils", "load_model_ensemble")]}[entry]
    err, saved_argv = io.StringIO(), sys.argv
    sys.argv = [prog] + argv
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), _patched(stops):
            parser = {"train": options.get_training_parser, "generate": options.get_generation_parser,
                      "interactive": options.get_interactive_generation_parser}[entry]()
            args = options.parse_args_and_arch(parser, argv)
            if entry == "train":
                from fairseq.dataclass.utils import convert_namespace_to_omegaconf

                train.main(convert_namespace_to_omegaconf(args))
            else:
                (generate if entry == "generate" else interactive).main(args)
    except SystemExit as exit_:
        return str(exit_.code), _last_line(err.getvalue())
    except Started:
        return "accepted", "started its work"
    except Exception as error:  # noqa: BLE001
        line = error_line(error, prog)
        if line is None:
            return "traceback", f"{type(error).__name__}: {error}".splitlines()[0]
        return "1", line
    finally:
        sys.argv = saved_argv
    return "0", "finished"


def fairseq_argv(corpus, tmp, entry, arch, change):
    argv = task_args(corpus)
    if entry == "train":
        return argv + TRAIN + ["--arch", arch, "--save-dir", str(Path(tmp) / "ckpt")] + change
    argv += ["--path", str(Path(tmp) / "model.pt"), "-s", "en", "-t", "xx", "--cpu"] + change
    return argv + (["--gen-subset", "test"] if entry == "generate" else [])


def _task_and_criterion_flags():
    from fairseq.criterions import CRITERION_DATACLASS_REGISTRY

    from fairseq_langshare.option_ranges import flag
    from fairseq_langshare.tasks.multilingual_langshare import MultilingualLangshareConfig

    classes = (MultilingualLangshareConfig, CRITERION_DATACLASS_REGISTRY["langshare_label_smoothed_cross_entropy"])
    return {flag(f.name) for cls in classes for f in dataclasses.fields(cls)}


# ----------------------------------------------------------------------------- the table
def sweep(corpus=None, only=()) -> List[Row]:
    """Every case (with ``only``: those whose command starts with, or whose option contains, one of its words)."""
    def wanted(command, option):
        return not only or any(command.startswith(w) or w in option for w in only)

    rows = []
    logging.disable(logging.WARNING)  # fairseq's INFO/WARNING chatter; answers are read from the exceptions
    try:
        with tempfile.TemporaryDirectory(prefix="option-sweep-") as tmp:
            (Path(tmp) / "locale").mkdir()
            for command, option, value, declared, argv, stops in langshare_cases(tmp):
                if wanted(command, option):
                    status, answer = _langshare(argv, stops)
                    rows.append(Row(command, option, value, declared, status, answer,
                                    _verdict(status, answer, option)))
            task_flags = _task_and_criterion_flags()
            for entry, arch, change, option, value, declared, names in fairseq_cases():
                command = f"fairseq-{entry}" + (f" --arch {arch}" if entry == "train" and names[0] not in task_flags
                                                else "")
                if not wanted(command, option):
                    continue
                if corpus is None:
                    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                        corpus = make_corpus(Path(tmp) / "corpus")
                status, answer = _run_fairseq(entry, fairseq_argv(corpus, tmp, entry, arch, change))
                rows.append(Row(command, option, value, declared, status, answer, _verdict(status, answer, *names)))
    finally:
        logging.disable(logging.NOTSET)
    return rows


def markdown(rows: List[Row]) -> str:
    def cell(text):
        return text.replace("|", "\\|")

    lines = ["| command | option | value | declared range | exit | answer | ok |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.command} | `{r.option}` | {cell(r.value)} | {cell(r.declared)} | {r.status} | "
                     f"{cell(r.answer)} | {'yes' if r.ok else '**no**'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=(),
                        help="rows whose command starts with, or whose option contains, one of these")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    rows = sweep(only=args.only)
    print(markdown(rows), end="")
    bad = [r for r in rows if not r.ok]
    print(f"\n{len(rows)} cases, {len(rows) - len(bad)} refused in one line naming the option, {len(bad)} not",
          file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
