"""Training and evaluation recipes (``langshare recipe``): the committed hydra yaml is what the
definitions generate, every recipe composes into a fairseq config whose model builds, the dry run
prints the papers' real-size settings and runs nothing, checkpoint averaging is the mean, and the
recipes train a few updates with ``--tiny`` and are evaluated (zero-shot rows included) on a small
prepared corpus.

The corpora: each recipe trains on a tiny corpus of its paper's corpus, prepared by
``langshare prepare-corpus`` from a tiny mirror of the real releases' layout built in the test
(tests/recipe_mirrors.py), so the chain mirror -> data recipe -> training recipe -> evaluation runs
end to end. ``LANGSHARE_RECIPE_TEST_CORPUS=gettext`` uses one gettext corpus (en <-> fr, de, ja,
300 training pairs each, plus a fr-de zero-shot test set) instead; ``=DIR`` a prepared corpus. ``LANGSHARE_ALL_RECIPES=1`` trains every paper x experiment x
method instead of the covering set (every method of every paper, every experiment).
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tiny_corpus import PKG_DIR

from fairseq_langshare.cli import main as langshare
from fairseq_langshare.recipes import experiment_plan as ep
from fairseq_langshare.recipes import experiments, train_runner
from fairseq_langshare.recipes.average_checkpoints import average_checkpoints, last_update_checkpoints

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ALL = [(p.name, e.name, m.name) for p in ep.PAPERS.values() for e in p.experiments for m in e.methods]


# ----------------------------------------------------------------------------- the corpus
def _zero_shot_test_set(corpus: Path, src="fr", tgt="de"):
    """Pair the fr and de test references that translate the same English sentence (a real
    fr-de zero-shot test set), encode and binarize it with the corpus's own SentencePiece model
    and dictionary, and list it in the manifest as the contract says."""
    import sentencepiece as spm
    from fairseq import options
    from fairseq_cli import preprocess

    def side(lang):
        en = (corpus / "raw" / f"test.en-{lang}.en").read_text(encoding="utf-8").splitlines()
        xx = (corpus / "raw" / f"test.en-{lang}.{lang}").read_text(encoding="utf-8").splitlines()
        return dict(zip(en, xx))

    a, b = side(src), side(tgt)
    common = [e for e in a if e in b]
    assert len(common) >= 3, "the gettext test sets share too few English sentences for a zero-shot set"
    model = spm.SentencePieceProcessor(model_file=str(corpus / "spm.model"))
    work = corpus / "zero_shot_tmp"
    work.mkdir()
    for lang, table in ((src, a), (tgt, b)):
        lines = [table[e] for e in common]
        (corpus / "raw" / f"test.{src}-{tgt}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (work / f"test.{lang}").write_text("\n".join(" ".join(model.encode(l, out_type=str)) for l in lines) + "\n")
    d = str(corpus / "bin" / "dict.txt")
    preprocess.main(options.get_preprocessing_parser().parse_args(
        ["--source-lang", src, "--target-lang", tgt, "--testpref", str(work / "test"), "--destdir",
         str(corpus / "bin"), "--srcdict", d, "--tgtdict", d, "--workers", "1"]))
    manifest = json.loads((corpus / "manifest.json").read_text())
    manifest["zero_shot_pairs"] = [f"{src}-{tgt}"]
    (corpus / "manifest.json").write_text(json.dumps(manifest, indent=1))


@pytest.fixture(scope="module")
def gettext_corpus(tmp_path_factory):
    corpus = tmp_path_factory.mktemp("recipe") / "corpus"
    assert langshare(["prepare-gettext", "--out", str(corpus), "--langs", "fr,de,ja", "--direction", "both",
                      "--max-train-per-lang", "300", "--vocab-size", "1000", "--valid-size", "10",
                      "--test-size", "12"]) == 0
    _zero_shot_test_set(corpus)
    return corpus


@pytest.fixture(scope="module")
def corpus_for(request, tmp_path_factory):
    """corpus_for(name) -> the prepared corpus the recipes of corpus ``name`` train on in this test.
    Default (LANGSHARE_RECIPE_TEST_CORPUS unset or "mirrors"): a tiny corpus of each paper corpus
    prepared from its tiny mirror (tests/recipe_mirrors.py); "gettext": one gettext corpus for all;
    a directory: that corpus."""
    choice = os.environ.get("LANGSHARE_RECIPE_TEST_CORPUS", "mirrors")
    if choice == "mirrors":
        from recipe_mirrors import prepare_tiny

        root, made = tmp_path_factory.mktemp("mirrors"), {}

        def prepared(name):
            if name not in made:
                made[name] = Path(prepare_tiny(name, root))
            return made[name]
        return prepared
    if choice != "gettext":
        return lambda name: Path(choice)
    corpus = request.getfixturevalue("gettext_corpus")
    return lambda name: corpus


@pytest.fixture(scope="module")
def recipe_corpus(corpus_for):
    return corpus_for("opus100")


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("recipe_runs")


# ----------------------------------------------------------------------------- definitions
def test_committed_yaml_equals_generated(tmp_path):
    generated = experiments.config_files()
    assert len(generated) == len(ALL)
    committed = {str(p.relative_to(REPO / "configs" / "recipes")): p.read_text(encoding="utf-8")
                 for p in (REPO / "configs" / "recipes").rglob("*.yaml")}
    assert sorted(committed) == sorted(generated), "run `langshare recipe write-configs --out configs/recipes`"
    for rel, text in generated.items():
        assert committed[rel] == text, f"configs/recipes/{rel} drifted from the definitions"
    assert experiments.write_configs(str(REPO / "configs" / "recipes"), check=True) == []


def test_paper_hyperparameters_in_the_definitions():
    """Values the papers state, as the generated configs carry them (section/table in hparams_*)."""
    def cfg(paper, exp, method):
        p, e, m = ep.lookup(paper, exp, method)
        corpus = ep.Corpus(path="c", exists=False)
        return ep.build_config(p, e, m, run_dir="r", corpus=corpus, init_checkpoint="x.pt")

    clsr = cfg("clsr", "wmt14-m2o", "clsr-p0.1")
    assert clsr["optimization"]["lr"] == 0.0007 and clsr["optimization"]["max_update"] == 600000
    assert clsr["lr_scheduler"]["warmup_updates"] == 4000 and clsr["criterion"]["label_smoothing"] == 0.1
    assert clsr["dataset"]["batch_size"] * clsr["optimization"]["update_freq"] * 8 == 1920
    assert clsr["model"]["clsr_decoder_lang"] == "src" and clsr["task"]["encoder_langtok"] == "src"
    assert cfg("clsr", "opus100-o2m-oversample", "baseline")["task"]["sampling_temperature"] == 5.0
    assert cfg("clsr", "opus100-o2m", "dedicated")["model"]["clsr_dedicated"] == \
        "enc1.self_attn,enc1.ffn,enc6.ffn,dec1.self_attn,dec1.ffn,dec6.self_attn,dec6.cross_attn,dec6.ffn"
    ld = cfg("latent_depth", "diverse-o2m", "ll-d-24-24")
    assert (ld["optimization"]["lr"], ld["optimization"]["max_update"], ld["lr_scheduler"]["warmup_updates"]) == \
        (0.0015, 14000, 8000)
    assert ld["model"]["decoder_layers"] == 24 and ld["model"]["latent_decoder_target_depth"] == 12
    assert ld["dataset"]["max_tokens"] * ld["optimization"]["update_freq"] * 8 == 8 * 4096
    sp = cfg("adaptive_sparse", "public24-o2m", "attn-ffn-layer")
    assert sp["model"]["sparse_t_bar"] == 8000 and sp["model"]["sparse_encoder_keep_heads"] == 3
    assert sp["model"]["decoder_layers"] == 12 and sp["model"]["sparse_decoder_keep_layers"] == 6
    assert sp["optimization"]["lr"] == 0.0007 and sp["optimization"]["max_update"] == 100000
    assert sp["dataset"]["max_tokens"] * sp["optimization"]["update_freq"] * 8 >= 150000
    # FFN sparsity widens the side with many languages only: Table 1 counts one stack's FFNs doubled
    # (31.5M -> 37.8M); the side with one language keeps the Transformer's FFN, every block of it
    for exp, many, one in (("public24-o2m", "decoder", "encoder"), ("public24-m2o", "encoder", "decoder")):
        for method in ("ffn", "attn-ffn-layer"):
            ffn = cfg("adaptive_sparse", exp, method)["model"]
            assert (ffn[f"{many}_ffn_embed_dim"], ffn[f"sparse_{many}_keep_blocks"], ffn["sparse_ffn_blocks"]) == \
                (2048, 4, 8), (exp, method)
            assert (ffn[f"{one}_ffn_embed_dim"], ffn[f"sparse_{one}_keep_blocks"]) == (1024, 8), (exp, method)
    m2m = cfg("adaptive_sparse", "opus100-m2m", "ffn")["model"]  # many languages on both sides
    for stack in ("encoder", "decoder"):
        assert (m2m[f"{stack}_ffn_embed_dim"], m2m[f"sparse_{stack}_keep_blocks"]) == (4096, 8)
    adapter = cfg("adaptive_sparse", "opus100-m2m", "adapter")
    assert adapter["model"]["adapter_finetune_from"] == "x.pt" and adapter["model"]["adapter_bottleneck"] == 32
    lsl = cfg("lsl", "lsl10", "lsl-nas")
    assert lsl["model"]["lsl_encoder_layers"] == "SRC={3,4} & TGT={13,14,15}" and lsl["common"]["fp16"]
    assert (lsl["optimization"]["lr"], lsl["optimization"]["max_update"], lsl["model"]["dropout"]) == (0.0004, 150000, 0.0)


def test_dry_run_prints_the_real_size_run_and_runs_nothing(tmp_path, capsys):
    out = tmp_path / "runs"
    assert langshare(["recipe", "run", "clsr", "opus100-o2m", "clsr-p0.3", "--data", str(tmp_path / "nocorpus"),
                      "--out", str(out), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert not out.exists() and not (tmp_path / "nocorpus").exists()
    trains = [l for l in text.splitlines() if l.startswith("fairseq-train ")]
    assert len(trains) == 2  # the baseline first, then the method
    assert "--arch langshare_transformer " in trains[0] and "--arch clsr_transformer " in trains[1]
    for flag in ("--lr 0.0007", "--max-update 500000", "--warmup-updates 4000", "--batch-size 240",
                 "--clsr-budget 0.3", "--max-source-positions 100", "--keep-interval-updates 5"):
        assert flag in trains[1], flag
    assert "langshare recipe average" in text and "--last 5" in text
    assert "--beam 4 --lenpen 0.6 --high-threshold 900001 --low-threshold 100000 --bleu-tokenize 13a" in text
    assert re.search(r"langshare compare baseline=\S+ clsr-p0.3=\S+ --baseline baseline", text)
    assert "fairseq-hydra-train --config-dir configs/recipes/clsr --config-name opus100-o2m-clsr-p0.3" in text
    # another GPU count keeps the paper's batch
    assert langshare(["recipe", "run", "latent_depth", "related-o2m", "ll-d-12-24", "--gpus", "2", "--dry-run",
                      "--data", str(tmp_path / "nocorpus"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "--max-tokens 4096" in text and "--update-freq 4" in text and "--lr 0.0015" in text
    # LSL reports chrF (win ratio) and spBLEU with the flores101 tokenizer
    assert langshare(["recipe", "run", "lsl", "lsl10", "baseline", "--dry-run",
                      "--data", str(tmp_path / "nocorpus"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "--spbleu-tokenize flores101 --win-metric chrf" in text


def test_bad_inputs_are_one_line_errors(tmp_path, capsys):
    assert langshare(["recipe", "run", "clsr", "nope", "--dry-run"]) == 2
    assert "has no experiment 'nope'" in capsys.readouterr().err
    assert langshare(["recipe", "run", "lsl", "lsl10", "nope", "--dry-run"]) == 2
    assert "has no method 'nope'" in capsys.readouterr().err
    assert langshare(["recipe", "run", "lsl", "lsl10", "--data", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no manifest.json" in err and "langshare prepare-corpus" in err and err.count("\n") == 1
    assert langshare(["recipe", "average", str(tmp_path), "--last", "2", "--out", str(tmp_path / "a.pt")]) == 2
    assert "0 update checkpoints" in capsys.readouterr().err


def test_wrong_corpus_is_refused(recipe_corpus, tmp_path, capsys):
    other = tmp_path / "opus100"
    other.mkdir()
    for name in ("langs.txt", "lang_pairs.txt", "bin", "raw"):
        (other / name).symlink_to(recipe_corpus / name)
    manifest = json.loads((recipe_corpus / "manifest.json").read_text())
    (other / "manifest.json").write_text(json.dumps({**manifest, "corpus": "opus100"}))
    assert langshare(["recipe", "run", "clsr", "wmt14-o2m", "--data", str(other), "--out", str(tmp_path / "r"),
                      "--tiny"]) == 2
    err = capsys.readouterr().err
    assert "is the opus100 corpus but clsr/wmt14-o2m trains on wmt14" in err and not (tmp_path / "r").exists()


def test_select_pairs_follows_the_papers():
    pairs = ["en-de", "en-ja", "de-en", "ja-en", "de-fr", "de-ja", "ja-ko", "sw-de"]
    from fairseq_langshare.recipes.hparams import select_pairs
    assert select_pairs(pairs, "o2m") == ["en-de", "en-ja"]
    assert select_pairs(pairs, "m2o") == ["de-en", "ja-en"]
    assert select_pairs(pairs, "lsl-zero-shot") == ["en-de", "en-ja", "de-en", "ja-en", "de-fr", "ja-ko"]


# ----------------------------------------------------------------------------- configs build
def _compose(paper, name, overrides):
    from fairseq.dataclass.initialize import hydra_init
    try:
        from hydra import compose, initialize_config_dir
        version = {"version_base": "1.1"}  # as fairseq 0.12 drives hydra
    except ImportError:  # hydra 1.0 (fairseq's pin, hydra-core<1.1): the experimental API, no version_base
        from hydra.experimental import compose, initialize_config_dir
        version = {}

    hydra_init("config")
    with initialize_config_dir(config_dir=str(REPO / "configs" / "recipes" / paper), **version):
        return compose(config_name=name, overrides=overrides)


def test_every_yaml_composes_into_a_fairseq_config_that_builds(recipe_corpus, one_thread):
    """Each committed yaml, composed by hydra as fairseq-hydra-train does, gives fairseq the
    options it declares; every recipe's --tiny model builds on the test corpus."""
    import argparse

    from fairseq import models, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq import options
    from omegaconf import OmegaConf

    corpus = ep.Corpus.read(str(recipe_corpus))
    tasks_cache, built = {}, set()
    for paper, exp_name, method_name in ALL:
        p, exp, method = ep.lookup(paper, exp_name, method_name)
        pairs = ",".join(ep.trained_pairs(exp, corpus))
        cfg = _compose(paper, f"{exp_name}-{method_name}", [
            f"common.user_dir={PKG_DIR}", f"task.data={recipe_corpus / 'bin'}", f"task.langs='{','.join(corpus.langs)}'",
            f"task.lang_pairs='{pairs}'"])
        model_cfg = OmegaConf.to_container(cfg.model)
        arch = model_cfg.pop("_name")
        parser = argparse.ArgumentParser(add_help=False)
        models.ARCH_MODEL_REGISTRY[arch].add_args(parser)
        known = {a.dest for a in parser._actions}
        unknown = sorted(set(model_cfg) - known)
        assert not unknown, f"{paper}/{exp_name}/{method_name}: model options {arch} does not declare: {unknown}"
        assert cfg.optimization.max_update == exp.max_update(method)
        # the --tiny run's model builds from the command line the recipe would run (once per distinct one)
        run = ep.plan_run(p, exp, method, data_dir=str(recipe_corpus), out_dir="unused", tiny=True, corpus=corpus)
        run.config["model"].pop(method.init_key, None) if method.init_key else None
        key = json.dumps([run.config["task"], run.config["model"]], sort_keys=True)
        if key in built:
            continue
        args = options.parse_args_and_arch(options.get_training_parser(), ep.train_argv(run.config))
        task_key = json.dumps(run.config["task"], sort_keys=True)
        if task_key not in tasks_cache:
            tasks_cache[task_key] = tasks.setup_task(convert_namespace_to_omegaconf(args).task)
        model = tasks_cache[task_key].build_model(args)
        assert sum(p.numel() for p in model.parameters()) > 0
        built.add(key)
    assert len(built) > 60


