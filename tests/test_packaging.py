"""What pip sees (ranges, no pins, one fairseq distribution per Python version), the Python floor
of the package code, and a quiet ``langshare`` command.

The metadata tests read the installed metadata of ``fairseq_langshare``: ``make test``
re-installs the checkout whenever setup.py, requirements.txt or constraints.txt change."""

import ast
import re
import importlib.metadata as metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
FAIRSEQ_PROVIDERS = ("fairseq", "ve-fairseq")


def requirements():
    return [Requirement(r) for r in metadata.requires("fairseq_langshare")]


def applies(req, python, extra=""):
    env = {**default_environment(), "python_version": python, "python_full_version": f"{python}.0", "extra": extra}
    return req.marker is None or req.marker.evaluate(env)


def test_requirements_are_ranges_without_exact_pins():
    reqs = requirements()
    assert not [str(r) for r in reqs if any(s.operator in ("==", "===") for s in r.specifier)]
    (torch,) = [r for r in reqs if r.name == "torch"]
    assert torch.specifier and {s.operator for s in torch.specifier} == {">="}  # an installed CUDA torch is kept
    assert any(r.name.lower() == "tensorboardx" for r in reqs if applies(r, "3.11"))  # fairseq's tensorboard writer


@pytest.mark.parametrize("python,provider", [("3.8", "fairseq"), ("3.10", "fairseq"), ("3.11", "ve-fairseq"),
                                             ("3.12", "ve-fairseq")])
def test_exactly_one_fairseq_distribution_per_python_version(python, provider):
    """fairseq 0.12.2 on 3.8-3.10 (a source checkout satisfies it and is kept); its 3.11+ rebuild
    ve-fairseq installs the same `fairseq` package, so never both."""
    assert {r.name for r in requirements() if r.name in FAIRSEQ_PROVIDERS and applies(r, python)} == {provider}
    (req,) = [r for r in requirements() if r.name == provider]
    assert req.specifier.contains("0.12.3") and not req.specifier.contains("0.12.1")


def test_python_floor_and_the_deploy_extra():
    assert metadata.metadata("fairseq_langshare")["Requires-Python"] == ">=3.8"
    deploy = [r for r in requirements() if r.marker is not None and not applies(r, "3.11") and applies(r, "3.11", "deploy")]
    assert [(r.name, str(r.specifier)) for r in deploy] == [("ctranslate2", ">=4")]


@pytest.mark.parametrize("python,expected", [("3.8", []), ("3.9", []), ("3.10", [("py3langid", "<0.5,>=0.4")]),
                                             ("3.12", [("py3langid", "<0.5,>=0.4")])])
def test_the_langid_extra(python, expected):
    """The off-target rate's identifier: py3langid 0.4 (its model in the wheel) needs Python 3.10; on
    3.8/3.9 the extra installs nothing and evaluate says why there is no rate."""
    langid = [r for r in requirements() if r.marker is not None and not applies(r, python)
              and applies(r, python, "langid")]
    assert [(r.name, str(r.specifier)) for r in langid] == expected


@pytest.mark.parametrize("version,refused", [("1.13.1+cu117", True), ("2.3.1", True), ("2.4.0", False),
                                              ("2.4.1+cu121", False), ("2.10.0", False), ("2.5.0a0+git1a2b3c4", False)])
def test_the_torch_floor(version, refused):
    """torch 2.4 (weights-only loading with an allow-list); 2.10 is not older than 2.4."""
    from fairseq_langshare.torch_version import TorchTooOldError, require_torch

    if refused:
        with pytest.raises(TorchTooOldError, match=rf"needs torch >= 2\.4, this environment has torch {re.escape(version)}"):
            require_torch(version)
    else:
        require_torch(version)
    assert any(str(s) == ">=2.4" for r in requirements() if r.name == "torch" for s in r.specifier)


# fairseq installed from a source checkout compiles its modules at first import, and one of them
# (tasks/multires_hubert_pretraining.py) has an `is not` with a literal: a SyntaxWarning of fairseq's own, once
SOURCE_FAIRSEQ_WARNINGS = "ignore::SyntaxWarning"


