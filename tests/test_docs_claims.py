"""Where the documentation's quality claims stand (docs/experiments/README.md).

docs/results.md holds the current record only: the head-to-head section that `langshare head-to-head`
writes, and no dated log. Every entry of the experiment log, docs/experiments/, says when it was run,
at which commit, with what command, from which machine-readable source (or that it has none) and
whether it still stands, and its index lists it. README.md and the method pages give no test-set
BLEU or chrF figure or p-value without a committed machine-readable source (or the paper's table).
Reads files and asks git whether commits and committed files exist; nothing is trained.
"""
import re
import subprocess
from pathlib import Path

import pytest

from fairseq_langshare.recipes.head_to_head_report import END, START

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "docs" / "experiments"
ENTRIES = sorted(p for p in EXPERIMENTS.glob("*.md") if p.name != "README.md")
FIELDS = ("date", "commit", "command", "source", "status")
NO_SOURCE = "no machine-readable source"
METHOD_PAGES = ("clsr.md", "latent_depth.md", "adaptive_sparse.md", "lsl.md", "adapters.md",
                "baselines.md", "multistack.md")
ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
LINK = re.compile(r"\[[^\]]*\]\(([^)]+)\)")


def header(path):
    """The five `- **field:** value` lines under an entry's title, as a dict (in their order)."""
    lines = path.read_text().split("\n")
    assert lines[0].startswith("# "), f"{path.name}: the first line is not a '# ' title"
    found = {}
    for line in lines[1:12]:
        m = re.match(r"- \*\*(\w+):\*\* (.+)$", line)
        if m:
            found[m.group(1)] = m.group(2).strip()
    assert tuple(found) == FIELDS, f"{path.name}: header fields {tuple(found)}, expected {FIELDS}"
    return found


@pytest.fixture(scope="module")
def git():
    """`git(*args)` -> True when the command succeeds in this checkout; skips outside a git checkout."""
    def run(*args):
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True).returncode == 0
    if not run("rev-parse", "--git-dir"):
        pytest.skip("not a git checkout: the entries' commits cannot be checked")
    return run


def test_the_log_has_entries():
    assert len(ENTRIES) >= 20, [p.name for p in ENTRIES]


@pytest.mark.parametrize("path", ENTRIES, ids=[p.name for p in ENTRIES])
def test_every_entry_says_when_where_how_from_what_and_whether_it_stands(path, git):
    h = header(path)
    assert ISO_DATE.match(h["date"]), f"{path.name}: date {h['date']!r}"
    assert path.name.startswith(h["date"][:10]), f"{path.name}: the file name does not start with its date"
    commit = h["commit"].strip("`")
    assert re.fullmatch(r"[0-9a-f]{7,40}", commit) and git("cat-file", "-e", commit + "^{commit}"), \
        f"{path.name}: commit {commit!r} is not in this repository"
    assert h["command"].strip("`").strip(), f"{path.name}: no command"
    # a script is named as it was at a commit, so that the name survives moves under scripts/
    for script in re.findall(r"(?<![\w:/.])scripts/[\w./-]+", path.read_text()):
        pytest.fail(f"{path.name}: {script} without a commit (write <commit>:{script})")
    for ref in re.findall(r"\b([0-9a-f]{7,40}):(scripts/[\w./-]*\w)", path.read_text()):
        assert git("cat-file", "-e", ":".join(ref)), f"{path.name}: {':'.join(ref)} does not exist"
    if h["source"] != NO_SOURCE:
        m = re.match(r"`([0-9a-f]{7,40}):([^`]+)`", h["source"])
        assert m, f"{path.name}: source {h['source']!r} is neither `<commit>:<path>` nor {NO_SOURCE!r}"
        assert git("cat-file", "-e", f"{m.group(1)}:{m.group(2)}"), f"{path.name}: {h['source']} does not exist"
    if h["status"] != "current":
        assert h["status"].startswith("superseded by "), f"{path.name}: status {h['status']!r}"
        targets = LINK.findall(h["status"])
        assert targets, f"{path.name}: superseded by what? {h['status']!r}"
        for target in targets:
            assert (EXPERIMENTS / target).resolve().is_file(), f"{path.name}: superseded by a missing {target}"
            assert (EXPERIMENTS / target).resolve() != path.resolve(), f"{path.name}: superseded by itself"


