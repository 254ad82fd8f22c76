"""lsl_transformer: language-specific layers, their spec, partial components, separate decoders,
search mode (Eq. 1) and selection, dense initialisation, per-sentence routing."""

import argparse
import copy
import json

import pytest
import torch
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from fairseq.sequence_generator import SequenceGenerator

import fairseq_langshare.models.lsl_transformer  # noqa: F401  (registers lsl_transformer)
from fairseq_langshare import analysis
from fairseq_langshare.analysis.lsl_weights import mixing_weights_from_state_dict, select_architecture
from fairseq_langshare.criterions.langshare_label_smoothed_cross_entropy import LangshareLabelSmoothedCrossEntropy
from fairseq_langshare.export import _plain
from fairseq_langshare.models.lsl_transformer import key_side, lsl_sides
from fairseq_langshare.modules.language_specific_layer import (
    LanguageSpecificAttention,
    LanguageSpecificDecoderLayer,
    LayerSpecError,
    MixedEncoderLayer,
    format_layer_spec,
    parse_layer_spec,
)
from test_hydra_and_distributed import train_two_gloo_ranks
from test_language_aware_model import (
    assert_beam_search_mixed_equals_alone,
    assert_incremental_equals_full,
    collate,
    mixed_indices,
    row_keys,
)
from tiny_corpus import build_task_and_model, task_args, train

M2M = ["en-xx", "en-yy", "xx-yy"]  # xx-yy has valid/test data only: batches then mix source languages too

VARIANTS = {  # name: (flags, sides whose ids change the output)
    "encoder-src-tgt": (["--lsl-encoder-layers", "SRC={1,2} & TGT={4}"], ("src", "tgt")),
    "ls-ffn": (["--lsl-encoder-layers", "SRC={1} & TGT={3}", "--lsl-component", "ffn",
                "--lsl-decoder-layers", "TGT={2}"], ("src", "tgt")),
    "ls-attention": (["--lsl-encoder-layers", "SRC={2} & TGT={4}", "--lsl-component", "attention",
                      "--lsl-decoder-layers", "SRC={1} & TGT={2}"], ("src", "tgt")),
    "separate-decoder-prenorm": (["--lsl-encoder-layers", "TGT={3,4}", "--lsl-separate-decoder",
                                  "--encoder-normalize-before", "--decoder-normalize-before"], ("tgt",)),
    "decoder-src-tgt": (["--lsl-decoder-layers", "SRC={1} & TGT={2}"], ("src", "tgt")),
    "search": (["--lsl-search", "--lsl-separate-decoder"], ("src", "tgt")),
}



@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    yield

def build(corpus, *flags, pairs=M2M, arch="lsl_transformer_tiny", seed=1):
    task, model, args = build_task_and_model(corpus, arch=arch, extra=["--dropout", "0.0", *flags], pairs=pairs,
                                             seed=seed)
    task.load_dataset("valid")
    return task, model, args


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(corpus, request):
    flags, sides = VARIANTS[request.param]
    task, model, _ = build(corpus, *flags)
    return task, model.eval(), sides


def logits(model, batch):
    return model(**batch["net_input"])[0]


# --- invariance: a sentence's output does not depend on the other sentences of its batch ------

def test_mixed_batch_equals_each_sentence_alone(variant):
    task, model, _ = variant
    batch = collate(task, mixed_indices(task))
    assert len(set(batch["net_input"]["src_lang_id"].tolist())) == 2 and len(set(batch["net_input"]["tgt_lang_id"].tolist())) == 2
    mixed = dict(zip(row_keys(task, batch), logits(model, batch)))
    for i in mixed_indices(task):
        alone = collate(task, [i])
        n = alone["target"].size(1)
        torch.testing.assert_close(mixed[row_keys(task, alone)[0]][:n], logits(model, alone)[0], atol=1e-5, rtol=1e-4)


