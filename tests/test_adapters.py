"""langshare_adapter_transformer: bottleneck adapters per language or per language pair, their
placement, per-sentence routing, the frozen fine-tuning mode, the pair table, and export."""

import copy
import re

import pytest
import torch
from fairseq import checkpoint_utils

from fairseq_langshare.export import export_pair
from fairseq_langshare.models.adapter_transformer import (
    AdapterSingleTransformerModel,
    AdapterTransformerModel,
    adapter_sides,
)
from fairseq_langshare.modules.adapters import UP_INIT_STD, Adapter, MissingPairAdapter
from test_export import TRAIN
from test_language_aware_model import (
    assert_beam_search_mixed_equals_alone,
    assert_incremental_equals_full,
    collate,
    mixed_indices,
    row_keys,
)
from test_lsl import save_checkpoint
from tiny_corpus import PKG_DIR, build_task_and_model, generate, task_args, train

M2M = ["en-xx", "en-yy", "xx-yy"]  # xx-yy has valid/test data only: batches then mix source languages too
ARCH = "langshare_adapter_transformer_tiny"
D, B = 32, 8  # the tiny preset: embedding dim and adapter bottleneck
PER_ADAPTER = 2 * D * B + B + 3 * D  # layer norm 2d + down (d*b + b) + up (b*d + d)


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    yield


def build(corpus, *flags, pairs=M2M, seed=1, arch=ARCH, langs=None, langtok=True):
    task, model, args = build_task_and_model(corpus, arch=arch, extra=["--dropout", "0.0", *flags], pairs=pairs,
                                             seed=seed, langs=langs, langtok=langtok)
    task.load_dataset("valid")
    return task, model, args


def scramble_adapters(model, seed=0):
    """Far-from-identity, distinct adapters: a routing error then shows in the outputs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".adapter." in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5 + (1.0 if "layer_norm.weight" in name else 0.0))
    return model


def logits(model, batch):
    return model(**batch["net_input"])[0]


def n_params(module):
    return sum(p.numel() for p in module.parameters())


# --- placement: which layers, indexed by what, how many parameters ---------------------------

EXPECTED = {  # placement: (encoder sides for 3 layers, decoder sides for 2 layers)
    "enc-src": (["src"] * 3, [None, None]),
    "enc-src-tgt": (["src", "tgt", "tgt"], [None, None]),  # odd depth: the middle layer is in the target half
    "enc-dec": (["src"] * 3, ["tgt"] * 2),
    "pair": (["pair"] * 3, ["pair"] * 2),
    "pair-enc": (["pair"] * 3, [None, None]),
}


@pytest.mark.parametrize("placement", list(EXPECTED))
def test_placement_puts_exactly_the_papers_adapters(corpus, placement):
    task, model, args = build(corpus, "--adapter-placement", placement, "--encoder-layers", "3")
    _, baseline, _ = build(corpus, "--encoder-layers", "3", arch="langshare_transformer_tiny")
    enc, dec = EXPECTED[placement]
    assert adapter_sides(args) == {"encoder": enc, "decoder": dec}
    n_langs, n_pairs = len(task.inventory), len(M2M)
    expected_names = set()
    for stack, sides in (("encoder", enc), ("decoder", dec)):
        for i, side in enumerate(sides):
            layer = getattr(model, stack).layers[i]
            if side is None:
                assert not hasattr(layer, "adapter"), f"{stack} layer {i} has no adapter in {placement}"
                continue
            assert layer.adapter.side == side
            slot_name, slots = ("per_pair", n_pairs) if side == "pair" else ("per_lang", n_langs)
            for k in range(slots):
                for part in ("layer_norm.weight", "layer_norm.bias", "down.weight", "down.bias", "up.weight", "up.bias"):
                    expected_names.add(f"{stack}.layers.{i}.adapter.{slot_name}.{k}.{part}")
    names = {n for n, _ in model.named_parameters() if ".adapter." in n}
    assert names == expected_names
    base_names = {n for n, _ in model.named_parameters() if ".adapter." not in n}
    assert base_names == {n for n, _ in baseline.named_parameters()}, "the rest is exactly the baseline"
    slots = {"enc-src": 3 * n_langs, "enc-src-tgt": 3 * n_langs, "enc-dec": 5 * n_langs, "pair": 5 * n_pairs,
             "pair-enc": 3 * n_pairs}[placement]
    assert n_params(model) == n_params(baseline) + slots * PER_ADAPTER
    layers = {"enc-src": 3, "enc-src-tgt": 3, "enc-dec": 5, "pair": 5, "pair-enc": 3}[placement]
    en, xx = task.inventory.id("en"), task.inventory.id("xx")
    assert model.effective_parameters(en, xx) == n_params(baseline) + layers * PER_ADAPTER


def test_the_papers_parameter_counts():
    """LSL paper Table 1/10: 10 languages, d = 512, 16 encoder layers, separate decoder baseline
    299M. One adapter has 2db + b + 3d parameters; the added totals match the paper's rows."""
    per = lambda b: Adapter.num_parameters(512, b)  # noqa: E731
    assert per(128) == n_params(Adapter(512, 128))
    assert round((299e6 + 10 * 16 * per(128)) / 1e6) == 320  # "Language Adapters ENC 128": 321M
    assert round((299e6 + 10 * 16 * per(256)) / 1e6) == 341  # ... 256: 342M
    assert round((299e6 + 90 * 16 * per(128)) / 1e6) == 490  # "Language-Pair Adapters ENC 128": 491M


