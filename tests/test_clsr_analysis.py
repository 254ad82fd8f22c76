"""``langshare analyze clsr`` and ``clsr-lsscore`` on what a researcher comparing variants feeds them:
fixed-gate variants (Top-Bottom, Dedicated), an exported pair, runs of other variants or splits."""

import json

import pytest

from fairseq_langshare.cli import main
from fairseq_langshare.export import export_pair
from test_end_to_end import TRAIN
from tiny_corpus import task_args, train


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    yield


def train_clsr(corpus, save, *flags):
    args = [a for a in TRAIN]
    args[args.index("langshare_transformer_tiny")] = "clsr_transformer_tiny"
    train(task_args(corpus) + args + ["--clsr-encoder-lang", "tgt", "--max-update", "1", "--disable-validation",
                                      "--save-dir", str(save), *flags])
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def dedicated(corpus, tmp_path_factory):
    return train_clsr(corpus, tmp_path_factory.mktemp("dedicated"), "--clsr-variant", "dedicated",
                      "--clsr-dedicated", "enc1.ffn,dec2.cross_attn")


def one_line_error(capsys):
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def test_fixed_gates_are_reported_as_fixed(corpus, dedicated, tmp_path, capsys):
    """Was: "p=0.3 open-gate rate 0.000" and a gates.json with no sub-layer for Top-Bottom and Dedicated
    (folded inference runs no gate for a fixed unit, so none was recorded), with the unused default
    budget. Every gate of a Top-Bottom model of 2+2 layers is fixed open; Dedicated opens its list."""
    top_bottom = train_clsr(corpus, tmp_path / "tb", "--clsr-variant", "top-bottom")
    for ckpt, variant, open_units in ((top_bottom, "top-bottom", None), (dedicated, "dedicated",
                                                                          {"enc1.ffn", "dec2.cross_attn"})):
        out = tmp_path / variant
        assert main(["analyze", "clsr", str(ckpt), "--data", str(corpus["bin"]), "--out", str(out)]) == 0
        printed = capsys.readouterr().out
        stats = json.loads((out / "gates.json").read_text())
        assert stats["variant"] == variant and stats["fixed_gates"] is True and stats["budget"] is None
        assert len(stats["sublayers"]) == 2 * 2 + 2 * 3
        expected = {n: 1.0 if open_units is None or n in open_units else 0.0 for n in stats["sublayers"]}
        assert stats["mean_gate"] == expected
        assert all(stats["mean_gate_per_language"][n] == {lang: expected[n] for lang in ("xx", "yy")}
                   for n in expected)
        assert stats["open_rate"] == pytest.approx(sum(expected.values()) / len(expected))
        assert "p=" not in printed and f"fixed gates (--clsr-variant {variant})" in printed, printed
        # LSScore measures learned gates against their budget: a fixed-gate run is refused, alone or first
        assert main(["analyze", "clsr-lsscore", str(out / "gates.json"), "--out", str(tmp_path / "ls")]) == 2
        err = one_line_error(capsys)
        assert f"{out / 'gates.json'} is the gates.json of a fixed-gate run (--clsr-variant {variant})" in err, err
        assert "pass the gates.json of --clsr-variant clsr or gate runs" in err, err
    assert not (tmp_path / "ls").exists()


def gates_file(path, budget, variant="clsr", split="valid", **fields):
    names = ["enc1.ffn", "dec1.ffn"]
    run = {"budget": budget, "variant": variant, "split": split, "arch": "clsr_transformer_tiny", "sublayers": names,
           "mean_gate": {n: budget for n in names}, "mean_gate_per_language": {n: {"xx": budget} for n in names},
           **fields}
    path.write_text(json.dumps(run))
    return str(path)


def test_lsscore_refuses_runs_it_cannot_compare(tmp_path, capsys):
    """Was: a gates.json that an earlier `analyze clsr` wrote for a fixed-gate run (budget 0.3, no sub-layer)
    gave an IndexError traceback alone or first, else "got budgets [0.3, 0.3]"; runs of --clsr-variant gate
    and clsr, or measured on test and valid, were averaged silently."""
    out = tmp_path / "out"
    clsr = gates_file(tmp_path / "clsr.json", 0.3)
    old_fixed = gates_file(tmp_path / "tb.json", 0.3, variant="top-bottom", sublayers=[], mean_gate={},
                           mean_gate_per_language={}, open_rate=0.0)
    cases = [([old_fixed], f"{old_fixed} is the gates.json of a fixed-gate run (--clsr-variant top-bottom)"),
             ([old_fixed, clsr], f"{old_fixed} is the gates.json of a fixed-gate run (--clsr-variant top-bottom)"),
             ([clsr, old_fixed], f"{old_fixed} is the gates.json of a fixed-gate run (--clsr-variant top-bottom)"),
             ([clsr, gates_file(tmp_path / "gate.json", 0.6, variant="gate")],
              f"runs of different --clsr-variant (clsr: {clsr}; gate: {tmp_path / 'gate.json'}): LSScore compares "
              "the budgets of one variant; pass the gates.json of runs with the same --clsr-variant"),
             ([clsr, gates_file(tmp_path / "test.json", 0.6, split="test")],
              f"runs measured on different splits (valid: {clsr}; test: {tmp_path / 'test.json'}): pass gates.json "
              "files that `langshare analyze clsr --split` measured on one split"),
             ([clsr, gates_file(tmp_path / "none.json", 0.6, sublayers=[])],
              f"{tmp_path / 'none.json'} records no CLSR sub-layer")]
    for runs, said in cases:
        assert main(["analyze", "clsr-lsscore", *runs, "--out", str(out)]) == 2
        err = one_line_error(capsys)
        assert said in err, err
    assert not out.exists()
    assert main(["analyze", "clsr-lsscore", clsr, gates_file(tmp_path / "p6.json", 0.6), "--out", str(out)]) == 0



def test_an_exported_pair_is_refused_in_one_line(corpus, dedicated, tmp_path, capsys):
    """Was: `AssertionError: Could not infer task type from {...}` (the exported config, several KB on one line)."""
    pair = tmp_path / "en-xx.pt"
    export_pair(dedicated, "en", "xx", pair, verbose=False)
    capsys.readouterr()
    assert main(["analyze", "clsr", str(pair), "--out", str(tmp_path / "a")]) == 2
    err = one_line_error(capsys)
    assert err == (f"langshare analyze clsr: error: {pair} has no CLSR units: it is a `langshare export` of the pair "
                   f"en->xx (a plain transformer); analyze the checkpoint it was exported from, {dedicated}"), err
    assert not (tmp_path / "a").exists()
