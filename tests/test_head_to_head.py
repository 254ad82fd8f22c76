"""``langshare head-to-head``: equal inference cost measured on the built models, the training
settings of scripts/quality_lib.sh, skip on re-run, the report."""

import io
import json
import os
import re
import shlex
import warnings

import pytest

from fairseq_langshare.analysis.inference_cost import cost_signature
from fairseq_langshare.recipes import head_to_head, head_to_head_record, head_to_head_report, head_to_head_runs
from fairseq_langshare.recipes.head_to_head_models import MODELS, H2HModel
from fairseq_langshare.recipes.head_to_head_runs import Corpus, Run, equal_cost_problems, plan, profile, train_argv

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL_COST = (("encoder", 2, (128,), (512,), (4,)), ("decoder", 2, (128,), (512,), (4,)))


def _corpus_files(root, pairs):
    """langs.txt, lang_pairs.txt (and a manifest if none) next to the tiny corpus's bin/."""
    langs = ["en"] + sorted({x for p in pairs for x in p.split("-")} - {"en"})
    (root / "langs.txt").write_text("\n".join(langs) + "\n")
    (root / "lang_pairs.txt").write_text(",".join(pairs) + "\n")
    if not (root / "manifest.json").exists():
        (root / "manifest.json").write_text("{}")
    return str(root)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory, one_thread):
    """The conftest corpus's dictionaries as an O2M and an M2O corpus (building needs no data)."""
    from tiny_corpus import make_corpus

    out = {}
    base = make_corpus(tmp_path_factory.mktemp("h2h"), n_train=20, n_test=4)
    for direction, pairs in (("o2m", ["en-xx", "en-yy"]), ("m2o", ["xx-en", "yy-en"])):
        root = tmp_path_factory.mktemp(direction)
        os.symlink(base["bin"], root / "bin")
        out[direction] = _corpus_files(root, pairs)
    return out


def test_plan_every_model_runs_the_baselines_layers_and_widths(corpora, tmp_path):
    runs = plan([m.name for m in MODELS], ["o2m", "m2o"], [1], str(tmp_path), corpora, 2000)
    assert len(runs) == 2 * len(MODELS)
    out = io.StringIO()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        todo, measured = head_to_head.print_plan(runs, 2, out)  # the --dry-run plan
    # was: latent depth's "posteriors are undecided" decoding warning, of the untrained model the plan measures
    assert not [w for w in caught if "undecided" in str(w.message)]
    assert len(todo) == len(runs)
    for direction in ("o2m", "m2o"):
        profiles = measured[direction]  # measured on the models the flags build
        assert set(profiles) == {m.name for m in MODELS}
        pairs = open(os.path.join(corpora[direction], "lang_pairs.txt")).read().split()[0].split(",")
        for name, prof in profiles.items():
            assert set(prof["inference"]) == set(prof["parameters"]["per_pair"]) == set(pairs)
            for pair, p in prof["inference"].items():
                assert cost_signature(p) == SMALL_COST, (direction, name, pair, p)
        # language-specific parameters: more in total, the baseline's size per pair
        base = profiles["baseline"]["parameters"]["total"]
        assert profiles["lsl"]["parameters"]["total"] > base
        assert set(profiles["lsl"]["parameters"]["per_pair"].values()) == {base}
        prenorm = profiles["baseline_prenorm"]["parameters"]["total"]  # + the final layer norms of both stacks
        assert prenorm == base + 2 * 2 * 128
        for name in ("latent_depth", "adaptive_sparse"):  # pre-norm models: a pair uses the pre-norm baseline's size
            assert profiles[name]["parameters"]["total"] > prenorm
            assert set(profiles[name]["parameters"]["per_pair"].values()) == {prenorm}, name
        assert equal_cost_problems(profiles) == []
        # FLOPs per sentence: CLSR adds a gate and a d x d projection per sub-layer, adapters a bottleneck;
        # what CLSR folds once after loading (d x d x FFN products) must not count as a cost of each sentence
        flops = {name: sum(p["flops"] for p in prof["inference"].values()) for name, prof in profiles.items()}
        assert 1.0 < flops["adapters"] / flops["baseline"] < 1.1, flops
        assert 1.0 < flops["clsr"] / flops["baseline"] < 1.4, flops
    text = out.getvalue()
    for m in MODELS:
        assert f"| {m.name} | `--arch {m.arch}" in text
        assert f"to train     o2m/{m.name}/seed1" in text
    assert text.count("every model runs the baseline's layers and widths per sentence") == 2
    assert re.search(rf"{2 * len(MODELS)} runs to do: about \d+\.\d h on 2 otherwise idle cores", text)