def test_presets_scale_the_bottleneck(corpus):
    for arch, bottleneck in ((ARCH, 8), ("langshare_adapter_transformer_small", 32)):
        _, model, args = build(corpus, arch=arch)
        assert args.adapter_bottleneck == bottleneck
        assert model.encoder.layers[0].adapter.per_lang[0].down.out_features == bottleneck
    _, _, args = build(corpus, "--adapter-bottleneck", "5")
    assert args.adapter_bottleneck == 5


# --- a fresh adapter is close to the identity -------------------------------------------------

def test_fresh_adapter_is_near_identity():
    torch.manual_seed(0)
    adapter = Adapter(D, B)
    assert torch.equal(adapter.up.bias, torch.zeros(D)) and adapter.up.weight.abs().max() <= 2 * UP_INIT_STD
    assert adapter.up.weight.std() > UP_INIT_STD / 4, "random, not zero: down gets a gradient from the first step"
    x = torch.randn(5, 4, D) * 3
    change = (adapter(x) - x).norm() / x.norm()
    assert 0 < change < 1e-2
    manual = x + adapter.up(torch.relu(adapter.down(torch.nn.functional.layer_norm(x, (D,)))))
    torch.testing.assert_close(adapter(x), manual)


def test_fresh_adapter_model_is_close_to_its_baseline(corpus, tmp_path):
    _, baseline, base_args = build(corpus, arch="langshare_transformer_tiny", seed=3)
    path = save_checkpoint(baseline, base_args, tmp_path / "base.pt")
    task, model, _ = build(corpus, "--adapter-placement", "enc-dec", "--adapter-finetune-from", str(path))
    batch = collate(task, mixed_indices(task))
    ours, theirs = logits(model.eval(), batch), logits(baseline.eval(), batch)
    assert not torch.equal(ours, theirs)
    torch.testing.assert_close(ours, theirs, atol=0.05, rtol=0.0)


# --- invariance: a sentence's output does not depend on the other sentences of its batch ------

VARIANTS = {"enc-src-tgt": ("src", "tgt"), "enc-dec": ("src", "tgt"), "pair": ("pair",)}


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(corpus, request):
    task, model, _ = build(corpus, "--adapter-placement", request.param)
    return task, scramble_adapters(model).eval(), VARIANTS[request.param]