def test_language_ids_change_the_output(variant):
    """Guards the invariance tests: routing a sentence through another language's weights
    changes its output (so a routing bug could not pass unnoticed)."""
    task, model, sides = variant
    batch = collate(task, [0, 1])
    for side in sides:
        swapped = {**batch, "net_input": dict(batch["net_input"])}
        key = f"{side}_lang_id"
        swapped["net_input"][key] = (batch["net_input"][key] + 1) % len(task.inventory)
        assert not torch.allclose(logits(model, batch), logits(model, swapped), atol=1e-4), side


def test_incremental_decoding_equals_full_decoding(variant):
    task, model, _ = variant
    assert_incremental_equals_full(task, model, collate(task, mixed_indices(task)))


def test_beam_search_mixed_equals_alone(variant):
    task, model, _ = variant
    assert_beam_search_mixed_equals_alone(task, model, max_len_b=12)


def test_beam_search_scores_equal_full_forward_scores(variant):
    """Beam search reorders the per-language caches at every step (and drops finished rows):
    the score of every hypothesis must be what a full forward pass gives its tokens."""
    task, model, _ = variant
    model = copy.deepcopy(model)
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=12)
    batch = collate(task, mixed_indices(task))
    hypos = generator.generate([model], batch)
    model.decoder.set_beam_size(1)
    ni = batch["net_input"]
    eos = task.target_dictionary.eos()
    for row, beams in enumerate(hypos):
        for hypo in beams:
            tokens = hypo["tokens"].unsqueeze(0)
            prev = torch.cat([tokens.new_full((1, 1), eos), tokens[:, :-1]], dim=1)
            net_input = {k: ni[k][row: row + 1] for k in ("src_tokens", "src_lengths", "src_lang_id", "tgt_lang_id")}
            out = model(**net_input, prev_output_tokens=prev)
            lprobs = model.get_normalized_probs(out, log_probs=True)[0]
            expected = lprobs.gather(-1, tokens[0].unsqueeze(-1)).squeeze(-1)
            torch.testing.assert_close(hypo["positional_scores"], expected, atol=1e-4, rtol=1e-4)


# --- structure: depth, copies ----------------------------------------------------------------

def test_depth_is_exactly_encoder_layers(corpus):
    """An LSL replaces the shared layer at its position (the public fork doubled the depth)."""
    task, model, args = build(corpus, "--lsl-encoder-layers", "SRC={1,2} & TGT={4}")
    assert args.encoder_layers == 4 and len(model.encoder.layers) == 4
    assert [type(l).__name__ for l in model.encoder.layers] == [
        "LanguageSpecificEncoderLayer", "LanguageSpecificEncoderLayer", "TransformerEncoderLayerBase",
        "LanguageSpecificEncoderLayer"]
    rows_run = []
    hooks = [m.register_forward_hook(lambda mod, inp, out: rows_run.append(inp[0].size(1)))
             for m in model.encoder.modules() if isinstance(m, TransformerEncoderLayerBase)]
    model.eval()
    single = collate(task, [0, 1, 2])  # one direction
    logits(model, single)
    assert len(rows_run) == 4, "a single-language batch runs exactly --encoder-layers layers"
    rows_run.clear()
    mixed = collate(task, mixed_indices(task))
    logits(model, mixed)
    assert sum(rows_run) == 4 * mixed["target"].size(0), "every sentence passes through exactly 4 layers"
    for h in hooks:
        h.remove()


def n_params(module):
    return sum(p.numel() for p in module.parameters())