def test_plan_refuses_a_model_that_runs_more(corpora, tmp_path, monkeypatch):
    deeper = H2HModel("lsl", "LSL", "lsl_transformer_small", {"o2m": ("--lsl-encoder-layers", "TGT={6}")}, "")
    latent = H2HModel("latent_depth", "ld", "latent_depth_transformer_small",
                      {"o2m": ("--decoder-layers", "4", "--latent-decoder-target-depth", "2", "--latent-keep",
                               "threshold")}, "")  # untrained posteriors at 1/2: every layer kept
    sparse = H2HModel("adaptive_sparse", "as", "adaptive_sparse_transformer_small",
                      {"o2m": ("--encoder-layers", "2", "--decoder-layers", "2", "--sparse-types", "ffn",
                               "--sparse-encoder-keep-blocks", "1", "--sparse-decoder-keep-blocks", "1")}, "")
    models = tuple(m for m in MODELS if m.name not in ("lsl", "latent_depth", "adaptive_sparse")) + (deeper, latent, sparse)
    monkeypatch.setattr(head_to_head_runs, "MODELS", models, raising=False)
    monkeypatch.setattr(head_to_head_runs, "model_named", lambda n: next(m for m in models if m.name == n))
    runs = plan(["baseline", "lsl", "latent_depth", "adaptive_sparse"], ["o2m"], [1], str(tmp_path), corpora, 100)
    profiles = {r.model.name: profile(r) for r in runs}
    problems = "\n".join(equal_cost_problems(profiles))
    assert "lsl en-xx: runs (('encoder', 6," in problems  # the preset's 6 encoder layers
    assert "latent_depth en-xx: runs (('encoder', 2, (128,), (512,), (4,)), ('decoder', 4," in problems
    assert "adaptive_sparse en-xx: runs (('encoder', 2, (128,), (128,), (4,))" in problems  # 1 of 4 blocks: FFN 128
    with pytest.raises(ValueError, match="unequal inference cost: .*head_to_head_models.py"):
        head_to_head.print_plan(runs, 2, io.StringIO())


@pytest.mark.parametrize("direction,given,advice", [
    ("m2o", "o2m", "pass it as --corpus o2m=DIR with --directions o2m"),
    ("o2m", "m2o", "pass it as --corpus m2o=DIR with --directions m2o"),
    ("m2m", "o2m", "pass it as --corpus o2m=DIR with --directions o2m"),
])
def test_plan_refuses_a_corpus_of_another_direction(corpora, tmp_path, direction, given, advice):
    """`--corpus m2o=DIR` naming an English-to-many corpus used to train the M2O models (source-language
    LSLs, CLSR by source) on its O2M pairs and report them as the M2O block, without a word."""
    with pytest.raises(ValueError) as info:
        plan(["baseline"], [direction], [1], str(tmp_path), {direction: corpora[given]}, 10)
    message = str(info.value)
    assert message.startswith(f"--corpus {direction}={corpora[given]}: its trained directions "), message
    assert message.endswith(advice.replace("DIR", corpora[given])), message