def test_mixed_batch_equals_each_sentence_alone(variant):
    task, model, _ = variant
    batch = collate(task, mixed_indices(task))
    ni = batch["net_input"]
    assert len(set(ni["src_lang_id"].tolist())) == 2 and len(set(ni["tgt_lang_id"].tolist())) == 2
    mixed = dict(zip(row_keys(task, batch), logits(model, batch)))
    for i in mixed_indices(task):
        alone = collate(task, [i])
        n = alone["target"].size(1)
        torch.testing.assert_close(mixed[row_keys(task, alone)[0]][:n], logits(model, alone)[0], atol=1e-5, rtol=1e-4)


def test_language_ids_change_the_output(variant):
    """Guards the invariance tests: another language's (pair's) adapter changes the output."""
    task, model, sides = variant
    batch = collate(task, [0, 1])  # en-xx
    ids = task.inventory.id
    swaps = {"src": ("src_lang_id", ids("xx")), "tgt": ("tgt_lang_id", ids("yy")), "pair": ("tgt_lang_id", ids("yy"))}
    for side in sides:
        key, value = swaps[side]
        swapped = {**batch, "net_input": {**batch["net_input"], key: torch.full_like(batch["net_input"][key], value)}}
        assert not torch.allclose(logits(model, batch), logits(model, swapped), atol=1e-3), side


def test_incremental_decoding_equals_full_decoding(variant):
    task, model, _ = variant
    assert_incremental_equals_full(task, model, collate(task, mixed_indices(task)))


def test_beam_search_mixed_equals_alone(variant):
    task, model, _ = variant
    assert_beam_search_mixed_equals_alone(task, model, max_len_b=12)


def test_absent_languages_adapters_get_no_gradient(corpus):
    task, model, _ = build(corpus, "--adapter-placement", "enc-dec")
    batch = collate(task, list(range(6)))  # en->xx only
    logits(model.train(), batch).logsumexp(-1).sum().backward()
    used = {"encoder": task.inventory.id("en"), "decoder": task.inventory.id("xx")}
    for name, p in model.named_parameters():
        m = re.match(r"^(encoder|decoder)\.layers\.\d+\.adapter\.per_lang\.(\d+)\.", name)
        if m is None:
            assert p.grad is not None, name
        elif int(m.group(2)) == used[m.group(1)]:
            assert p.grad is not None and p.grad.abs().sum() > 0, name
        else:
            assert p.grad is None, name


# --- language-pair adapters: the pair table ---------------------------------------------------

def test_pair_without_adapter_is_a_one_line_error(corpus):
    _, model, args = build(corpus, "--adapter-placement", "pair", pairs=["en-xx", "en-yy"])
    assert args.adapter_pairs == "en-xx,en-yy" and len(model.encoder.layers[0].adapter.per_pair) == 2
    task, _, _ = build(corpus, arch="langshare_transformer_tiny")  # decoding: a task whose --lang-pairs add xx-yy
    starts = [0] + list(task.dataset("valid").cumulative_sizes[:-1])
    batch = collate(task, [0, 1, starts[2]])  # en-xx, en-xx, xx-yy (zero-shot)
    with pytest.raises(MissingPairAdapter, match=r"no adapter for the language pair xx-yy: .* \(en-xx,en-yy\); "
                                                 r"translate one of those, or train with xx-yy in --lang-pairs") as error:
        logits(model, batch)
    assert "\n" not in str(error.value)
    with pytest.raises(MissingPairAdapter, match="xx-yy"):
        model.effective_parameters(task.inventory.id("xx"), task.inventory.id("yy"))
    logits(model, collate(task, [0, 1, starts[1]]))  # trained pairs are fine