def test_lsl_holds_exactly_one_copy_per_language(corpus):
    task, model, _ = build(corpus, "--lsl-encoder-layers", "SRC={1} & TGT={3}", "--lsl-separate-decoder")
    n = len(task.inventory)
    shared = n_params(model.encoder.layers[1])
    for i in (0, 2):
        assert len(model.encoder.layers[i].per_lang) == n
        assert n_params(model.encoder.layers[i]) == n * shared
    for layer in model.decoder.layers:
        assert isinstance(layer, LanguageSpecificDecoderLayer) and len(layer.per_lang) == n
    ffn_task, ffn, _ = build(corpus, "--lsl-encoder-layers", "SRC={1}", "--lsl-component", "ffn")
    layer = ffn.encoder.layers[0]
    ffn_block = n_params(layer.fc1.per_lang[0]) + n_params(layer.fc2.per_lang[0]) + n_params(layer.final_layer_norm.per_lang[0])
    assert n_params(layer) == shared - ffn_block + n * ffn_block
    _, att, _ = build(corpus, "--lsl-encoder-layers", "TGT={2}", "--lsl-component", "attention")
    layer = att.encoder.layers[1]
    assert isinstance(layer.self_attn, LanguageSpecificAttention)
    att_block = n_params(layer.self_attn.per_lang[0]) + n_params(layer.self_attn_layer_norm.per_lang[0])
    assert n_params(layer) == shared - att_block + n * att_block


# --- gradients -------------------------------------------------------------------------------

@pytest.mark.parametrize("flags", [
    ["--lsl-encoder-layers", "SRC={1} & TGT={3}", "--lsl-separate-decoder"],
    ["--lsl-encoder-layers", "SRC={1} & TGT={3}", "--lsl-component", "ffn", "--lsl-decoder-layers", "TGT={1}"],
], ids=["layer", "ffn"])
def test_absent_languages_get_no_gradient(corpus, flags):
    task, model, args = build(corpus, *flags)
    model.train()
    batch = collate(task, list(range(6)))  # en->xx only
    ids = task.inventory.id
    assert set(batch["net_input"]["src_lang_id"].tolist()) == {ids("en")}
    assert set(batch["net_input"]["tgt_lang_id"].tolist()) == {ids("xx")}
    logits(model, batch).logsumexp(-1).sum().backward()
    present = {"src": ids("en"), "tgt": ids("xx")}
    sides = lsl_sides(args)
    checked = 0
    for name, p in model.named_parameters():
        if ".per_lang." not in name:
            assert p.grad is not None, name
            continue
        lang = int(name.split(".per_lang.")[1].split(".")[0])
        if lang == present[key_side(name, sides)]:
            assert p.grad is not None and p.grad.abs().sum() > 0, name
        else:
            assert p.grad is None or not p.grad.any(), name
            checked += 1
    assert checked > 0


# --- search mode and selection ---------------------------------------------------------------