def test_training_settings_are_quality_libs(tmp_path):
    """The head-to-head trains exactly as scripts/quality_lib.sh (so its seed-1 runs are reusable)."""
    text = open(os.path.join(REPO, "scripts", "quality_lib.sh")).read().replace("\\\n", " ")
    command = re.search(r'fairseq-train "\$CORPUS/bin" (.*?) "\$@"', text).group(1)
    values = {"$PKG": head_to_head_runs.PACKAGE_DIR, "$LANGS": "en,xx", "$PAIRS": "en-xx", "$UPDATES": "1500",
              "$OUT/$name": str(tmp_path / "run"), "${SEED:-1}": "1"}  # SEED unset: seed 1, as the run's
    for var, value in values.items():
        command = command.replace(f'"{var}"', shlex.quote(value))
    command = command.replace("$CPU_FLAG", "--cpu")  # DEVICE's default, cpu, as the Run's
    theirs = shlex.split(command)
    root = tmp_path / "corpus"
    root.mkdir()
    corpus = Corpus(_corpus_files(root, ["en-xx"]), "o2m")
    model = H2HModel("baseline", "b", "langshare_transformer_small", {"o2m": ()}, "")
    mine = train_argv(Run("o2m", model, 1, str(tmp_path / "run"), corpus, 1500))
    assert mine[0] == os.path.join(corpus.path, "bin")

    def options(argv):  # flag -> value (or True), order-free
        out, i = {}, 0
        while i < len(argv):
            takes = i + 1 < len(argv) and not argv[i + 1].startswith("--")
            out[argv[i]] = argv[i + 1] if takes else True
            i += 2 if takes else 1
        return out

    mine_opts, theirs_opts = options(mine[1:]), options(theirs)
    assert theirs_opts.pop("--log-format") == "simple" and mine_opts.pop("--log-format") == "json"
    assert mine_opts.pop("--arch") == "langshare_transformer_small"
    assert mine_opts == theirs_opts


def _fake_run(tmp_path, name, seed=1, updates=10, evaluated=True, hypotheses=True):
    model = H2HModel(name, name, "langshare_transformer_small", {"o2m": ()}, "")
    run = Run("o2m", model, seed, str(tmp_path / "o2m" / name / f"seed{seed}"), Corpus(str(tmp_path), "o2m"), updates)
    os.makedirs(run.dir)
    open(run.checkpoint, "w").close()
    open(os.path.join(run.dir, f"finished-{updates}"), "w").close()
    if evaluated:
        results = {"directions": {}, **({"hypotheses": {}} if hypotheses else {})}
        with open(run.results, "w") as f:
            json.dump(results, f)
    return run


def _fake_call(calls):
    """A stand-in for ``head_to_head_runs._call`` that runs fairseq-train / langshare evaluate as
    finishing at once, recording each one's module in ``calls``."""
    def fake_call(argv, log):
        calls.append(argv[2])
        with open(log, "a") as f:
            f.write("done training\n" if argv[2] == "fairseq_cli.train" else "")
        if argv[2] == "fairseq_cli.train":
            open(os.path.join(os.path.dirname(log), "checkpoint_last.pt"), "w").close()
        if argv[2] == "fairseq_langshare.cli":
            with open(argv[argv.index("--out-json") + 1], "w") as f:
                json.dump({"directions": {}, "hypotheses": {}}, f)
        return 0

    return fake_call