@pytest.mark.parametrize("placement", ["pair", "pair-enc"])
def test_training_pairs_without_adapter_are_refused_at_build(corpus, tmp_path, placement):
    """Was: accepted, then the first batch stopped with "no adapter for the language pair en-xx: ... train with
    en-xx in --lang-pairs" (it was in --lang-pairs) and left crash.pt in the run directory."""
    message = (rf"^--adapter-pairs en-yy leaves the training pairs en-xx of --lang-pairs without an adapter \(each "
               rf"sentence of --adapter-placement {placement} runs through its pair's adapter\); add them to "
               r"--adapter-pairs, drop --adapter-pairs \(every --lang-pairs pair gets one\), or leave them out of "
               r"--lang-pairs$")
    flags = ["--adapter-placement", placement, "--adapter-pairs", "en-yy"]
    with pytest.raises(ValueError, match=message):
        build(corpus, *flags, pairs=["en-xx", "en-yy"])
    save = tmp_path / "ckpt"
    with pytest.raises(ValueError, match=message):
        train(task_args(corpus) + TRAIN + ["--arch", ARCH, *flags, "--max-update", "3", "--save-dir", str(save)])
    assert not save.exists() or not any(save.iterdir())  # no crash.pt of a run that never trained
    build(corpus, "--adapter-placement", placement, "--adapter-pairs", "en-yy,en-xx,xx-yy", pairs=["en-xx", "en-yy"])


def test_adapter_pairs_without_a_pair_placement_is_refused(corpus):
    """Was: --adapter-pairs with --adapter-placement enc-src trained, the flag doing nothing."""
    with pytest.raises(ValueError, match=r"^--adapter-pairs en-xx applies to --adapter-placement pair and "
                                         r"pair-enc only \(enc-src has adapters per language\); drop it, or pass "
                                         r"--adapter-placement pair$"):
        build(corpus, "--adapter-placement", "enc-src", "--adapter-pairs", "en-xx")


def test_pair_table_comes_from_the_task_and_stays_with_the_checkpoint(corpus, tmp_path):
    task, model, args = build(corpus, "--adapter-placement", "pair", pairs=["en-yy", "en-xx"])
    assert args.adapter_pairs == "en-yy,en-xx", "the task's --lang-pairs, stored in the config"
    ids = task.inventory.id
    assert model.pair_table.lookup[ids("en"), ids("yy")] == 0 and model.pair_table.lookup[ids("en"), ids("xx")] == 1
    assert int(model.pair_table.lookup.lt(0).sum()) == 9 - 2
    scramble_adapters(model).eval()
    args._name = args.arch  # as fairseq-train saves it
    path = save_checkpoint(model, args, tmp_path / "pair.pt")
    # decoding one pair later: the task's --lang-pairs is only en-xx, the model keeps its two adapters
    gen_task, _, _ = build(corpus, arch="langshare_transformer_tiny", pairs=["en-xx"])
    loaded = checkpoint_utils.load_model_ensemble([str(path)], task=gen_task)[0][0].eval()
    assert loaded.pair_table.pairs == ["en-yy", "en-xx"] and len(loaded.decoder.layers[1].adapter.per_pair) == 2
    batch = collate(task, mixed_indices(task)[:4])
    torch.testing.assert_close(logits(loaded, batch), logits(model, batch))


def test_pair_table_follows_a_reordered_inventory(corpus):
    """Without language tokens a checkpoint loads under a reordered --langs (ids re-mapped by
    code): every sentence still goes through its own pair's adapters."""
    task_a, model_a, _ = build(corpus, "--adapter-placement", "pair", langtok=False, pairs=["en-xx", "en-yy"])
    scramble_adapters(model_a).eval()
    task_b, model_b, _ = build(corpus, "--adapter-placement", "pair", langtok=False, pairs=["en-xx", "en-yy"],
                               langs=["yy", "xx", "en"], seed=7)
    model_b.load_state_dict(model_a.state_dict())
    assert task_b.inventory.id("en") == 0 and model_b.pair_table.langs == ["en", "xx", "yy"]
    indices = mixed_indices(task_a)
    batch_a, batch_b = collate(task_a, indices), collate(task_b, indices)
    torch.testing.assert_close(logits(model_b.eval(), batch_b), logits(model_a, batch_a))