def _refused_at_import(code):
    """stderr's lines of ``python -c code`` in a fresh process, which must exit with status 1."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": SOURCE_FAIRSEQ_WARNINGS}
    env.pop("LANGSHARE_TRACEBACK", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 1, done.stderr
    return done.stderr.strip().splitlines()


@pytest.mark.parametrize("prog", ["langshare", "/env/bin/fairseq-train", "python"])
def test_an_older_torch_is_one_line_at_import(prog):
    """What a user with torch 1.13 sees on importing the plugin: in the langshare command and in fairseq's
    console scripts (--user-dir) one line and exit status 1, not a TypeError deep inside an export; in library
    use an ImportError."""
    lines = _refused_at_import(f"import sys, torch; torch.__version__ = '1.13.1+cu117'; sys.argv = [{prog!r}]; "
                               "import fairseq_langshare")
    if prog == "python":
        assert lines[-1].startswith("fairseq_langshare.torch_version.TorchTooOldError: fairseq_langshare needs torch")
        return
    name = os.path.basename(prog)
    assert lines == [f"{name}: error: fairseq_langshare needs torch >= 2.4, this environment has torch 1.13.1+cu117 "
                     "(older releases cannot load fairseq checkpoints weights-only): pip install 'torch>=2.4' (for a "
                     "GPU, the CUDA build for your driver, as pytorch.org's selector gives it)"], lines


# methods 3.9 added, which a 3.8 parse accepts: str's, random.Random.randbytes, pathlib's (os.readlink is 3.8's)
NEWER_THAN_3_8 = ("removeprefix", "removesuffix", "randbytes", "readlink", "is_relative_to", "with_stem")


def _newer_than_3_8(tree):
    """Line numbers of what Python 3.8 parses but cannot run: a method 3.9 added, a dict merged with ``|``
    (one side a dict display: ``{...} | {...}``, ``x |= {...}``)."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in NEWER_THAN_3_8
                and not (isinstance(node.value, ast.Name) and node.value.id == "os")):
            yield node.lineno, f".{node.attr}"
        dicts = (ast.Dict, ast.DictComp)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr) and (
                isinstance(node.left, dicts) or isinstance(node.right, dicts)):
            yield node.lineno, "a dict merged with |"
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.BitOr) and isinstance(node.value, dicts):
            yield node.lineno, "a dict merged with |="


def test_code_parses_and_runs_as_python_3_8():
    """Users run Python 3.8-3.10: no newer syntax (match, parenthesised context managers, ...) in the package,
    its tests and benchmarks, and nothing 3.8 parses but cannot run (a dict merged with ``|``:
    ``analysis.adaptive_sparse`` had one; ``Random.randbytes`` and ``Path.readlink`` in the tests)."""
    for folder in ("fairseq_langshare", "tests", "benchmarks"):
        for path in sorted((REPO / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=(3, 8))
            found = list(_newer_than_3_8(tree))
            assert not found, f"{path}:{found[0][0]}: {found[0][1]} needs Python 3.9"


def test_langshare_help_prints_only_the_help():
    """No "Please install tensorboardX" (fairseq's text_to_speech task logs it at import) nor other noise."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": SOURCE_FAIRSEQ_WARNINGS}
    proc = subprocess.run([sys.executable, "-c", "from fairseq_langshare.cli import main; main(['--help'])"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: langshare") and proc.stderr == ""


@pytest.mark.parametrize("prog", ["fairseq-train", "python"])
def test_pypis_fairseq_0_12_2_is_one_line_at_import(prog):
    """PyPI's fairseq 0.12.2 (its encoder layer converts weights for BetterTransformer on load): was 81 models that
    could not be built, every LSL and multi-stack forward failing and fairseq-generate stopping on padded batches
    (Python 3.9, fairseq 0.12.2, torch 2.4.1; docs/foundation.md). Now refused at import with what to install."""
    lines = _refused_at_import(
        "import sys; from fairseq.modules.transformer_layer import TransformerEncoderLayerBase as L; "
        "L._load_from_state_dict = lambda self, *a: None; "  # what PyPI's 0.12.2 defines on the class
        f"sys.argv = [{prog!r}]; import fairseq_langshare")
    message = ("fairseq_langshare cannot run on PyPI's fairseq 0.12.2, whose encoder layers take a BetterTransformer "
               "path the plugin's layers do not have (it also breaks fairseq-generate under torch 2, fairseq issue "
               "#4858): install fairseq from source, pip install 'fairseq @ git+https://github.com/facebookresearch/"
               "fairseq.git' (on Python 3.11: pip install ve-fairseq==0.12.3)")
    if prog == "python":
        assert lines[-1] == f"fairseq_langshare.fairseq_build.UnsupportedFairseqError: {message}"
    else:
        assert lines == [f"fairseq-train: error: {message}"], lines