def test_finished_runs_are_skipped_on_rerun(tmp_path, monkeypatch):
    calls = []

    monkeypatch.setattr(head_to_head_runs, "_call", _fake_call(calls))
    done = _fake_run(tmp_path, "a")
    stale = _fake_run(tmp_path, "b", hypotheses=False)  # evaluated before hypotheses were stored
    trained = _fake_run(tmp_path, "c", evaluated=False)
    fresh = Run("o2m", H2HModel("d", "d", "x", {"o2m": ()}, ""), 1, str(tmp_path / "o2m/d/seed1"),
                Corpus(str(tmp_path), "o2m"), 10)
    partial = _fake_run(tmp_path, "e", evaluated=False)
    os.remove(os.path.join(partial.dir, "finished-10"))  # a checkpoint but no marker: resumed
    assert [r.status for r in (done, stale, trained, fresh, partial)] == [
        "done", "to evaluate", "to evaluate", "to train", "to resume"]
    monkeypatch.setattr(head_to_head_runs, "train_argv", lambda run, device="cpu": ["DATA"])
    assert head_to_head_runs.execute([done, stale, trained, fresh, partial], jobs=1, stream=io.StringIO()) == []
    assert calls.count("fairseq_cli.train") == 2 and calls.count("fairseq_langshare.cli") == 4
    assert all(r.status == "done" for r in (done, stale, trained, fresh, partial))
    calls.clear()
    assert head_to_head_runs.execute([done, stale, trained, fresh, partial], jobs=2, stream=io.StringIO()) == []
    assert calls == []
    # a training that does not finish leaves no marker and is reported
    monkeypatch.setattr(head_to_head_runs, "_call", lambda argv, log: 1)
    broken = Run("o2m", fresh.model, 2, str(tmp_path / "o2m/d/seed2"), fresh.corpus, 10)
    failures = head_to_head_runs.execute([broken], jobs=1, stream=io.StringIO())
    assert len(failures) == 1 and "fairseq-train failed" in failures[0] and broken.status == "to train"


# fairseq-train's json log of a run whose process was killed after update 1100 and resumed from the checkpoint at
# 1087 (the lines of o2m/clsr/seed3 of the record, shortened): a new process starts its wall meter at 0 again
RESUMED_LOG = """\
2026-11-28 09:59:30 | INFO | fairseq.trainer | No existing checkpoint found runs/x/checkpoint_last.pt
2026-11-28 10:00:21 | INFO | train_inner | {"epoch": 1, "update": 0.092, "loss": "12.313", "num_updates": "100", "train_wall": "50", "wall": "52"}
2026-11-28 10:09:19 | INFO | fairseq_cli.train | end of epoch 1 (average epoch stats below)
2026-11-28 10:09:19 | INFO | train | {"epoch": 1, "train_loss": "7.0", "train_num_updates": "1087", "train_train_wall": "570", "train_wall": "589"}
2026-11-28 10:09:31 | INFO | train_inner | {"epoch": 2, "update": 1.012, "loss": "6.9", "num_updates": "1100", "train_wall": "85", "wall": "602"}
2026-11-28 10:20:30 | INFO | fairseq.trainer | Loaded checkpoint runs/x/checkpoint_last.pt (epoch 2 @ 1087 updates)
2026-11-28 10:20:36 | INFO | train_inner | {"epoch": 2, "update": 1.012, "loss": "6.9", "num_updates": "1100", "train_wall": "6", "wall": "7"}
2026-11-28 10:30:42 | INFO | train_inner | {"epoch": 2, "update": 1.84, "loss": "6.1", "num_updates": "2000", "train_wall": "87", "wall": "613"}
2026-11-28 10:30:45 | INFO | train | {"epoch": 2, "train_loss": "6.4", "train_num_updates": "2000", "train_train_wall": "600", "train_wall": "616"}
2026-11-28 10:30:45 | INFO | fairseq_cli.train | done training in 615.1 seconds
"""
# a resume from a checkpoint in mid-epoch (o2m/latent_depth/seed3 of the record, shortened): fairseq restores its
# meters from the checkpoint and then logs a wall time of 0 to the end
RESUMED_MID_EPOCH_LOG = """\
2026-11-28 10:03:45 | INFO | fairseq.trainer | No existing checkpoint found runs/x/checkpoint_last.pt
2026-11-28 10:04:37 | INFO | train_inner | {"epoch": 1, "update": 0.092, "loss": "12.3", "num_updates": "100", "train_wall": "50", "wall": "52"}
2026-11-28 10:08:49 | INFO | train_inner | {"epoch": 1, "update": 0.552, "loss": "7.7", "num_updates": "600", "train_wall": "63", "wall": "304"}
2026-11-28 10:20:30 | INFO | fairseq.trainer | Loaded checkpoint runs/x/checkpoint_last.pt (epoch 1 @ 500 updates)
2026-11-28 10:21:15 | INFO | train_inner | {"epoch": 1, "update": 0.552, "loss": "7.7", "num_updates": "600", "train_wall": "44", "wall": "0"}
2026-11-28 10:26:03 | INFO | train | {"epoch": 1, "train_loss": "7.0", "train_num_updates": "1087", "train_train_wall": "0", "train_wall": "0"}
2026-11-28 10:35:48 | INFO | train_inner | {"epoch": 2, "update": 1.84, "loss": "6.1", "num_updates": "2000", "train_wall": "49", "wall": "0"}
2026-11-28 10:35:51 | INFO | train | {"epoch": 2, "train_loss": "6.4", "train_num_updates": "2000", "train_train_wall": "0", "train_wall": "0"}
2026-11-28 10:35:51 | INFO | fairseq_cli.train | done training in 920.5 seconds
"""