# --- fine-tuning a frozen baseline (Bapna & Firat) ---------------------------------------------

@pytest.fixture(scope="module")
def baseline_checkpoint(corpus, tmp_path_factory):
    _, baseline, args = build_task_and_model(corpus, arch="langshare_transformer_tiny", seed=11)
    return save_checkpoint(baseline, args, tmp_path_factory.mktemp("base") / "baseline.pt"), baseline


def same_weight(key, mine, baseline):
    """Equal tensors; the inventory buffer also names each model's own --arch, so compare its languages."""
    from fairseq_langshare.languages import decode_inventory

    if key == "lang_inventory":
        return decode_inventory(mine) == decode_inventory(baseline)
    return torch.equal(mine, baseline)


def test_finetune_copies_the_baseline_and_freezes_it(corpus, baseline_checkpoint):
    path, baseline = baseline_checkpoint
    _, model, args = build(corpus, "--adapter-placement", "pair", "--adapter-finetune-from", str(path))
    assert args.adapter_finetune_from is None and args.adapter_frozen_base is True
    state = model.state_dict()
    for key, value in baseline.state_dict().items():
        assert same_weight(key, state[key], value), key
    for name, p in model.named_parameters():
        assert p.requires_grad == (".adapter." in name), name


def test_frozen_training_updates_only_the_adapters(corpus, baseline_checkpoint, tmp_path):
    """A real fairseq-train run: the optimizer holds only the adapters; the base is bit-identical."""
    path, baseline = baseline_checkpoint
    save = tmp_path / "ckpt"
    train(task_args(corpus) + TRAIN + ["--arch", ARCH, "--adapter-placement", "enc-dec", "--adapter-finetune-from",
                                       str(path), "--max-update", "3", "--save-dir", str(save)])
    saved = torch.load(save / "checkpoint_last.pt", weights_only=True)
    assert saved["cfg"]["model"].adapter_finetune_from is None and saved["cfg"]["model"].adapter_frozen_base is True
    weights = saved["model"]
    for key, value in baseline.state_dict().items():
        assert same_weight(key, weights[key], value), key
    changed = 0
    for key, value in weights.items():
        if ".adapter." in key and key.endswith(("layer_norm.weight", "down.bias", "up.bias")):
            initial = torch.ones_like(value) if key.endswith("layer_norm.weight") else torch.zeros_like(value)
            lang = int(key.split(".per_lang.")[1].split(".")[0])
            trained = lang == 0 if key.startswith("encoder") else lang in (1, 2)  # en->xx, en->yy
            assert torch.equal(value, initial) != trained, key
            changed += trained
    assert changed == 3 * (2 * 1 + 2 * 2)  # 3 tensors x (2 encoder layers x en + 2 decoder layers x {xx, yy})
    # reloaded (e.g. by fairseq-generate), the base is frozen again
    models, _, _ = checkpoint_utils.load_model_ensemble_and_task(
        [str(save / "checkpoint_last.pt")], arg_overrides={"data": str(corpus["bin"])})
    assert all(p.requires_grad == (".adapter." in n) for n, p in models[0].named_parameters())


def test_resuming_a_frozen_run_without_the_finetune_flag_stays_frozen(corpus, baseline_checkpoint, tmp_path):
    """Was: the resume built the model unfrozen and fairseq stopped with torch's traceback "loaded state dict
    contains a parameter group that doesn't match the size of optimizer's group"."""
    path, baseline = baseline_checkpoint
    save = tmp_path / "ckpt"
    common = task_args(corpus) + TRAIN + ["--arch", ARCH, "--adapter-placement", "pair", "--save-dir", str(save)]
    train(common + ["--adapter-finetune-from", str(path), "--max-update", "3"])
    train(common + ["--max-update", "5"])  # the resume: neither --adapter-finetune-from nor --adapter-frozen-base
    saved = torch.load(save / "checkpoint_last.pt", weights_only=True)
    assert saved["optimizer_history"][-1]["num_updates"] == 5 and saved["cfg"]["model"].adapter_frozen_base is True
    for key, value in baseline.state_dict().items():
        assert same_weight(key, saved["model"][key], value), key
    assert not (save / "crash.pt").exists()


