"""Every relative link in README.md and docs/ resolves, and every file of the repository the docs
name (``scripts/x.sh``, ``benchmarks/y.py``, ``experiments/z.py``, ``python -m benchmarks.run``,
...) exists: a moved or removed file fails here, not in a reader's shell.

A named path is a word starting with one of the repository's top-level folders (``PREFIXES``),
read from the whole text, code blocks included, outside markdown links (those are links, relative
to their page). Placeholders are resolved as patterns that must match at least one file:
``<corpus>``, ``*`` and upper-case words such as ``NAME`` match any name; ``{a,b}`` is expanded.
A path at a commit, ``<commit>:scripts/x.sh`` (what ``git show`` takes: a script as it was when a
figure was measured), must exist in that commit. What commands write (``runs/``, ``demo_run/``, ``OUTPUTS``) is not
the repository's and is not checked.
"""

import glob
import os
import re
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIXES = ("scripts", "benchmarks", "experiments", "configs", "fairseq_langshare", "tests", "docs")
MODULE_PREFIXES = ("benchmarks", "fairseq_langshare")

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M)
PATH = re.compile(r"(?<![\w./<{:-])((?:%s)/[\w./<>{},*-]*[\w>}*])" % "|".join(PREFIXES))
AT_COMMIT = re.compile(r"(?<![\w./-])([0-9a-f]{7,40}):((?:%s)/[\w./-]*\w)" % "|".join(PREFIXES))
MODULE = re.compile(r"python3? -m ((?:%s)(?:\.\w+)+)" % "|".join(MODULE_PREFIXES))
# written by the commands the docs show, not part of the repository
OUTPUTS = ("benchmarks/.cache",  # the benchmark corpora, built on a benchmark's first run
           "docs/results/head_to_head")  # where the head-to-head of record writes (--record-dir)
PLACEHOLDER = re.compile(r"<[^>/]*>|\b[A-Z][A-Z0-9_]{2,}\b|\b[A-Z]\b")


def _written_by_commands(path):
    """Whether ``path`` is one of ``OUTPUTS`` or inside one (not a file that merely starts like one)."""
    return any(path == out or path.startswith(out + "/") for out in OUTPUTS)


def documents(root=REPO):
    """README.md and every .md under docs/, relative to ``root``."""
    found = ["README.md"] if os.path.isfile(os.path.join(root, "README.md")) else []
    found += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "**", "*.md"),
                                                                recursive=True))
    return found


def _expand_braces(text):
    match = re.search(r"\{([^{}]*)\}", text)
    if not match:
        return [text]
    return [x for alt in match.group(1).split(",") for x in _expand_braces(text[:match.start()] + alt
                                                                            + text[match.end():])]


def _exists(root, path):
    """Whether ``path`` (relative to ``root``, placeholders allowed) names at least one file or folder."""
    for candidate in _expand_braces(path):
        pattern = PLACEHOLDER.sub("*", candidate)
        if "*" in pattern:
            if not glob.glob(os.path.join(root, pattern)):
                return False
        elif not os.path.exists(os.path.join(root, candidate)):
            return False
    return True


def broken_links(root, doc):
    """The relative links of ``doc`` whose target does not exist."""
    with open(os.path.join(root, doc), encoding="utf-8") as f:
        text = f.read()
    broken = []
    for target in LINK.findall(text) + REFERENCE_LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (https:, mailto:) or an anchor in the same page
        path = target.split("#")[0]
        if not os.path.exists(os.path.normpath(os.path.join(root, os.path.dirname(doc), path))):
            broken.append(target)
    return broken