def test_training_time_sums_the_processes_of_a_resumed_run(tmp_path):
    """Was: fairseq's wall meter as logged last, i.e. the last process's time (616 s of this run's 1,216), or 0 for
    a run resumed in mid-epoch: fairseq's meter restarts with a process resumed at an epoch's end and stays at 0
    in one resumed in mid-epoch. Each process's time is read from the log's clock instead: from the line where
    it loaded (or found no) checkpoint to its last statistics line."""
    for text, expected in ((RESUMED_LOG, 601.0 + 615.0), (RESUMED_MID_EPOCH_LOG, 304.0 + 921.0)):
        (tmp_path / "train.log").write_text(text)
        assert head_to_head_record.training_seconds(str(tmp_path / "train.log")) == expected
    assert head_to_head_record.training_seconds(str(tmp_path / "missing.log")) is None


def test_a_run_trained_by_an_earlier_process_records_its_training_time(tmp_path, monkeypatch):
    """Was: a run trained before the head-to-head was interrupted (a lost machine) and evaluated by the
    next one was recorded with 0 s of training, the time of this process's train call; the time is read from
    the run's fairseq log, summed over the processes that trained it."""
    monkeypatch.setattr(head_to_head_runs, "_call", _fake_call([]))
    monkeypatch.setattr(head_to_head_runs, "profile", lambda run, checkpoint=None: {})
    monkeypatch.setattr(head_to_head_record, "write_references", lambda *args: None)
    (tmp_path / "langs.txt").write_text("en\nfr\n")
    (tmp_path / "lang_pairs.txt").write_text("en-fr\n")
    run = _fake_run(tmp_path, "a", evaluated=False)
    with open(os.path.join(run.dir, "train.log"), "w") as f:
        f.write(RESUMED_LOG)
    record = str(tmp_path / "record")
    assert head_to_head_runs.execute([run], jobs=1, stream=io.StringIO(), record_dir=record) == []
    written = head_to_head_record.load(head_to_head_record.run_path(record, "o2m", "a", 1))
    assert written["wall_seconds"]["train"] == 1216.0 and written["wall_seconds"]["evaluate"] < 60
    import gzip  # the log is committed beside the record, so that the report reads the time from it again
    with gzip.open(head_to_head_record.log_path(record, "o2m", "a", 1), "rt") as f:
        assert f.read() == RESUMED_LOG