def test_freezing_the_base_of_a_resumed_unfrozen_run_is_refused_in_one_line(corpus, tmp_path):
    """Was: torch's traceback "loaded state dict contains a parameter group that doesn't match the size of
    optimizer's group" (the optimizer's saved state holds every parameter, the frozen model's only the adapters)."""
    save = tmp_path / "ckpt"
    common = task_args(corpus) + TRAIN + ["--arch", ARCH, "--adapter-placement", "pair", "--save-dir", str(save)]
    train(common + ["--max-update", "2"])
    with pytest.raises(ValueError, match=r"checkpoint_last.pt was trained with every parameter \(no --adapter-frozen-base"
                                         r"\), this run freezes the base \(--adapter-frozen-base\), and the optimizer "
                                         r"state it resumes holds every parameter: resume without --adapter-frozen-base,"
                                         r" or add --reset-optimizer"):
        train(common + ["--max-update", "4", "--adapter-frozen-base"])
    assert not (save / "crash.pt").exists()
    train(common + ["--max-update", "4", "--adapter-frozen-base", "--reset-optimizer"])  # a new optimizer: frozen
    saved = torch.load(save / "checkpoint_last.pt", weights_only=True)
    assert saved["cfg"]["model"].adapter_frozen_base is True and saved["optimizer_history"][-1]["num_updates"] == 4


def test_finetune_from_a_mismatched_baseline_is_a_one_line_error(corpus, baseline_checkpoint, tmp_path):
    path, _ = baseline_checkpoint
    with pytest.raises(ValueError, match=r"--adapter-finetune-from .* does not fit this model \(missing \[\], unexpected "
                                         r"\[\], wrong shapes \['decoder.layers.0.fc1.bias \(64,\) there, \(128,\) here'"):
        build(corpus, "--decoder-ffn-embed-dim", "128", "--adapter-finetune-from", str(path))
    with pytest.raises(ValueError, match=r"missing \['encoder.layers.2\."):
        build(corpus, "--encoder-layers", "3", "--adapter-finetune-from", str(path))
    with pytest.raises(FileNotFoundError, match="--adapter-finetune-from .*nothing.pt: no such checkpoint"):
        build(corpus, "--adapter-finetune-from", str(tmp_path / "nothing.pt"))


# --- export: one pair as langshare_adapter_single -----------------------------------------------

@pytest.mark.parametrize("placement", list(EXPECTED))
def test_every_placement_exports_to_an_equivalent_single_adapter_model(corpus, placement):
    task, model, args = build(corpus, "--adapter-placement", placement)
    scramble_adapters(model).eval()
    ds = task.dataset("valid")
    for start in [0] + list(ds.cumulative_sizes[:-1]):  # en-xx, en-yy, xx-yy
        ni = dict(collate(task, list(range(start, start + 5)))["net_input"])
        src_id, tgt_id = int(ni["src_lang_id"][0]), int(ni["tgt_lang_id"][0])
        weights, changes = AdapterTransformerModel.export_state_dict(model.state_dict(), args, src_id, tgt_id)
        single_args = copy.deepcopy(args)
        for key, value in changes.items():
            if value is None and hasattr(single_args, key):
                delattr(single_args, key)
        single = AdapterSingleTransformerModel.build_model(single_args, task).eval()
        single.load_state_dict(weights, strict=True)
        assert n_params(single) == model.effective_parameters(src_id, tgt_id)
        assert not any(".per_lang." in k or ".per_pair." in k for k in weights)
        expected = model(**ni)[0]
        for key in ("src_lang_id", "tgt_lang_id"):
            ni.pop(key)
        torch.testing.assert_close(single(**ni)[0], expected)