def test_search_weights_are_a_softmax_per_layer_and_learn(corpus):
    task, model, _ = build(corpus, "--lsl-search", pairs=["en-xx", "en-yy"])
    layers = list(model.encoder.layers)
    assert all(isinstance(l, MixedEncoderLayer) for l in layers)
    assert all(torch.equal(l.mix_logits.detach(), torch.zeros(3)) for l in layers), "explicit init: uniform"
    criterion = LangshareLabelSmoothedCrossEntropy(task, sentence_avg=False, label_smoothing=0.1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    model.train()
    batch = collate(task, mixed_indices(task))
    for _ in range(3):
        optimizer.zero_grad()
        loss, sample_size, log = criterion(model, batch)
        loss.backward()
        optimizer.step()
    for i, layer in enumerate(layers, start=1):
        w = layer.mixing_weights()
        assert torch.all(w > 0) and w.sum().item() == pytest.approx(1.0, abs=1e-6)
        assert not torch.allclose(w, torch.full((3,), 1 / 3)), "the weights change with training"
        logged = [log[f"stat_lsl_mix_{i:02d}_{kind}"] / sample_size for kind in ("shared", "src", "tgt")]
        assert sum(logged) == pytest.approx(1.0, abs=1e-5)
    assert mixing_weights_from_state_dict(model.state_dict()) == [l.mixing_weights().tolist() for l in layers]


def test_selection_picks_the_arg_max_per_layer():
    weights = [[0.2, 0.5, 0.3], [0.6, 0.3, 0.1], [0.1, 0.2, 0.7], [0.34, 0.33, 0.33], [1 / 3, 1 / 3, 1 / 3]]
    spec = select_architecture(weights)
    assert spec == "SRC={1} & TGT={3}"  # ties go to shared
    assert parse_layer_spec(spec, 5) == ["src", None, "tgt", None, None]


def save_checkpoint(model, args, path):
    """A checkpoint as fairseq-train writes it (cfg as plain containers)."""
    torch.save({"args": None, "cfg": {"model": _plain(args), "task": {"_name": "multilingual_langshare"}}, "model": model.state_dict(),
                "optimizer_history": [{"criterion_name": "c", "optimizer_name": "o", "lr_scheduler_state": {"best": None},
                                       "num_updates": 0}],
                "extra_state": {"train_iterator": {"epoch": 1, "iterations_in_epoch": 0}}}, path)
    return path


def test_analyze_cli_plots_and_prints_the_selected_flag(corpus, tmp_path, capsys):
    task, model, args = build(corpus, "--lsl-search", "--lsl-separate-decoder", pairs=["en-xx", "en-yy"])
    with torch.no_grad():
        for layer, logits_ in zip(model.encoder.layers, ([0, 2, 0], [1, 0, 0], [0, 0, 3], [0, 0.5, 1])):
            layer.mix_logits.copy_(torch.tensor(logits_))
    ckpt = save_checkpoint(model, args, tmp_path / "search.pt")
    with torch.no_grad():  # a second run (another seed): other weights, the same arg max per layer
        for layer, logits_ in zip(model.encoder.layers, ([0, 2.2, 0], [1.1, 0, 0], [0, 0, 2.8], [0, 0.4, 1.1])):
            layer.mix_logits.copy_(torch.tensor(logits_))
    ckpt2 = save_checkpoint(model, args, tmp_path / "search2.pt")
    parser = argparse.ArgumentParser(prog="langshare")
    analysis.add_subcommand(parser.add_subparsers(dest="command"))
    parsed = parser.parse_args(["analyze", "lsl", str(ckpt), str(ckpt2), "--out", str(tmp_path / "out")])
    assert parsed.func(parsed) == 0
    printed = capsys.readouterr().out
    assert '--lsl-encoder-layers "SRC={1} & TGT={3,4}"' in printed.splitlines()
    assert "--arch lsl_transformer_tiny" in printed and "--lsl-separate-decoder" in printed
    result = json.loads((tmp_path / "out" / "lsl_weights.json").read_text())
    assert result["architecture"] == "SRC={1} & TGT={3,4}" and len(result["layers"]) == 4
    png = (tmp_path / "out" / "lsl_weights.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    _, plain, plain_args = build(corpus, "--lsl-encoder-layers", "SRC={1}", pairs=["en-xx", "en-yy"])
    with pytest.raises(ValueError, match="has no LSL mixing weights"):
        analysis.lsl_weights.analyze([save_checkpoint(plain, plain_args, tmp_path / "plain.pt")], tmp_path / "o2")


def test_two_checkpoints_of_one_seed_are_refused_in_one_line(corpus, tmp_path):
    """Was: a run's checkpoint_best.pt and checkpoint_last.pt averaged as two seeds' runs (Figure 3's band)."""
    _, model, args = build(corpus, "--lsl-search", pairs=["en-xx", "en-yy"])
    paths = []
    for seed, scale in ((1, 1.0), (1, 1.5), (2, 2.0)):
        with torch.no_grad():
            for layer in model.encoder.layers:
                layer.mix_logits.copy_(torch.tensor([0.0, 1.0, 2.0]) * scale)
        path = save_checkpoint(model, args, tmp_path / f"run{len(paths)}.pt")
        state = torch.load(path, weights_only=True)
        state["cfg"]["common"] = {"seed": seed}
        torch.save(state, path)
        paths.append(path)
    with pytest.raises(ValueError, match=r"run0.pt and .*run1.pt were trained with the same --seed 1 \(two checkpoints "
                                         r"of one run"):
        analysis.lsl_weights.analyze(paths[:2], tmp_path / "o1")
    assert analysis.lsl_weights.analyze([paths[0], paths[2]], tmp_path / "o2", verbose=False)


def test_the_same_checkpoint_twice_is_refused_in_one_line(corpus, tmp_path, capsys):
    """Was: averaged as two seeds' runs, drawn as Figure 3's band between runs (of zero width)."""
    import shutil

    from fairseq_langshare.cli import main

    _, model, args = build(corpus, "--lsl-search", pairs=["en-xx", "en-yy"])
    ckpt = save_checkpoint(model, args, tmp_path / "search.pt")
    (tmp_path / "sub").mkdir()
    again = tmp_path / "sub" / ".." / "search.pt"
    copy = tmp_path / "copy.pt"
    shutil.copyfile(ckpt, copy)
    for pair, said in (((ckpt, ckpt), f"{ckpt} is given twice"),
                       ((ckpt, again), f"{ckpt} and {again} are the same file"),
                       ((ckpt, copy), f"{ckpt} and {copy} hold the same weights")):
        assert main(["analyze", "lsl", *map(str, pair), "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and said in err and "pass each run's checkpoint once" in err, err
    assert not (tmp_path / "out").exists()


# --- dense pre-training ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def dense_checkpoint(corpus, tmp_path_factory):
    _, baseline, args = build_task_and_model(corpus, arch="langshare_transformer_tiny",
                                             extra=["--encoder-layers", "4"], pairs=["en-xx", "en-yy"], seed=11)
    return save_checkpoint(baseline, args, tmp_path_factory.mktemp("dense") / "baseline.pt"), baseline


def test_dense_init_copies_every_shared_layer_and_lsl_copy_exactly(corpus, dense_checkpoint):
    path, baseline = dense_checkpoint
    dense = baseline.state_dict()
    task, model, args = build(corpus, "--lsl-encoder-layers", "SRC={1} & TGT={3}", "--lsl-separate-decoder",
                              "--lsl-component", "layer", "--lsl-dense-init", str(path), pairs=["en-xx", "en-yy"])
    assert args.lsl_dense_init is None, "consumed: a checkpoint of this model does not re-read the dense file"
    state = model.state_dict()
    n = len(task.inventory)
    for key, value in dense.items():
        if key == "lang_inventory":
            continue
        if key.startswith("encoder.layers.0.") or key.startswith("encoder.layers.2.") or key.startswith("decoder.layers."):
            prefix, rest = key.split(".layers.")[0], key.split(".layers.")[1].split(".", 1)
            copies = [state[f"{prefix}.layers.{rest[0]}.per_lang.{l}.{rest[1]}"] for l in range(n)]
            assert all(torch.equal(c, value) for c in copies), key
        else:
            assert torch.equal(state[key], value), key
    # and the search model: shared branch and every copy of every layer
    _, search, _ = build(corpus, "--lsl-search", "--lsl-dense-init", str(path), pairs=["en-xx", "en-yy"])
    s = search.state_dict()
    for key in ("self_attn.k_proj.weight", "fc1.weight", "final_layer_norm.bias"):
        for i in range(4):
            assert torch.equal(s[f"encoder.layers.{i}.shared.{key}"], dense[f"encoder.layers.{i}.{key}"])
            for l in range(n):
                assert torch.equal(s[f"encoder.layers.{i}.specific.per_lang.{l}.{key}"], dense[f"encoder.layers.{i}.{key}"])
    assert all(torch.equal(l.mix_logits.detach(), torch.zeros(3)) for l in search.encoder.layers)


def test_dense_init_from_a_search_checkpoint_uses_its_shared_layers(corpus, dense_checkpoint, tmp_path):
    _, search, search_args = build(corpus, "--lsl-search", "--lsl-separate-decoder", pairs=["en-xx", "en-yy"], seed=5)
    path = save_checkpoint(search, search_args, tmp_path / "search.pt")
    _, model, _ = build(corpus, "--lsl-encoder-layers", "TGT={2}", "--lsl-separate-decoder", "--lsl-component", "ffn",
                        "--lsl-dense-init", str(path), pairs=["en-xx", "en-yy"])
    s, m = search.state_dict(), model.state_dict()
    assert torch.equal(m["encoder.layers.0.fc1.weight"], s["encoder.layers.0.shared.fc1.weight"])
    for l in range(3):
        assert torch.equal(m[f"encoder.layers.1.fc1.per_lang.{l}.weight"], s["encoder.layers.1.shared.fc1.weight"])
        # separate decoder from a separate decoder: language for language
        assert torch.equal(m[f"decoder.layers.1.per_lang.{l}.fc2.weight"], s[f"decoder.layers.1.per_lang.{l}.fc2.weight"])
    assert torch.equal(m["encoder.layers.1.self_attn.q_proj.weight"], s["encoder.layers.1.shared.self_attn.q_proj.weight"])


def test_dense_init_with_other_dimensions_is_a_clear_error(corpus, dense_checkpoint):
    path, _ = dense_checkpoint
    with pytest.raises(ValueError, match=r"--lsl-dense-init .*shape \(64, 32\) there but \(128, 32\) here; the dense "
                                         "model needs the same dimensions"):
        build(corpus, "--encoder-ffn-embed-dim", "128", "--lsl-dense-init", str(path), pairs=["en-xx", "en-yy"])
    with pytest.raises(ValueError, match="no dense weight for encoder.layers.4"):
        build(corpus, "--encoder-layers", "5", "--lsl-dense-init", str(path), pairs=["en-xx", "en-yy"])


# --- the layer spec --------------------------------------------------------------------------

@pytest.mark.parametrize("spec,layers,expected", [
    ("SRC={3,4} & TGT={13,14,15}", 16, {3: "src", 4: "src", 13: "tgt", 14: "tgt", 15: "tgt"}),
    ("TGT={13 - 16}", 16, {13: "tgt", 14: "tgt", 15: "tgt", 16: "tgt"}),
    ("src={1}&tgt={}", 4, {1: "src"}),
    ("SRC=∅ & TGT={2}", 4, {2: "tgt"}),
    ("", 4, {}),
])
def test_layer_spec_parses_the_papers_notation(spec, layers, expected):
    sides = parse_layer_spec(spec, layers)
    assert sides == [expected.get(i) for i in range(1, layers + 1)]
    assert parse_layer_spec(format_layer_spec(sides), layers) == sides


def test_every_formatted_layer_spec_parses_back():
    """What `langshare analyze lsl` prints (``format_layer_spec``, ``SRC={}`` for a side with no layer)
    can be passed back as --lsl-encoder-layers: every choice of sides on 1-4 layers round-trips."""
    import itertools

    for layers in range(1, 5):
        for sides in itertools.product(("src", "tgt", None), repeat=layers):
            assert parse_layer_spec(format_layer_spec(sides), layers) == list(sides), format_layer_spec(sides)


@pytest.mark.parametrize("flags,message", [
    (["--lsl-encoder-layers", "SRC={0,2}"], r"layer 0 is out of range: there are 4 layers, numbered 1\.\.4 .* change --encoder-layers"),
    (["--lsl-encoder-layers", "TGT={5}"], r"layer 5 is out of range: there are 4 layers, numbered 1\.\.4"),
    (["--lsl-decoder-layers", "TGT={3}"], r"--lsl-decoder-layers 'TGT=\{3\}': layer 3 is out of range: there are 2 layers.* --decoder-layers"),
    (["--lsl-encoder-layers", "SRC={1,2} & TGT={2,3}"], r"layer 2 is in both SRC and TGT; .*remove it from one"),
    (["--lsl-encoder-layers", "SRC=1,2"], r"malformed layer spec at 'SRC=1,2'; expected \"SRC=\{1,2\} & TGT=\{4\}\""),
    (["--lsl-encoder-layers", "FOO={1}"], r"malformed layer spec at 'FOO=\{1\}'"),
    (["--lsl-encoder-layers", "SRC={a}"], r"'a' is not a layer number or range"),
    (["--lsl-encoder-layers", "SRC={1} & SRC={2}"], r"SRC is given twice"),
    (["--lsl-encoder-layers", "SRC={3-1}"], r"range '3-1' runs backwards"),
    (["--lsl-search", "--lsl-encoder-layers", "SRC={1}"], r"--lsl-search .* takes no --lsl-encoder-layers"),
    (["--lsl-separate-decoder", "--lsl-decoder-layers", "TGT={1}"], r"takes no --lsl-decoder-layers"),
    (["--lsl-search", "--lsl-component", "ffn"], r"drop --lsl-component ffn"),
])
def test_bad_layer_specs_are_one_line_errors(corpus, flags, message):
    with pytest.raises(LayerSpecError, match=message) as error:
        build(corpus, *flags, pairs=["en-xx", "en-yy"])
    assert "\n" not in str(error.value)


# --- distributed training with unused language branches --------------------------------------

@pytest.mark.slow
def test_two_process_gloo_training_with_unused_branches(corpus, tmp_path):
    """Rank batches leave some languages' LSLs unused (legacy_ddp, ranks started by hand)."""
    outs = train_two_gloo_ranks(corpus, tmp_path, ["--arch", "lsl_transformer_tiny", "--lsl-encoder-layers",
                                                   "SRC={1} & TGT={3,4}", "--lsl-separate-decoder"], max_tokens=200)
    assert '"num_updates": "3"' in outs[0]
    assert (tmp_path / "ckpt" / "checkpoint_last.pt").exists()


# --- the workflow end to end: search -> select -> train (dense init) -------------------------

TRAIN = ["--criterion", "langshare_label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--optimizer", "adam",
         "--lr", "0.005", "--max-tokens", "1000", "--log-format", "json", "--log-interval", "5", "--cpu",
         "--no-epoch-checkpoints", "--num-workers", "0", "--seed", "3", "--disable-validation"]


@pytest.mark.slow
def test_search_select_dense_init_train(corpus, tmp_path, capsys):
    search_dir = tmp_path / "search"
    records = train(task_args(corpus) + TRAIN + ["--arch", "lsl_transformer_tiny", "--lsl-search", "--lsl-separate-decoder",
                                                 "--max-update", "30", "--save-dir", str(search_dir)])
    logged = [r for r in records if "stat_lsl_mix_01_shared" in r]
    assert logged, "the mixing weights are logged as statistics"
    last = logged[-1]
    assert sum(float(last[f"stat_lsl_mix_01_{k}"]) for k in ("shared", "src", "tgt")) == pytest.approx(1.0, abs=2e-3)
    result = analysis.lsl_weights.analyze([search_dir / "checkpoint_last.pt"], tmp_path / "analysis")
    spec = result["architecture"]
    printed = capsys.readouterr().out.splitlines()
    assert result["flag"] in printed and any(l.startswith("train it with") and "--arch lsl_transformer_tiny" in l for l in printed)
    records = train(task_args(corpus) + TRAIN + ["--arch", "lsl_transformer_tiny", "--lsl-encoder-layers", spec,
                                                 "--lsl-separate-decoder",
                                                 "--lsl-dense-init", str(search_dir / "checkpoint_last.pt"),
                                                 "--max-update", "10", "--save-dir", str(tmp_path / "lsl")])
    assert any(int(float(r.get("num_updates", 0))) == 10 for r in records)
    saved = torch.load(tmp_path / "lsl" / "checkpoint_last.pt", weights_only=True)
    assert saved["cfg"]["model"].lsl_dense_init is None and saved["cfg"]["model"].lsl_encoder_layers == spec