def test_train_flags_follow_the_head_to_heads_and_a_run_trained_with_other_flags_is_refused(
        corpora, tmp_path, monkeypatch):
    """`--train-flags` (make demo's short-budget settings) come after the head-to-head's settings, so
    they win; they are recorded in the run directory and in the report, and a run directory trained
    with other flags is refused rather than resumed or skipped as if it were this plan's."""
    from fairseq import options

    short = ["--max-tokens", "1024", "--dropout", "0", "--save-interval-updates", "5"]
    runs = plan(["baseline"], ["m2o"], [1], str(tmp_path / "runs"), corpora, 10, short)
    args = options.parse_args_and_arch(options.get_training_parser(), train_argv(runs[0]))
    assert (args.max_tokens, args.dropout, args.save_interval_updates, args.lr) == (1024, 0.0, 5, [0.002])
    rate = head_to_head_runs.UPDATES_PER_SECOND["baseline"]  # the --dry-run estimate follows the batch size
    assert head_to_head.updates_per_second(runs[0]) == pytest.approx(2 * rate)
    assert head_to_head.updates_per_second(plan(["baseline"], ["m2o"], [1], str(tmp_path / "other"), corpora, 10,
                                                ["--max-tokens=512"])[0]) == pytest.approx(4 * rate)
    with pytest.raises(ValueError, match="--arch is set by the head-to-head itself"):
        plan(["baseline"], ["m2o"], [1], str(tmp_path / "runs"), corpora, 10, ["--arch", "transformer"])

    monkeypatch.setattr(head_to_head_runs, "_call", _fake_call([]))
    assert head_to_head_runs.execute(runs, jobs=1, stream=io.StringIO()) == [] and runs[0].status == "done"
    assert plan(["baseline"], ["m2o"], [1], str(tmp_path / "runs"), corpora, 10, short)[0].status == "done"
    with pytest.raises(ValueError, match="trained with --train-flags '--max-tokens 1024 --dropout 0 "
                                         "--save-interval-updates 5', this plan has '\\(none\\)'"):
        plan(["baseline"], ["m2o"], [1], str(tmp_path / "runs"), corpora, 10)
    # a run of before the flags were recorded was trained without any
    os.remove(os.path.join(runs[0].dir, head_to_head_runs.TRAIN_FLAGS_FILE))
    assert plan(["baseline"], ["m2o"], [1], str(tmp_path / "runs"), corpora, 10)[0].status == "done"
    with pytest.raises(ValueError, match="trained with --train-flags '\\(none\\)'"):
        plan(["baseline"], ["m2o"], [1], str(tmp_path / "runs"), corpora, 10, short)
    text = head_to_head_report.markdown({"generated": "today", "updates": 10, "evaluate_flags": ["--beam", "4"],
                                         "train_flags": list(head_to_head_runs.TRAIN_FLAGS) + short, "directions": {},
                                         "record": {"dir": "record", "command": "report"}, "baseline": "baseline",
                                         "bootstrap": {"n_samples": 1000, "seed": "12345"}, "verdict_rule": "rule"})
    assert "`scripts/quality_lib.sh` with `--max-tokens 1024 --dropout 0 --save-interval-updates 5` after them" in text


def test_evaluation_decodes_on_the_cpu_also_when_training_on_a_gpu(tmp_path):
    """Beside the other runs' trainings on one GPU, decoding there took 4-5 minutes per run."""
    from fairseq_langshare import cli

    run = _fake_run(tmp_path, "a", evaluated=False)
    (tmp_path / "langs.txt").write_text("en\nfr\n")
    (tmp_path / "lang_pairs.txt").write_text("en-fr\n")
    assert "--cpu" not in train_argv(run, device="cuda") and "--cpu" in train_argv(run)
    argv = head_to_head_runs.evaluate_argv(run)
    assert argv[1:3] == ["-m", "fairseq_langshare.cli"]
    args = cli.build_parser().parse_args(argv[3:])
    assert args.checkpoint == run.checkpoint and args.out_json == run.results
    assert "--cpu" in args.generate_args  # the option's type splits it as a shell would