# --- end to end: fairseq-train, fairseq-generate, langshare export -----------------------------

@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    save = tmp_path_factory.mktemp("adapter_ckpt")
    records = train(task_args(corpus) + TRAIN + ["--arch", ARCH, "--adapter-placement", "pair", "--log-interval", "10",
                                                 "--max-update", "200", "--save-dir", str(save)])
    return save / "checkpoint_last.pt", records


def test_training_learns_and_stores_the_pairs(trained):
    path, records = trained
    losses = [float(r["loss"]) for r in records if "loss" in r and "num_updates" in r]
    assert len(losses) >= 3 and losses[-1] < 0.8 * losses[0]
    saved = torch.load(path, weights_only=True)
    assert saved["cfg"]["model"].adapter_pairs == "en-xx,en-yy" and "pair_table.lookup" in saved["model"]


GENERATE = ["--gen-subset", "test", "--beam", "3", "--cpu", "--max-tokens", "1000", "--num-workers", "0"]


def full_generate(corpus, checkpoint, src, tgt):
    return generate(task_args(corpus, pairs=[f"{src}-{tgt}"]) + ["--path", str(checkpoint), "-s", src, "-t", tgt,
                                                                 *GENERATE])


def single_generate(corpus, checkpoint, src, tgt):
    """fairseq's own task, the plugin's single-adapter model (--user-dir)."""
    return generate([str(corpus["bin"]), "--user-dir", PKG_DIR, "--task", "translation_multi_simple_epoch",
                     "--langs", ",".join(corpus["langs"]), "--lang-pairs", f"{src}-{tgt}", "--encoder-langtok", "tgt",
                     "--path", str(checkpoint), "-s", src, "-t", tgt, "--required-batch-size-multiple", "1", *GENERATE])


@pytest.mark.parametrize("src,tgt", [("en", "xx"), ("en", "yy")])
def test_exported_pair_translates_exactly_like_the_full_model(corpus, trained, tmp_path, src, tgt):
    path, _ = trained
    out = tmp_path / f"{src}-{tgt}.pt"
    report = export_pair(path, src, tgt, out)
    state = torch.load(out, weights_only=True)
    assert state["cfg"]["model"]["_name"] == "langshare_adapter_single"
    assert state["cfg"]["model"]["adapter_placement"] == "pair" and state["cfg"]["model"]["adapter_bottleneck"] == B
    assert not any(k.startswith("adapter_pairs") for k in state["cfg"]["model"])
    assert "encoder.layers.0.adapter.down.weight" in state["model"] and "pair_table.lookup" not in state["model"]
    assert report["full_params"] - report["params"] == 4 * PER_ADAPTER, "the other pair's 2 + 2 adapters"
    # the printed counts are parameters (was: fairseq's two `version` buffers counted too, 2 more than the model's)
    from fairseq import checkpoint_utils

    models, _, _ = checkpoint_utils.load_model_ensemble_and_task([str(path)], arg_overrides={"data": str(corpus["bin"])})
    assert report["full_params"] == n_params(models[0])
    full = full_generate(corpus, path, src, tgt)
    assert len(full) == 20
    words = [w for h in full.values() for w in h.split()]
    assert words and sum(w.endswith(tgt) for w in words) / len(words) > 0.9, "the trained pair translates into tgt"
    assert single_generate(corpus, out, src, tgt) == full


def test_generating_a_pair_without_adapter_fails_clearly(corpus, trained, tmp_path):
    path, _ = trained
    with pytest.raises(MissingPairAdapter, match="no adapter for the language pair xx-yy"):
        full_generate(corpus, path, "xx", "yy")
    with pytest.raises(MissingPairAdapter, match="no adapter for the language pair xx-yy"):
        export_pair(path, "xx", "yy", tmp_path / "xx-yy.pt")
    assert not list(tmp_path.iterdir())