def test_the_index_lists_every_entry_with_its_date_and_status():
    rows = {}
    for line in (EXPERIMENTS / "README.md").read_text().split("\n"):
        m = re.match(r"\| (\d{4}-\d{2}-\d{2}) \| \[[^\]]+\]\(([^)]+)\) \| (.+) \|$", line)
        if m:
            rows[m.group(2)] = (m.group(1), m.group(3))
    assert set(rows) == {p.name for p in ENTRIES}
    for path in ENTRIES:
        h = header(path)
        assert rows[path.name] == (h["date"][:10], h["status"]), path.name


def test_results_md_holds_the_record_and_no_dated_log():
    text = (ROOT / "docs" / "results.md").read_text()
    assert text.count(START) == 1 and text.count(END) == 1 and text.index(START) < text.index(END)
    outside = text[:text.index(START)] + text[text.index(END) + len(END):]
    for line in outside.split("\n"):
        assert not (line.startswith("#") and ISO_DATE.search(line)), f"a dated section outside the record: {line}"
        assert not line.lstrip().startswith("|"), f"a table outside the record: {line}"
    assert "experiments/README.md" in outside


QUALITY_FIGURE = re.compile(
    r"\bp 0\.\d|\bp = 0\.0\d*[1-9]|\bp < 0\.0[1-4]"           # a p-value (not p < 0.05, the rule's
                                                               # threshold, nor CLSR's budget p = 0.3)
    r"|[+-]\d+(?:\.\d+)?\s*(?:average\s+)?(?:BLEU|chrF)\b"    # +0.5 BLEU, -1.32 chrF
    r"|\b(?:BLEU|chrF)\s*[+-]?\d+\.\d+")                      # BLEU 13.29, chrF +0.62
SOURCE = re.compile(r"[0-9a-f]{7,40}:docs/results/\S+\.json|docs/results/head_to_head|\bTable \d+")


@pytest.mark.parametrize("name", ("README.md",) + METHOD_PAGES)
def test_no_quality_figure_without_a_committed_source(name):
    path = ROOT / name if name == "README.md" else ROOT / "docs" / name
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    for paragraph in re.split(r"\n\s*\n", text):
        figure = QUALITY_FIGURE.search(paragraph)
        if figure and not SOURCE.search(paragraph):
            pytest.fail(f"{name}: {figure.group(0)!r} without a committed machine-readable source in:\n{paragraph}")


def test_the_figure_check_catches_what_it_is_for():
    """The claims issue 42 found, as they stood, are caught; the same figure with its JSON is not."""
    assert QUALITY_FIGURE.search("ahead on chrF (+0.61 pooled, p 0.001, 3 seeds)")
    assert QUALITY_FIGURE.search("M2O Attn is ahead over 5 seeds (+1.14 average BLEU, 6 of 8 directions")
    assert QUALITY_FIGURE.search("best BLEU of the head-to-head (+0.7 pooled, not significant) and chrF +1.7 on 8")
    assert not QUALITY_FIGURE.search("`BLEU4 = 0.87`: 300 + 300 updates of a plumbing check")
    assert not QUALITY_FIGURE.search("better or worse only when the pooled test gives p < 0.05")
    assert not QUALITY_FIGURE.search("p = 0.1 and p = 0.9 drive the open-gate rate below 0.3")
    assert QUALITY_FIGURE.search("-0.82 pooled (p = 0.001)") and QUALITY_FIGURE.search("(p < 0.01)")
    assert SOURCE.search("M2O BLEU -1.32 (p 0.001; `10810341fc:docs/results/head_to_head.json`)")