def test_report_section_is_replaced_in_place_and_deltas_pair_seeds(tmp_path):
    md = tmp_path / "results.md"
    md.write_text("# Results\n\nbefore\n")
    head_to_head_report.write_section(str(md), head_to_head_report.START + "\none\n" + head_to_head_report.END + "\n")
    md.write_text(md.read_text() + "\nafter\n")
    head_to_head_report.write_section(str(md), head_to_head_report.START + "\ntwo\n" + head_to_head_report.END + "\n")
    text = md.read_text()
    assert "before" in text and "after" in text and "two" in text and "one" not in text
    base = {"seeds": {"1": {"bleu": {"en-a": 10.0}}, "2": {"bleu": {"en-a": 20.0}}}}
    method = {"seeds": {"1": {"bleu": {"en-a": 12.0}}, "2": {"bleu": {"en-a": 19.0}}, "3": {"bleu": {"en-a": 5.0}}}}
    assert head_to_head_report.seed_deltas(method, base, "en-a") == [2.0, -1.0]
    # the report pairs seed k with seed k: only seeds every model has evaluated
    runs = [_fake_run(tmp_path, "baseline", 1), _fake_run(tmp_path, "baseline", 2), _fake_run(tmp_path, "lsl", 2),
            _fake_run(tmp_path, "lsl", 3)]
    out = io.StringIO()
    got = head_to_head.collect_runs(runs, out)  # the runs --examples and --analyze show
    assert {m: [r.seed for r in rs] for m, rs in got["o2m"].items()} == {"baseline": [2], "lsl": [2]}
    assert "o2m/baseline/seed1, o2m/lsl/seed3" in out.getvalue()


