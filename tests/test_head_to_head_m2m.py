"""The head-to-head's many-to-many set (``--directions m2m``): every model's M2M flags at the
baseline's inference cost, its corpus (both directions and zero-shot test sets) and its evaluation
on the supervised and the zero-shot directions."""

import io
import json
import os

import pytest

from fairseq_langshare.analysis.inference_cost import cost_signature
from fairseq_langshare.recipes import head_to_head, head_to_head_runs
from fairseq_langshare.recipes.head_to_head_models import DIRECTIONS, MODELS
from fairseq_langshare.recipes.head_to_head_runs import Corpus, _standin_data, equal_cost_problems, evaluate_argv, plan
from test_head_to_head import SMALL_COST, _corpus_files

M2M_PAIRS = ["en-xx", "en-yy", "xx-en", "yy-en"]


@pytest.fixture(scope="module")
def m2m_corpus(tmp_path_factory, one_thread):
    from tiny_corpus import make_corpus

    base = make_corpus(tmp_path_factory.mktemp("m2m-data"), n_train=20, n_test=4)
    root = tmp_path_factory.mktemp("m2m")
    os.symlink(base["bin"], root / "bin")
    (root / "manifest.json").write_text(json.dumps({"zero_shot_pairs": ["xx-yy", "yy-xx"]}))
    return _corpus_files(root, M2M_PAIRS)


def test_every_model_has_m2m_flags_at_the_baselines_cost(m2m_corpus, tmp_path):
    assert DIRECTIONS == ("o2m", "m2o", "m2m")
    runs = plan([m.name for m in MODELS], ["m2m"], [1, 2, 3], str(tmp_path), {"m2m": m2m_corpus}, 2000)
    assert len(runs) == 3 * len(MODELS) and {r.seed for r in runs} == {1, 2, 3}
    out = io.StringIO()
    todo, measured = head_to_head.print_plan(runs, 2, out)  # what --dry-run prints and checks
    profiles = measured["m2m"]
    for name, prof in profiles.items():
        assert set(prof["inference"]) == set(M2M_PAIRS)
        for pair, p in prof["inference"].items():
            assert cost_signature(p) == SMALL_COST, (name, pair, p)
    assert equal_cost_problems(profiles) == []
    # both sides language-specific where a method has a side: each sentence's source and target pick
    base = profiles["baseline"]["parameters"]["total"]
    assert profiles["lsl"]["parameters"]["total"] > base
    text = out.getvalue()
    assert "--lsl-encoder-layers 'SRC={1} & TGT={2}'" in text
    assert "--clsr-encoder-lang src --clsr-decoder-lang tgt --clsr-budget 0.3" in text
    assert "--decoder-ffn-embed-dim 1024 --sparse-decoder-keep-blocks 4" in text
    for m in MODELS:  # the reason for the M2M flags is printed with them
        if m.name not in ("baseline", "baseline_prenorm"):
            assert f"# {m.name}: " in text and "M2M: " in m.reason_for("m2m"), m.name
            assert "M2M" not in m.reason_for("o2m")
    assert f"{3 * len(MODELS)} runs to do" in text


def test_standin_dictionary_has_both_directions(tmp_path):
    corpus = _standin_data(str(tmp_path), "m2m")
    pairs = corpus.lang_pairs.split(",")
    assert len(pairs) == 16 and "en-l1" in pairs and "l1-en" in pairs


def test_m2m_runs_are_evaluated_on_the_zero_shot_directions_too(m2m_corpus, tmp_path, corpus):
    (run,) = plan(["baseline"], ["m2m"], [1], str(tmp_path), {"m2m": m2m_corpus}, 10)
    argv = evaluate_argv(run)
    assert argv[argv.index("--directions") + 1] == "en-xx,en-yy,xx-en,yy-en,xx-yy,yy-xx"
    o2m = tmp_path / "o2m"
    o2m.mkdir()
    os.symlink(corpus["bin"], o2m / "bin")
    (o2m_run,) = plan(["baseline"], ["o2m"], [1], str(tmp_path), {"o2m": _corpus_files(o2m, ["en-xx"])}, 10)
    assert "--directions" not in evaluate_argv(o2m_run)  # its trained directions, evaluate's default


def test_m2m_corpus_is_built_with_both_directions_and_zero_shot_sets(tmp_path, monkeypatch):
    from fairseq_langshare.data import gettext_corpus

    calls = []
    monkeypatch.setattr(gettext_corpus, "prepare_gettext", lambda path, **kw: calls.append((path, kw)))
    Corpus(str(tmp_path / "m2m"), "m2m").prepare()
    Corpus(str(tmp_path / "o2m"), "o2m").prepare()
    (_, m2m), (_, o2m) = calls
    assert m2m == dict(head_to_head_runs.CORPUS_FLAGS, direction="both", zero_shot_spec="all")
    assert o2m == dict(head_to_head_runs.CORPUS_FLAGS, direction="o2m")
    assert head_to_head_runs.DEFAULT_CORPORA["m2m"] == "demo_run/corpus_m2m"