def _in_git(root, refs):
    """The ``<commit>:<path>`` of ``refs`` that git does not have; None outside a git checkout."""
    if not refs:
        return []
    try:
        out = subprocess.run(["git", "-C", root, "cat-file", "--batch-check"], input="\n".join(refs) + "\n",
                             capture_output=True, text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return None
    return [ref for ref, line in zip(refs, out) if line.endswith(" missing")]


def missing_paths(root, doc):
    """The repository paths, ``<commit>:<path>`` and ``python -m`` modules ``doc`` names that do
    not exist (paths at a commit are not checked outside a git checkout)."""
    with open(os.path.join(root, doc), encoding="utf-8") as f:
        text = f.read()
    refs = sorted({f"{commit}:{path}" for commit, path in AT_COMMIT.findall(text)})
    missing = _in_git(root, refs) or []
    text = LINK.sub(" ", text)  # links are checked as links
    for path in sorted(set(PATH.findall(text))):
        path = path.rstrip(".")
        if not _written_by_commands(path) and not _exists(root, path):
            missing.append(path)
    for module in sorted(set(MODULE.findall(text))):
        as_path = module.replace(".", "/")
        if not (os.path.isfile(os.path.join(root, as_path + ".py"))
                or os.path.isfile(os.path.join(root, as_path, "__main__.py"))):
            missing.append(f"python -m {module}")
    return missing


def problems(root=REPO):
    """[(doc, "link" or "path", what it names)] over every document."""
    found = []
    for doc in documents(root):
        links = broken_links(root, doc)
        found += [(doc, "link", target) for target in links]
        found += [(doc, "path", path) for path in missing_paths(root, doc) if path not in links]
    return found


def test_every_doc_link_and_named_path_resolves():
    found = problems()
    assert not found, "\n".join(f"{doc}: {kind} {target} does not exist" for doc, kind, target in found)


# ----------------------------------------------------------------------------- the checker itself
def test_the_checker_finds_broken_links_and_missing_paths(tmp_path):
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    (tmp_path / "scripts" / "recipes").mkdir(parents=True)
    (tmp_path / "benchmarks").mkdir()
    for rel in ("scripts/demo.sh", "scripts/recipes/data_wmt14.sh", "benchmarks/run.py", "docs/img.png"):
        (tmp_path / rel).write_text("")
    (tmp_path / "README.md").write_text(
        "[ok](docs/a.md) [ok with anchor](docs/a.md#x) [web](https://example.org/y) [gone](docs/gone.md)\n"
        "Run `bash scripts/demo.sh`, then scripts/recipes/data_<corpus>.sh or `scripts/recipes/data_{wmt14,ted8}.sh`,\n"
        "`python -m benchmarks.run`, `python -m benchmarks.gone`; writes benchmarks/results/NAME.json.\n")
    (tmp_path / "docs" / "a.md").write_text("# A\n![img](img.png) [up](../README.md) [self](#a) and scripts/gone.py.\n")
    (tmp_path / "docs" / "sub" / "b.md").write_text("[a](../a.md) [wrong level](a.md)\n[ref]: ../img.png\n")
    assert documents(str(tmp_path)) == ["README.md", "docs/a.md", "docs/sub/b.md"]
    assert sorted(problems(str(tmp_path))) == [
        ("README.md", "link", "docs/gone.md"),
        ("README.md", "path", "benchmarks/results/NAME.json"),  # no results/ folder: matches nothing
        ("README.md", "path", "python -m benchmarks.gone"),
        ("README.md", "path", "scripts/recipes/data_{wmt14,ted8}.sh"),  # data_ted8.sh is missing
        ("docs/a.md", "path", "scripts/gone.py"),
        ("docs/sub/b.md", "link", "a.md"),
    ]


def test_paths_at_a_commit_are_looked_up_in_git(tmp_path):
    """A script named as ``<commit>:scripts/x.sh`` is checked in that commit, not in the working
    tree; a link's target is a link relative to its page, not a path from the repository root."""
    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              check=True, capture_output=True, text=True).stdout.strip()

    (tmp_path / "scripts").mkdir()
    (tmp_path / "docs" / "experiments").mkdir(parents=True)
    (tmp_path / "scripts" / "old.sh").write_text("")
    (tmp_path / "docs" / "experiments" / "run.md").write_text("")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "x")
    commit = git("rev-parse", "--short=10", "HEAD")
    (tmp_path / "scripts" / "old.sh").unlink()
    (tmp_path / "docs" / "page.md").write_text(
        f"Ran `bash {commit}:scripts/old.sh` and `{commit}:scripts/never.sh`; "
        "[experiments/run.md](experiments/run.md).\n")
    assert problems(str(tmp_path)) == [("docs/page.md", "path", f"{commit}:scripts/never.sh")]


def test_only_what_commands_write_is_exempt(tmp_path):
    """The record folder the head-to-head writes is exempt; a committed file whose name merely
    starts like it (the results JSON beside it) is checked like any other."""
    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / "docs" / "results" / "head_to_head.json").write_text("{}")
    (tmp_path / "README.md").write_text(
        "Records in docs/results/head_to_head/ (docs/results/head_to_head/o2m/lsl/seed1.json.gz), reported in "
        "docs/results/head_to_head.json and docs/results/head_to_head_old.json.\n")
    assert problems(str(tmp_path)) == [("README.md", "path", "docs/results/head_to_head_old.json")]