@pytest.mark.slow
def test_head_to_head_end_to_end_and_rerun(tmp_path, one_thread):
    """Two models, one seed, a few updates on a tiny SentencePiece corpus (what `make demo` does):
    train two at a time, evaluate, record, compare with significance, write JSON, markdown, figure
    and standings, print translations, run the method's analysis; --report-only makes the same
    files from the record alone; a re-run trains nothing."""
    from test_evaluation import _build_tiny_corpus

    corpus = _corpus_files(_build_tiny_corpus(tmp_path / "corpus"), ["en-xx", "en-yy"])
    kwargs = dict(models=["baseline", "lsl"], directions=["o2m"], seeds=[1], updates=30,
                  runs_dir=str(tmp_path / "runs"), corpora={"o2m": corpus}, jobs=2,
                  out_json=str(tmp_path / "h2h.json"), out_md=str(tmp_path / "results.md"),
                  figure=str(tmp_path / "img" / "h2h.png"), record_dir=str(tmp_path / "record"),
                  readme=str(tmp_path / "README.md"))
    out = io.StringIO()
    runs = head_to_head.head_to_head(stream=out, analyze=True, examples=1, **kwargs)
    assert all(r.status == "done" for r in runs), out.getvalue()
    # each run recorded as it finished: scores, hypotheses, cost, flags, commit, machine; references once
    from fairseq_langshare.recipes import head_to_head_record as record

    lsl_record = record.load(str(tmp_path / "record" / "o2m" / "lsl" / "seed1.json.gz"))
    assert lsl_record["model_flags"] == list(runs[1].model.argv("o2m")) and lsl_record["seed"] == 1
    assert lsl_record["results"]["hypotheses"]["en-xx"] == json.load(open(runs[1].results))["hypotheses"]["en-xx"]
    assert lsl_record["profile"]["parameters"]["total"] > 0 and lsl_record["validation"]["num_updates"] == 30
    assert lsl_record["provenance"]["machine"]["cpu"] and lsl_record["wall_seconds"]["train"] > 0
    refs = record.load(str(tmp_path / "record" / "o2m" / "references.json.gz"))
    assert len(refs["en-xx"]["lines"]) == len(lsl_record["results"]["hypotheses"]["en-xx"])
    printed = out.getvalue()
    assert "win ratio vs baseline" in printed and "p, all directions pooled" in printed
    assert "-- en-xx (400 training pairs)" in printed and "  lsl        " in printed  # example translations
    lsl_dir = runs[1].dir
    assert os.path.isfile(os.path.join(lsl_dir, "analysis", "lsl_similarity.png"))
    data = json.loads((tmp_path / "h2h.json").read_text())
    block = data["directions"]["o2m"]
    assert block["equal_inference_cost"] and set(block["models"]) == {"baseline", "lsl"}
    lsl = block["models"]["lsl"]
    assert lsl["flags"] == ["--arch", "lsl_transformer_small", "--encoder-layers", "2", "--lsl-encoder-layers", "TGT={2}"]
    assert set(lsl["seeds"]["1"]["bleu"]) == {"en-xx", "en-yy"} and 0 <= lsl["pooled_p_value"]["bleu"] <= 1
    assert lsl["parameters"]["total"] > block["models"]["baseline"]["parameters"]["total"]
    assert lsl["win_ratio"]["bleu"]["directions"] == 2
    assert os.path.getsize(tmp_path / "img" / "h2h.png") > 1000
    text = (tmp_path / "results.md").read_text()
    assert "## Head-to-head" in text and "![BLEU delta against the baseline per direction](img/h2h.png)" in text
    assert "**verdict**" not in text and "| verdict, all directions pooled |  |  |  | - | " in text
    assert lsl["verdict"]["bleu"]["verdict"] in ("better", "level", "worse")
    assert "| LSL (`lsl`) | **" in (tmp_path / "README.md").read_text()
    # the same files from the record alone: the run directories (checkpoints, test.json, corpus) not read
    outputs = {k: kwargs[k] for k in ("out_json", "out_md", "figure", "readme")}
    again_outputs = {k: str(tmp_path / "again" / os.path.relpath(v, tmp_path)) for k, v in outputs.items()}
    os.rename(tmp_path / "runs", tmp_path / "runs_moved")
    head_to_head.head_to_head(report_only=True, record_dir=kwargs["record_dir"], stream=io.StringIO(), **again_outputs)
    os.rename(tmp_path / "runs_moved", tmp_path / "runs")
    for k, path in outputs.items():
        assert open(path, "rb").read() == open(again_outputs[k], "rb").read(), k
    mtimes = [os.path.getmtime(r.checkpoint) for r in runs]
    again = io.StringIO()
    head_to_head.head_to_head(stream=again, **kwargs)
    assert [os.path.getmtime(r.checkpoint) for r in runs] == mtimes
    assert "done         o2m/lsl/seed1" in again.getvalue() and "training" not in again.getvalue()
    # a finished run is linked into another layout after checking it is the planned one
    other = plan(["baseline", "lsl"], ["o2m"], [1, 2], str(tmp_path / "other"), {"o2m": corpus}, 30)
    linked = head_to_head_runs.import_run(other, "lsl", 1, runs[1].dir)
    assert os.path.realpath(linked.dir) == os.path.realpath(runs[1].dir) and linked.status == "done"
    with pytest.raises(ValueError, match="trained with seed 1 and differs in"):
        head_to_head_runs.import_run(other, "lsl", 2, runs[1].dir)
    with pytest.raises(ValueError, match="differs in .*arch"):
        head_to_head_runs.import_run(other, "baseline", 1, runs[1].dir)
    # a run that logged more often and kept other checkpoints trained the same model: importable
    _import_with_other_logging(tmp_path, other, runs[0])


def _import_with_other_logging(tmp_path, other, run):
    import argparse
    import shutil

    import torch
    from fairseq import checkpoint_utils
    from omegaconf import OmegaConf

    copy = tmp_path / "logged_differently"
    shutil.copytree(run.dir, copy)
    state = checkpoint_utils.load_checkpoint_to_cpu(str(copy / "checkpoint_last.pt"))
    changed = {"log_interval": 7, "keep_interval_updates": 3}
    for key, value in changed.items():
        assert key in head_to_head_runs._plain(state["cfg"]["model"]), key  # the check would compare it
        if isinstance(state["cfg"]["model"], argparse.Namespace):
            setattr(state["cfg"]["model"], key, value)
        else:
            state["cfg"]["model"][key] = value
    # as fairseq's trainer saves it (a plain container, which weights-only loading accepts)
    state["cfg"] = OmegaConf.to_container(state["cfg"], resolve=True, enum_to_str=True)
    torch.save(state, copy / "checkpoint_last.pt")
    linked = head_to_head_runs.import_run(other, run.model.name, 1, str(copy))
    assert os.path.realpath(linked.dir) == os.path.realpath(copy)
