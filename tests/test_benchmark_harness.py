"""The benchmark harness on the tiny corpus, through its command line: every metric for both
configurations, ratios B/A of the medians, parameter counts, the markdown table.
No timing assertions beyond positivity."""

import json
import os
import shlex
import sys

import pytest

from tiny_corpus import build_task_and_model

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:  # benchmarks/ is a top-level directory of the repository, not installed
    sys.path.insert(0, REPO)

from benchmarks import fairseq_steps, harness, report, run  # noqa: E402

A = ["--arch", "langshare_transformer_tiny", "--share-all-embeddings"]
B = ["--arch", "transformer", "--share-all-embeddings", "--encoder-layers", "2", "--decoder-layers", "2",
     "--encoder-embed-dim", "32", "--decoder-embed-dim", "32", "--encoder-attention-heads", "2",
     "--decoder-attention-heads", "2", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64"]
METRICS = list(report.METRICS)


@pytest.fixture(scope="module")
def outcome(corpus, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench")
    doc, out_json = tmp / "benchmarks.md", tmp / "tiny.json"
    code = run.main([
        "--name", "tiny", "--data", str(corpus["bin"]), "--langs", ",".join(corpus["langs"]),
        "--lang-pairs", ",".join(corpus["pairs"]), "--a", shlex.join(A), "--b", shlex.join(B),
        "--reps", "2", "--warmup", "1", "--max-tokens", "512", "--train-batches", "3",
        "--decode-sentences", "12", "--decode-single-sentences", "3", "--decode-batch-size", "12",
        "--memory-reps", "1", "--out-json", str(out_json), "--doc", str(doc),
    ])
    assert code == 0
    return json.loads(out_json.read_text()), doc.read_text()


def test_every_metric_for_both_configurations(outcome):
    result, _ = outcome
    assert set(result["metrics"]) == set(METRICS)
    for name, entry in result["metrics"].items():
        for key in ("A", "B"):
            stats = entry[key]
            assert stats["median"] > 0 and stats["min"] > 0, (name, key)
            assert stats["q1"] <= stats["median"] <= stats["q3"]
        if name in report.TIMED_METRICS:
            assert entry["A"]["n"] == entry["B"]["n"] == 2
            assert entry["cpu_time"]["A"]["median"] > 0 and entry["cpu_time"]["B"]["median"] > 0


def test_ratios_are_b_over_a_of_the_medians(outcome):
    result, _ = outcome
    for entry in result["metrics"].values():
        assert entry["ratio"] == pytest.approx(entry["B"]["median"] / entry["A"]["median"])
        if "cpu_time" in entry:
            cpu = entry["cpu_time"]
            assert cpu["ratio"] == pytest.approx(cpu["B"]["median"] / cpu["A"]["median"])


def test_parameter_counts(outcome, corpus):
    result, _ = outcome
    expected = {}
    for key, flags in (("A", A), ("B", B)):
        _, model, _ = build_task_and_model(corpus, arch=flags[1], extra=flags[2:])
        expected[key] = sum(p.numel() for p in model.parameters())
        assert result["metrics"]["params_total"][key]["median"] == expected[key]
        assert set(result["params"][key]["effective"].values()) == {expected[key]}  # no effective_parameters()
    assert expected["A"] == expected["B"]
    assert result["metrics"]["params_total"]["ratio"] == 1.0


def test_same_batches_same_computation(outcome):
    result, _ = outcome
    # same initialisation, same batches, same dropout seeds: the same computation, the same losses
    losses = result["train_loss_per_rep"]
    assert len(losses["A"]) == 3 and losses["A"] == pytest.approx(losses["B"], rel=1e-4)


def test_markdown_table(outcome):
    result, text = outcome
    assert text.startswith("# Benchmarks")
    assert "## tiny (" in text and "| metric | A: median (IQR) | B: median (IQR) | B / A |" in text
    for entry in result["metrics"].values():
        assert f"| {entry['label']} [{entry['unit']}] |" in text
    assert f"`{shlex.join(B)}`" in text and "torch " in text and "fairseq " in text


def _shipped_comparisons():
    from benchmarks import run_baseline, run_methods

    for name, _, a, _, b in run_baseline.COMPARISONS:
        yield name, a, b, {}
    for c in run_methods.COMPARISONS:
        yield c[0], (c[3] if len(c) > 3 else run_baseline.SMALL), c[2], (c[4] if len(c) > 4 else {})


def _on_tiny_corpus(flags, corpus, families, langs):
    """A comparison's flags for the tiny corpus: its made-up languages are in no family table."""
    flags = list(flags)
    if "--language-family-map" in flags:
        i = flags.index("--language-family-map")
        table = dict(zip(corpus["langs"], ("Germanic", "Romance", "Slavic")))
        flags[i + 1] = ",".join(f"{c}={table.get(c, 'Absent')}" for c in langs)
    elif "--multi-decoder" in flags:
        flags += ["--language-families", str(families)]
    return flags


@pytest.mark.parametrize("name,a,b,extra", list(_shipped_comparisons()), ids=lambda v: v if isinstance(v, str) else "")
def test_every_shipped_comparison_trains_and_decodes(corpus, tmp_path, name, a, b, extra):
    """Each comparison of `make benchmark` / `benchmarks.run_methods` builds both models on one
    task, takes a real training step and decodes (a comparison that cannot run fails here, not
    after minutes of measuring). Inventory comparisons keep their larger B inventory, on the
    tiny corpus' languages."""
    families = tmp_path / "families.tsv"
    families.write_text("en\tGermanic\nxx\tRomance\nyy\tSlavic\n")
    langs = list(corpus["langs"])
    b_langs = langs + [c for c in extra["b_langs"] if c not in extra["langs"]] if "b_langs" in extra else None
    settings = harness.Settings(
        name=name, data=str(corpus["bin"]), langs=langs, lang_pairs=list(corpus["pairs"]),
        a=_on_tiny_corpus(a, corpus, families, langs), b=_on_tiny_corpus(b, corpus, families, b_langs or langs),
        reps=0, max_tokens=512, train_batches=1, decode_sentences=2,
        decode_single_sentences=1, decode_batch_size=2, memory_reps=0, decode_len=3, b_langs=b_langs,
        b_init=extra.get("b_init"))
    bench = harness.Benchmark(settings)
    try:
        for key in harness.CONFIGS:
            loss = fairseq_steps.train_step(bench.trainers[key], bench.train_batches[0])
            assert loss == loss and loss > 0, f"{name}: configuration {key} gave loss {loss}"
            bench.models[key].eval()
            assert fairseq_steps.decode_batch(bench.tasks[key], bench.generators[key], bench.models[key], bench.single[0]) > 0
    finally:
        bench.close()


def test_decode_direction_decodes_only_that_direction(corpus):
    """`--decode-direction en-yy` (as fairseq-generate -s en -t yy) picks only en-yy sentences;
    a direction without sentences is a one-line error."""
    base = dict(name="dir", data=str(corpus["bin"]), langs=list(corpus["langs"]), lang_pairs=list(corpus["pairs"]),
                a=A, b=A, reps=0, max_tokens=512, train_batches=1, decode_sentences=8, decode_single_sentences=2,
                decode_batch_size=4, memory_reps=0, decode_len=3)
    bench = harness.Benchmark(harness.Settings(**base, decode_direction="en-yy"))
    try:
        yy = corpus["langs"].index("yy")  # language ids follow --langs
        for batch in bench.single + bench.batched:
            assert set(batch["net_input"]["tgt_lang_id"].tolist()) == {yy}
        assert sum(int(b["nsentences"]) for b in bench.batched) == 8
    finally:
        bench.close()
    with pytest.raises(ValueError, match="no valid sentence of direction xx-yy"):
        harness.Benchmark(harness.Settings(**base, decode_direction="xx-yy"))


def test_williams_orders_balance_positions_and_predecessors():
    """Four configurations (the CTranslate2 benchmark): each runs once in every position and once
    right after every other one, so carry-over between steps hits all alike; the default order
    of two configurations stays A B, B A."""
    orders = harness.williams_orders(["a", "b", "c", "d"])
    assert all(sorted(o[pos] for o in orders) == ["a", "b", "c", "d"] for pos in range(4))
    follows = [(o[i], o[i + 1]) for o in orders for i in range(3)]
    assert len(follows) == len(set(follows)) == 12
    ran = []
    harness.interleaved(range(5), lambda k, b: ran.append((b, k)), keys=("a", "b", "c", "d"), orders=orders)
    assert [k for b, k in ran if b == 4] == orders[0]
    ran.clear()
    harness.interleaved(range(2), lambda k, b: ran.append(k))
    assert ran == ["A", "B", "B", "A"]
    with pytest.raises(ValueError, match="even number"):
        harness.williams_orders(["a", "b", "c"])


def test_trained_checkpoints_compares_two_checkpoints_and_reads_clsr_gates(corpus, tmp_path):
    """``benchmarks.trained_checkpoints`` on two checkpoints trained on the same data: a B / A
    ratio per decoding batch size from the same sentences, and CLSR's decoder gates at batch 1."""
    from benchmarks import trained_checkpoints
    from tiny_corpus import task_args, train

    common = ["--criterion", "langshare_label_smoothed_cross_entropy", "--optimizer", "adam", "--lr", "0.005",
              "--max-tokens", "1000", "--cpu", "--no-epoch-checkpoints", "--num-workers", "0", "--max-update", "6",
              "--disable-validation", "--share-all-embeddings"]
    paths = {}
    for name, arch in (("base", ["--arch", "langshare_transformer_tiny"]),
                       ("clsr", ["--arch", "clsr_transformer_tiny", "--clsr-encoder-lang", "tgt"])):
        train(task_args(corpus) + common + arch + ["--save-dir", str(tmp_path / name)])
        paths[name] = str(tmp_path / name / "checkpoint_last.pt")
    for b, gates in (("clsr", True), ("base", False)):
        assert trained_checkpoints.main(["--a", paths["base"], "--b", paths[b], "--data", str(corpus["bin"]),
                                         "--name", b, "--sentences", "10", "--single", "2", "--reps", "1",
                                         "--split", "valid", "--results-dir", str(tmp_path)]) == 0
        result = json.loads((tmp_path / f"{b}.json").read_text())
        for metric in ("decode_single_tokens_per_s", "decode_batched_tokens_per_s"):
            m = result["metrics"][metric]
            assert m["A"] > 0 and m["B"] > 0 and m["ratio"] == pytest.approx(m["B"] / m["A"])
        if gates:
            assert 0 <= result["gates_b1"]["open_share"] <= 1 and 0 <= result["gates_b1"]["all_beams_agree"] <= 1
            assert result["gates_b1"]["unit_steps"] > 0
        else:
            assert result["gates_b1"] is None


def test_model_args_reach_both_models_under_a_tagged_name(monkeypatch, tmp_path, corpus):
    """`--model-args` (e.g. other dimensions) is appended to A's and B's flags, so it wins over
    the comparison's own; the result is stored as run TAG of NAME.json (named NAME-TAG), never over
    its untagged reference run. Without --tag the command refuses."""
    from benchmarks import run_baseline, run_methods

    seen = []
    monkeypatch.setattr(run_baseline, "corpus_dir", lambda langs=None: "unused")
    monkeypatch.setattr(run, "read_corpus", lambda _: (str(corpus["bin"]), list(corpus["langs"]), list(corpus["pairs"])))
    monkeypatch.setattr(report, "markdown", lambda result: "")
    monkeypatch.setattr(run_baseline, "run_comparison",
                        lambda settings, out_json, markdown, tag: seen.append((settings, out_json, tag)) or {})
    dims = "--encoder-embed-dim 512 --decoder-embed-dim 512"
    assert run_methods.main(["--only", "clsr-vs-baseline", "--model-args", dims, "--tag", "d512",
                             "--results-dir", str(tmp_path), "--no-append"]) == 0
    (settings, out_json, tag), = seen
    assert settings.name == "clsr-vs-baseline-d512" and out_json == str(tmp_path / "clsr-vs-baseline.json")
    assert tag == "d512"
    for flags in (settings.a, settings.b):
        assert flags[-4:] == dims.split()
    with pytest.raises(SystemExit):
        run_methods.main(["--only", "clsr-vs-baseline", "--model-args", dims])


def test_block_matmuls_prints_each_form_against_the_single_matmul(monkeypatch, capsys):
    """``benchmarks.block_matmuls`` (docs/benchmarks.md, multi-decoder): one table row per shape, the
    three forms' times and the split forms' speed ratios."""
    from benchmarks import block_matmuls

    monkeypatch.setattr(block_matmuls, "SHAPES", ((8, 16),))
    assert block_matmuls.main(["--rows", "8", "--blocks", "4", "--reps", "1"]) == 0
    row = capsys.readouterr().out.strip().splitlines()[-1]
    assert row.startswith("| 8 x 16 |") and row.count(" us") == 3 and row.count("(") == 2


def test_summary_tables_show_runs_side_by_side_and_meet_a_target_only_in_every_run(monkeypatch, tmp_path, capsys):
    from benchmarks import summary_tables

    def write(name, b64, spread=0.0):
        # six repetitions: A at 100 tokens/s, B at b64 * 100 give or take spread
        b = [100 * (b64 + spread * (-1) ** i) for i in range(6)]
        metrics = {"decode_batched_tokens_per_s": {"ratio": b64, "cpu_time": {"ratio": b64},
                                                   "A": {"values": [100.0] * 6}, "B": {"values": b}}}
        (tmp_path / f"{name}.json").write_text(json.dumps({"metrics": metrics, "machine": {}}))

    monkeypatch.setattr(summary_tables, "RESULTS", str(tmp_path))
    write("latent-depth-pruned-vs-static-mixed-r1", 0.93)
    write("latent-depth-pruned-vs-static-mixed-r2", 0.95)
    write("adaptive-sparse-layers-vs-static-mixed-r1", 0.92)
    write("adaptive-sparse-layers-vs-static-mixed-r2", 0.88)
    assert summary_tables.main(["--tag", "r1", "--tag", "r2"]) == 0
    rows = {line.split(" | ")[0].lstrip("| "): line for line in capsys.readouterr().out.splitlines()}
    latent = next(v for k, v in rows.items() if k.startswith("latent depth"))
    adaptive = next(v for k, v in rows.items() if k.startswith("adaptive layer"))
    assert "| 0.93 / 0.95 |" in latent and latent.endswith("| yes |")
    assert "| **0.92 / 0.88** |" in adaptive and adaptive.endswith("| no |")
    assert next(v for k, v in rows.items() if k.startswith("CLSR")).endswith("| not run |")
    assert summary_tables.main(["--tag", "r2"]) == 0  # one run: its cell with the CPU-time ratio
    assert "| 0.95 (0.95) |" in capsys.readouterr().out

    # pooled: the median of every repetition's B / A with a bootstrap interval; the verdict says
    # whether the interval lies above the target, below it, or across it
    write("latent-depth-pruned-vs-static-mixed-r1", 0.95, spread=0.01)
    write("latent-depth-pruned-vs-static-mixed-r2", 0.93, spread=0.01)
    write("adaptive-sparse-layers-vs-static-mixed-r1", 0.95, spread=0.08)
    write("adaptive-sparse-layers-vs-static-mixed-r2", 0.85, spread=0.08)
    assert summary_tables.main(["--pooled", "--tag", "r1", "--tag", "r2"]) == 0
    rows = {line.split(" | ")[0].lstrip("| "): line for line in capsys.readouterr().out.splitlines()}
    latent = next(v for k, v in rows.items() if k.startswith("latent depth"))
    adaptive = next(v for k, v in rows.items() if k.startswith("adaptive layer"))
    assert "| 0.94 [0.93, 0.95] |" in latent and latent.endswith("| yes |")
    assert adaptive.endswith("| within noise |") and "**0.90 [" in adaptive
    write("adaptive-sparse-layers-vs-static-mixed-r1", 0.80, spread=0.01)
    write("adaptive-sparse-layers-vs-static-mixed-r2", 0.82, spread=0.01)
    assert summary_tables.main(["--pooled", "--tag", "r1", "--tag", "r2"]) == 0
    out = capsys.readouterr().out
    assert "| **0.81 [" in out and "| mixed b64 >= 0.90 | no |" in out
    # one row per comparison, pooled over the tagged runs it has
    write("latent-depth-pruned-vs-static-mixed-r3", 0.95, spread=0.01)
    assert summary_tables.main(["--pooled", "latent-depth-pruned-vs-static-mixed", "adaptive-sparse-layers-vs-static-mixed",
                               "--tag", "r1", "--tag", "r2", "--tag", "r3"]) == 0
    out = capsys.readouterr().out
    assert "| `latent-depth-pruned-vs-static-mixed` | 3 | - | 0.94 [" in out
    assert "| `adaptive-sparse-layers-vs-static-mixed` | 2 | - | 0.81 [" in out
    # the summary pools each comparison over the tagged runs it has, and says so where it has fewer
    assert summary_tables.main(["--pooled", "--tag", "r1", "--tag", "r2", "--tag", "r3"]) == 0
    rows = {line.split(" | ")[0].lstrip("| "): line for line in capsys.readouterr().out.splitlines()}
    latent = next(v for k, v in rows.items() if k.startswith("latent depth"))
    adaptive = next(v for k, v in rows.items() if k.startswith("adaptive layer"))
    assert "| 0.94 [0.94, 0.96] |" in latent and latent.endswith("| yes |")
    assert "| **0.81 [0.80, 0.82], 2 runs** |" in adaptive and adaptive.endswith("| no |")


def _result(b64, spread=0.0, load=1.0):
    """A stored result with one metric: six repetitions, A at 100 tokens/s, B at b64 * 100 +- spread."""
    b = [100 * (b64 + spread * (-1) ** i) for i in range(6)]
    metric = {"ratio": b64, "cpu_time": {"ratio": b64}, "A": {"values": [100.0] * 6}, "B": {"values": b}}
    return {"name": "x", "metrics": {"decode_batched_tokens_per_s": metric}, "machine": {"loadavg_before": [load]}}


def test_a_comparisons_runs_share_one_file_and_the_tables_read_either_form(monkeypatch, tmp_path, capsys):
    """``report.store_run``: an untagged run alone is a plain result (as every reader expects); a
    tagged run joins the comparison's file as a run beside the others, and the same tag again
    replaces only its own run. The summary tables print the same bytes from one file per
    comparison as from one file per run (results stored before runs were kept together)."""
    from benchmarks import summary_tables

    together, apart = tmp_path / "together", tmp_path / "apart"
    together.mkdir(), apart.mkdir()
    name = "latent-depth-pruned-vs-static-mixed"
    path = str(together / f"{name}.json")
    report.store_run(_result(0.87, load=2.0), path)
    assert json.loads(open(path).read())["metrics"]["decode_batched_tokens_per_s"]["ratio"] == 0.87  # plain form
    report.store_run(_result(0.90, 0.01), path, tag="r1")
    report.store_run(_result(0.50), path, tag="r2")
    report.store_run(_result(0.94, 0.02), path, tag="r2")  # the same tag again: replaces r2 only
    stored = json.loads(open(path).read())
    assert stored["comparison"] == name and [r["tag"] for r in stored["runs"]] == ["", "r1", "r2"]
    assert [r["metrics"]["decode_batched_tokens_per_s"]["ratio"] for r in stored["runs"]] == [0.87, 0.90, 0.94]
    assert [r["tag"] for r in report.read_runs(path)] == ["", "r1", "r2"]
    for run in stored["runs"]:  # the same runs, one file each, as benchmarks/results held them before
        tagged = f"{name}-{run['tag']}" if run["tag"] else name
        (apart / f"{tagged}.json").write_text(json.dumps({k: v for k, v in run.items() if k != "tag"}))

    outputs = []
    for folder in (together, apart):
        monkeypatch.setattr(summary_tables, "RESULTS", str(folder))
        for argv in ([], ["--tag", "r1", "--tag", "r2"], ["--pooled", "--tag", "r1", "--tag", "r2"],
                     ["--pooled", name, "--tag", "r1", "--tag", "r2"], [name, "--tag", "r1"], [name]):
            assert summary_tables.main(argv) == 0
            outputs.append(capsys.readouterr().out)
    assert outputs[:6] == outputs[6:]
    assert "| **0.87 (0.87)** |" in outputs[0] and "| 0.90 / 0.94 |" in outputs[1]
    assert f"| `{name}` | 2 | - | " in outputs[3] and outputs[5].rstrip().endswith("| 2.0-2.0 |")
    assert f"| `{name}` (r1) | " in outputs[4]


def test_a_results_file_that_holds_no_result_is_refused_before_measuring(tmp_path):
    path = tmp_path / "clsr-vs-baseline.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="clsr-vs-baseline.json: .*move it away"):
        report.store_run(_result(0.9), str(path), tag="r1")
    assert path.read_text() == "{not json"  # nothing lost
    settings = harness.Settings(name="x", data="unused", langs=[], lang_pairs=[], a=[], b=[])
    with pytest.raises(ValueError, match="move it away"):  # before building anything
        harness.run_comparison(settings, out_json=str(path))


def test_ddp_scaling_splits_the_efficiency_into_sharing_the_machine_and_ddp():
    """``--together``: efficiency t1/t2 = sharing (t1 / both at once) x DDP (both at once / t2), each
    against the baseline's of the same repetition."""
    from benchmarks import ddp_scaling

    def rows(t1, together, t2):
        return {"t1": [t1] * 3, "t2": [t2] * 3, "cpu1": [t1] * 3, "cpu2": [t2] * 3, "t1together": [together] * 3,
                "cpu1together": [together] * 3}

    out = ddp_scaling.summary({"baseline": rows(40.0, 40.0, 50.0), "multistack": rows(60.0, 66.0, 80.0)})
    row = out["multistack"]
    assert row["efficiency"][0] == pytest.approx(0.75)
    assert row["vs_baseline"][0] == pytest.approx(0.75 / 0.8)
    assert row["sharing_vs_baseline"][0] == pytest.approx(60 / 66)
    assert row["ddp_vs_baseline"][0] == pytest.approx((66 / 80) / 0.8)
    assert row["sharing_vs_baseline"][0] * row["ddp_vs_baseline"][0] == pytest.approx(row["vs_baseline"][0])
    assert "sharing_efficiency" not in ddp_scaling.summary({"baseline": {k: v for k, v in rows(1, 1, 1).items()
                                                                       if "together" not in k}})["baseline"]


def test_the_decoding_count_splits_the_plugins_reads_per_step_by_batch_kind(tmp_path):
    """``benchmarks.cuda_syncs --decoding`` on the CPU: per decoder step of a beam search, the reads of
    a one-direction batch and of a batch of every direction, the plugin's apart (the adapters route a
    one-direction batch without reading the device at any step, one of several directions once a step)."""
    from benchmarks import cuda_syncs
    from benchmarks.ddp_scaling import make_corpus

    data = make_corpus(str(tmp_path), 32)
    counted = cuda_syncs.count_decoding("adapters", data, 32, device="cpu")
    one, every = counted["one direction"], counted["every direction"]
    assert one["decoder_steps"] > 10 and every["decoder_steps"] > 10, counted
    assert one["in_plugin_per_step"] * one["decoder_steps"] <= 2, one  # the batch's ids, once
    assert every["in_plugin_per_step"] >= 1, every
    assert every["waits_per_step"] - every["in_plugin_per_step"] > 5, every  # fairseq's own reads, counted apart