def test_one_yaml_through_fairseq_hydra_train(recipe_corpus, tmp_path):
    corpus = ep.Corpus.read(str(recipe_corpus))
    _, exp, _ = ep.lookup("adaptive_sparse", "public24-o2m")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [str(BIN / "fairseq-hydra-train"), "--config-dir", str(REPO / "configs" / "recipes" / "adaptive_sparse"),
           "--config-name", "public24-o2m-attn-ffn-layer", f"common.user_dir={PKG_DIR}", "common.cpu=true",
           "common.log_format=json", "common.log_interval=1", f"task.data={recipe_corpus / 'bin'}",
           f"task.langs='{','.join(corpus.langs)}'", f"task.lang_pairs='{','.join(ep.trained_pairs(exp, corpus))}'",
           "model._name=adaptive_sparse_transformer_tiny", "model.encoder_layers=2", "model.decoder_layers=4",
           "model.encoder_embed_dim=32", "model.decoder_embed_dim=32", "model.encoder_ffn_embed_dim=64",
           "model.decoder_ffn_embed_dim=64", "model.sparse_encoder_keep_layers=2", "model.sparse_decoder_keep_layers=2",
           "model.sparse_t_bar=1", "optimization.max_update=2", "optimization.update_freq=[1]",
           "dataset.max_tokens=512", "dataset.num_workers=0", "dataset.disable_validation=true",
           f"checkpoint.save_dir={tmp_path / 'ckpt'}"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert '"num_updates": "2"' in proc.stdout + proc.stderr
    assert (tmp_path / "ckpt" / "checkpoint_last.pt").exists()


@pytest.mark.parametrize("paper,config,arch", [("clsr", "opus100-o2m-clsr-p0.3", "clsr_transformer_tiny"),
                                               ("latent_depth", "related-o2m-ll-d-12-24", "latent_depth_transformer_tiny")])
def test_a_yaml_whose_schedules_follow_the_run_trains_from_relative_paths(recipe_corpus, tmp_path, paper, config, arch):
    """Was: "CLSR's noise alpha(t) ramps over the run but its length is unknown" (latent depth: its
    temperature) at the first update, as the model could not see optimization.max_update; and the yaml's
    relative paths (user_dir, data) failed in hydra's outputs/DATE/TIME."""
    import torch

    corpus = ep.Corpus.read(str(recipe_corpus))
    _, exp, _ = ep.lookup("adaptive_sparse", "public24-o2m")
    (tmp_path / "fairseq_langshare").symlink_to(PKG_DIR)  # the yaml's user_dir, relative to the repo root
    (tmp_path / "bin").symlink_to(recipe_corpus / "bin")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [str(BIN / "fairseq-hydra-train"), "--config-dir", str(REPO / "configs" / "recipes" / paper),
           "--config-name", config, "common.cpu=true", "common.fp16=false", "task.data=bin",
           f"task.langs='{','.join(corpus.langs)}'", f"task.lang_pairs='{','.join(ep.trained_pairs(exp, corpus))}'",
           f"model._name={arch}", "optimization.max_update=2", "optimization.update_freq=[1]",
           "dataset.max_tokens=512", "dataset.batch_size=null", "dataset.num_workers=0",
           "dataset.disable_validation=true", "checkpoint.save_dir=ckpt"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    model = torch.load(tmp_path / "ckpt" / "checkpoint_last.pt", weights_only=False)["cfg"]["model"]
    derived = {"clsr": "clsr_noise_ramp_updates", "latent_depth": "latent_tau_anneal_updates"}[paper]
    assert model[derived] == 2  # over the whole run, as fairseq-train --max-update 2 gives (the recipe never commits)


# ----------------------------------------------------------------------------- training runs
def covering_set():
    """Every method of every paper (a budget sweep counts once) and, for every way a paper's
    experiments feed fairseq differently (directions, sampling), one experiment that does it."""
    if os.environ.get("LANGSHARE_ALL_RECIPES"):
        return ALL
    chosen, seen_methods, seen_data = [], set(), set()
    for paper, exp, method in ALL:
        family = re.sub(r"p\d\.\d$", "p", method)
        e = ep.lookup(paper, exp)[1]
        data = (paper, e.direction, e.config["task"].get("sampling_method"), e.evaluation.zero_shot)
        if (paper, family) not in seen_methods or (data not in seen_data and method != e.baseline):
            chosen.append((paper, exp, method))
            seen_methods.add((paper, family))
            seen_data.add(data)
    return chosen


# the papers whose recipes train in this file; the others in test_recipe_training_more.py, so that
# pytest-xdist (one file per worker, --dist loadfile) trains the two halves on two cores
PAPERS_HERE = ("clsr", "adaptive_sparse")


def recipes_of(papers):
    chosen = [r for r in covering_set() if r[0] in papers]
    return pytest.mark.parametrize("paper,experiment,method", chosen, ids=["/".join(r) for r in chosen])


def check_recipe_trains_and_evaluates(corpus_for, runs_dir, paper, experiment, method):
    out = runs_dir / paper / experiment
    corpus = corpus_for(ep.lookup(paper, experiment)[1].corpus)
    runs = train_runner.run_recipe(paper, experiment, [method], str(corpus), str(out), tiny=True,
                                   any_corpus=True, stream=open(os.devnull, "w"))
    run = runs[-1]
    assert run.method.name == method and runs[0].method.name == run.exp.baseline
    assert os.path.exists(run.finished_marker) and os.path.isfile(run.checkpoint)
    for es in run.eval_sets:
        results = json.loads(Path(run.results(es.name)).read_text())
        assert results["beam"] == run.exp.evaluation.beam and results["lenpen"] == run.exp.evaluation.lenpen
        assert results["directions"] and all(r["n"] > 0 for r in results["directions"].values())
        if method != run.exp.baseline:
            assert results["win_ratio"] is not None
            compare = (out / f"compare-{es.name}.md").read_text()
            assert f"win ratio vs {run.exp.baseline}" in compare and method in compare
        if run.exp.evaluation.zero_shot and es.name not in ("o2m", "m2o"):
            zero = {d for d, r in results["directions"].items() if r["group"] == "zero-shot"}
            assert zero and zero == set(results["directions"]) - set(run.config["task"]["lang_pairs"].split(","))
    if run.exp.evaluation.by_direction:
        assert {es.name for es in run.eval_sets} >= {"test", "o2m", "m2o", "zero-shot"}
    # a second run finds everything finished and changes nothing
    stamp = os.path.getmtime(run.results("test"))
    train_runner.run_recipe(paper, experiment, [method], str(corpus), str(out), tiny=True, any_corpus=True)
    assert os.path.getmtime(run.results("test")) == stamp


@pytest.mark.slow
@recipes_of(PAPERS_HERE)
def test_recipe_trains_and_evaluates(corpus_for, runs_dir, paper, experiment, method, one_thread):
    check_recipe_trains_and_evaluates(corpus_for, runs_dir, paper, experiment, method)


@pytest.mark.slow
def test_checkpoint_averaging_is_the_mean_and_decodes(recipe_corpus, tmp_path, one_thread):
    from fairseq import checkpoint_utils

    from fairseq_langshare import evaluation

    train_runner.run_recipe("clsr", "opus100-m2o", ["baseline"], str(recipe_corpus), str(tmp_path), tiny=True,
                            any_corpus=True, max_update=3)
    paths = last_update_checkpoints(str(tmp_path / "baseline" / "checkpoints"), 2)
    assert [Path(p).name for p in paths] == ["checkpoint_1_2.pt", "checkpoint_1_3.pt"]
    out = average_checkpoints(paths, str(tmp_path / "avg.pt"))
    a, b = (checkpoint_utils.load_checkpoint_to_cpu(p)["model"] for p in paths)
    avg = checkpoint_utils.load_checkpoint_to_cpu(out)["model"]
    changed = 0
    for key, value in avg.items():
        if torch.is_floating_point(value):
            assert torch.allclose(value, (a[key] + b[key]) / 2, atol=1e-7), key
            changed += not torch.equal(a[key], b[key])
    assert changed > 0  # the two checkpoints really differ
    res = evaluation.evaluate(out, str(recipe_corpus), beam=2, generate_args=ep.TINY_GENERATE_ARGS)
    assert res["directions"] and all(r["n"] > 0 for r in res["directions"].values())
    # the CLI says the same
    assert langshare(["recipe", "average", "--inputs", *paths, "--out", str(tmp_path / "avg2.pt")]) == 0
    again = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "avg2.pt"))["model"]
    assert all(torch.equal(again[k], avg[k]) for k in avg)
    assert langshare(["recipe", "average", "--inputs", *paths, "--out", str(tmp_path / "avg2.pt")]) == 0  # again
    # was: replaced, exit 0 -- a file that is no checkpoint, and the checkpoint a training run resumes
    (tmp_path / "notes.pt").write_text("KEEP\n")
    last = tmp_path / "baseline" / "checkpoints" / "checkpoint_last.pt"
    before = last.read_bytes()
    for target, holds in ((tmp_path / "notes.pt", "a file that is no fairseq checkpoint"),
                          (last, "a checkpoint fairseq-train wrote (its run resumes or averages it)")):
        with pytest.raises(ValueError, match=f"^--out {re.escape(str(target))} holds {re.escape(holds)}, which "
                                             "recipe average would replace; write to another path or move it away$"):
            average_checkpoints(paths, str(target))
    assert (tmp_path / "notes.pt").read_text() == "KEEP\n" and last.read_bytes() == before
