"""langshare_multistack_transformer: one encoder per source family / language, one decoder per
target family / language; the family table and its override file, per-sentence routing in mixed
batches (full, incremental, beam search), parameter counts, export, fairseq-train/generate."""

import copy

import pytest
import torch
from fairseq.models.transformer import TransformerModel
from fairseq.sequence_generator import SequenceGenerator

from fairseq_langshare.data.gettext_corpus import locale_dirs
from fairseq_langshare.data.language_families import (
    LanguageFamilyError,
    family_of,
    group_ids,
    read_families_file,
    resolve_families,
)
from fairseq_langshare.export import export_pair
from fairseq_langshare.models.multistack_transformer import MultistackConfigError, MultistackTransformerModel
from fairseq_langshare.modules.language_specific_layer import LanguageSpecificDecoderLayer, LanguageSpecificEncoderLayer
from fairseq_langshare.modules.routing import LanguageGroupIds, LanguageIds, MissingLanguageIds
from test_export import full_generate, plain_generate
from test_hydra_and_distributed import train_two_gloo_ranks
from test_language_aware_model import (
    assert_beam_search_mixed_equals_alone,
    assert_incremental_equals_full,
    collate,
    mixed_indices,
    row_keys,
)
from tiny_corpus import build_task_and_model, task_args, train

M2M = ["en-xx", "en-yy", "xx-yy"]  # xx-yy has valid/test data only: batches mix source languages too
FAMILIES = "# toy languages\nen\tGermanic\nxx\tRomance\n\nyy\tGermanic\n"  # groups: Germanic=0 (en, yy), Romance=1 (xx)
ARCH = "langshare_multistack_transformer_tiny"

VARIANTS = {  # name: (flags, sides whose ids pick a stack)
    "enc-family": (["--multi-encoder", "src-family"], ("src",)),
    "dec-family-prenorm": (["--multi-decoder", "tgt-family", "--encoder-normalize-before",
                            "--decoder-normalize-before"], ("tgt",)),
    "enc-lang-dec-family": (["--multi-encoder", "src-lang", "--multi-decoder", "tgt-family"], ("src", "tgt")),
    "dec-lang": (["--multi-decoder", "tgt-lang"], ("tgt",)),
}


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    path = tmp_path_factory.mktemp("families") / "families.tsv"
    path.write_text(FAMILIES)
    return path


def build(corpus, families, *flags, pairs=M2M, arch=ARCH, seed=1):
    task, model, args = build_task_and_model(
        corpus, arch=arch, extra=["--dropout", "0.0", "--language-families", str(families), *flags], pairs=pairs,
        seed=seed)
    task.load_dataset("valid")
    return task, model, args


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(corpus, families, request):
    flags, sides = VARIANTS[request.param]
    task, model, _ = build(corpus, families, *flags)
    return task, model.eval(), sides


def logits(model, batch):
    return model(**batch["net_input"])[0]


# --- the family table ------------------------------------------------------------------------

def test_shipped_table_groups_by_genus_with_ids_by_first_appearance():
    langs = ["en", "fr", "de", "zh", "es", "hi", "ru", "uk"]
    fams = resolve_families(langs)
    assert list(fams.values()) == ["Germanic", "Romance", "Germanic", "Sinitic", "Romance", "Indo-Aryan",
                                   "Slavic", "Slavic"]
    assert group_ids(list(fams.values())) == (["Germanic", "Romance", "Sinitic", "Indo-Aryan", "Slavic"],
                                              [0, 1, 0, 2, 1, 3, 4, 4])
    reordered = resolve_families(["zh", "en", "fr"])
    assert group_ids(list(reordered.values())) == (["Sinitic", "Germanic", "Romance"], [0, 1, 2])
    # variants and ISO 639-2/3 codes resolve through their base language
    assert [family_of(c) for c in ("pt_BR", "sr_latin", "zh_CN", "ca_valencia", "fra", "deu", "cmn")] == [
        "Romance", "Slavic", "Sinitic", "Romance", "Romance", "Germanic", "Sinitic"]


def test_family_level_reproduces_the_adaptive_sparse_papers_public24_grouping():
    """Appendix C.1: 24 languages (+ English) in eight families."""
    paper = [["ar"], ["kk", "tr"], ["vi"], ["cs", "de", "es", "fr", "gu", "hi", "it", "lt", "lv", "ne", "nl", "ro",
                                            "ru", "si"], ["et", "fi"], ["zh", "my"], ["ko"], ["ja"]]
    langs = [c for group in paper for c in group]
    fams = resolve_families(["en"] + langs, level="family")
    names, ids = group_ids(list(fams.values()))
    assert len(names) == 8 and fams["en"] == fams["de"] == "Indo-European"
    for group in paper:
        assert len({fams[c] for c in group}) == 1, group
    assert len({fams[group[0]] for group in paper}) == 8


@pytest.mark.parametrize("langs", [
    "af am an ar as az be bg bn br bs ca cs cy da de dz el eo es et eu fa fi fr fy ga gd gl gu ha he hi hr hu hy id "
    "ig is it ja ka kk km kn ko ku ky li lt lv mg mk ml mn mr ms mt my nb ne nl nn no oc or pa pl ps pt ro ru rw se "
    "sh si sk sl sq sr sv ta te tg th tk tr tt ug uk ur uz vi wa xh yi yo zh zu",  # OPUS-100
    "cs de fi fr gu hi iu ja kk km lt lv pl ps ro ru ta tr zh et ha is uk xh liv sah hr",  # WMT
    "ar az be bg bn bs cs da de el eo es et eu fa fi fr gl he hi hr hu hy id it ja ka kk ko ku lt mk mn mr ms my nb "
    "nl pl pt ro ru sk sl sq sr sv ta th tr uk ur vi zh",  # TED
    "aze bel glg slk tur rus por ces bos mar hin mkd ell bul fra kor",  # TED-8 codes
    "de en es fr it ja ko pt sw zh",  # the LSL paper's languages
], ids=["opus100", "wmt", "ted", "ted8", "lsl"])
def test_shipped_table_covers_the_common_mt_languages(langs):
    resolve_families(langs.split())


def test_shipped_table_covers_every_gettext_language_of_this_machine():
    try:
        codes = list(locale_dirs("/usr/share/locale"))
    except ValueError:
        pytest.skip("no /usr/share/locale")
    assert len(codes) > 50
    resolve_families(codes)


def test_families_file_overrides_and_extends_the_table(tmp_path):
    path = tmp_path / "f.tsv"
    path.write_text("# comment\n\nen\tAnglic\nxx\tToy Family\n  # indented comment\n")
    assert read_families_file(path) == {"en": "Anglic", "xx": "Toy Family"}
    assert resolve_families(["en", "xx", "de", "en_GB"], path) == {
        "en": "Anglic", "xx": "Toy Family", "de": "Germanic", "en_GB": "Anglic"}


@pytest.mark.parametrize("text,message", [
    ("en Germanic\n", r"line 1: expected 'lang<TAB>family'"),
    ("# ok\nen\tGermanic\tExtra\n", r"line 2: expected 'lang<TAB>family'"),
    ("en\tGer,manic\n", r"line 1: expected 'lang<TAB>family' \(one tab, a family name without ',' or '='\)"),
    ("en\tA\nen\tB\n", r"en is listed on lines 1 and 2; keep one"),
])
def test_bad_families_files_are_one_line_errors(tmp_path, text, message):
    path = tmp_path / "f.tsv"
    path.write_text(text)
    with pytest.raises(LanguageFamilyError, match=message) as error:
        read_families_file(path)
    assert "\n" not in str(error.value)
    with pytest.raises(LanguageFamilyError, match="no such file"):
        read_families_file(tmp_path / "missing.tsv")


def test_unknown_language_is_a_one_line_error_naming_it_and_the_fix(corpus, tmp_path):
    with pytest.raises(LanguageFamilyError, match=r"language 'qqq' is not in the shipped language family table") as e:
        resolve_families(["en", "qqq"])
    assert "add a line 'qqq<TAB>FAMILY' to a families file" in str(e.value) and "--language-families" in str(e.value)
    path = tmp_path / "f.tsv"
    path.write_text("xx\tRomance\n")
    with pytest.raises(MultistackConfigError) as e:  # through the model: yy is in neither
        build_task_and_model(corpus, arch=ARCH, extra=["--multi-decoder", "tgt-family", "--language-families", str(path)])
    assert str(e.value) == (f"language 'yy' is in neither the shipped language family table nor {path}: "
                            f"add a line 'yy<TAB>FAMILY' to {path}")
    # per-language stacks need no family table
    _, model, args = build_task_and_model(corpus, arch=ARCH, extra=["--multi-decoder", "tgt-lang"])
    assert model.decoder.num_groups == 3 and args.language_family_map == ""


@pytest.mark.parametrize("flags,message", [
    ([], r"--multi-encoder none and --multi-decoder none is the shared baseline: use --arch langshare_transformer"),
    (["--multi-encoder", "none", "--multi-decoder", "none"], r"use --arch langshare_transformer"),
])
def test_flag_errors_are_one_line(corpus, families, flags, message):
    with pytest.raises(MultistackConfigError, match=message) as error:
        build(corpus, families, *flags)
    assert "\n" not in str(error.value)


# --- structure and routing -------------------------------------------------------------------

def test_group_view_maps_language_ids_to_group_ids():
    languages = LanguageIds()
    table = torch.tensor([0, 1, 0, 2])
    view = LanguageGroupIds(languages, lambda side: table)
    src = torch.tensor([3, 0, 1, 2, 1])
    with view.bind(src=src, tgt=None, padding_mask=torch.tensor([[False, True]] * 5)):
        groups = view.get("src")
        assert groups.tolist() == [2, 0, 1, 0, 1]
        assert view.get("src") is groups, "mapped once per forward call (every layer reads the same tensor)"
        assert view.padding_mask(1).shape == (5, 1)
        with pytest.raises(MissingLanguageIds, match="no tgt_lang_id"):
            view.get("tgt")
    src2 = torch.tensor([1, 1])
    with languages.bind(src=src2, tgt=None):
        assert view.get("src").tolist() == [1, 1]
    with languages.bind(src=torch.tensor([4]), tgt=None), pytest.raises(IndexError, match="the group table covers 4"):
        view.get("src")
    with languages.bind(src=torch.tensor([0, -1, 3]), tgt=None), pytest.raises(IndexError, match="language id -1 has"):
        view.get("src")


def test_group_view_reads_its_table_once_and_refuses_a_change_the_version_does_not_show():
    """The view maps ids to groups on the host from one read of the table (per table tensor and
    version); a write the version counter misses (``.data``, a broadcast of buffers) is caught by the
    device's check of the mapped groups, not routed by the old table."""
    from benchmarks.device_waits import device_waits

    languages, table = LanguageIds(), torch.tensor([0, 1, 1])
    view = LanguageGroupIds(languages, lambda side: table)
    with languages.bind(src=torch.tensor([0, 2]), tgt=None):
        assert view.get("src").tolist() == [0, 1]
    ids = torch.tensor([2, 1])
    with languages.bind(src=ids, tgt=None):
        with device_waits() as sites:
            groups = view.get("src")
        assert sum(sites.values()) == 1, sites  # the ids' read; the table was read at the first call
        assert groups.tolist() == [1, 1]
    table.data[2] = 5  # the version stays
    with languages.bind(src=torch.tensor([2, 0]), tgt=None), pytest.raises(RuntimeError, match="group table changed"):
        view.get("src")
    table[2] = 5  # in place: read again
    with languages.bind(src=torch.tensor([2, 0]), tgt=None):
        assert view.get("src").tolist() == [5, 0]


def test_group_tables_are_stored_in_the_model_and_the_config(corpus, families):
    task, model, args = build(corpus, families, "--multi-encoder", "src-family", "--multi-decoder", "tgt-lang")
    assert task.inventory.langs == ["en", "xx", "yy"]
    assert model.encoder.group_of_lang.tolist() == [0, 1, 0] and model.encoder.num_groups == 2
    assert model.decoder.group_of_lang.tolist() == [0, 1, 2]
    state = model.state_dict()
    assert torch.equal(state["encoder.group_of_lang"], torch.tensor([0, 1, 0]))
    assert "decoder.group_names" in state and "encoder.group_names" in state
    assert args.language_family_map == "en=Germanic,xx=Romance,yy=Germanic"
    assert model.family_map() == {"en": "Germanic", "xx": "Romance", "yy": "Germanic"}
    assert all(isinstance(l, LanguageSpecificEncoderLayer) and len(l.per_lang) == 2 for l in model.encoder.layers)
    assert all(isinstance(l, LanguageSpecificDecoderLayer) and len(l.per_lang) == 3 for l in model.decoder.layers)
    assert model.encoder.layer_norm is None  # post-norm: no final layer norm


def test_a_checkpoint_keeps_its_grouping_when_the_families_change(corpus, families, tmp_path):
    """The saved config names the resolved families, so a rebuild ignores a changed table/file;
    the buffers of the checkpoint win; a different number of groups is a clear error."""
    _, model, args = build(corpus, families, "--multi-encoder", "src-family")
    changed = tmp_path / "changed.tsv"
    changed.write_text("en\tA\nxx\tA\nyy\tB\n")
    rebuilt_args = copy.deepcopy(args)
    rebuilt_args.language_families = str(changed)
    task, _, _ = build(corpus, families, "--multi-encoder", "src-family")
    rebuilt = task.build_model(rebuilt_args)
    assert rebuilt.encoder.group_of_lang.tolist() == [0, 1, 0]
    rebuilt.load_state_dict(model.state_dict())
    # a model built from the changed file has the same number of groups but another assignment:
    # the checkpoint's tables (and so its trained copies) win, and the config follows them
    task2, other, other_args = build(corpus, changed, "--multi-encoder", "src-family")
    assert other.encoder.group_of_lang.tolist() == [0, 0, 1]
    other.load_state_dict(model.state_dict(), model_cfg=other_args)
    assert other.encoder.group_of_lang.tolist() == [0, 1, 0]
    assert other_args.language_family_map == "en=Germanic,xx=Romance,yy=Germanic"
    batch = collate(task2, mixed_indices(task2))
    torch.testing.assert_close(logits(other.eval(), batch), logits(model.eval(), batch))
    one = tmp_path / "one.tsv"
    one.write_text("en\tA\nxx\tA\nyy\tA\n")
    _, single, _ = build(corpus, one, "--multi-encoder", "src-family")
    with pytest.raises(MultistackConfigError, match=r"the checkpoint has 2 encoders \(Germanic,Romance\) but this model "
                                                    r"was built with 1 \(A\): the families changed; pass "
                                                    r"--language-family-map en=Germanic,xx=Romance,yy=Germanic"):
        single.load_state_dict(model.state_dict())


def test_a_resume_whose_families_changed_the_grouping_says_the_checkpoint_s_wins(corpus, families, tmp_path,
                                                                                  caplog):
    """Was: resumed with a families file that regroups the languages (same number of groups), the log
    announced the file's grouping while the model silently ran the checkpoint's."""
    import logging

    _, model, _ = build(corpus, families, "--multi-encoder", "src-family")
    changed = tmp_path / "changed.tsv"
    changed.write_text("en\tA\nxx\tA\nyy\tB\n")
    _, other, other_args = build(corpus, changed, "--multi-encoder", "src-family")
    _, same, same_args = build(corpus, families, "--multi-encoder", "src-family")
    with caplog.at_level(logging.WARNING):
        same.load_state_dict(model.state_dict(), model_cfg=same_args)
        assert "grouping" not in caplog.text
        other.load_state_dict(model.state_dict(), model_cfg=other_args)
    assert ("the checkpoint's grouping en=Germanic,xx=Romance,yy=Germanic replaces en=A,xx=A,yy=B, which this run's "
            "families gave: its stacks were trained with it (docs/multistack.md)") in caplog.text


def test_each_sentence_runs_exactly_its_groups_stack(corpus, families):
    task, model, _ = build(corpus, families, "--multi-encoder", "src-family", "--multi-decoder", "tgt-family")
    model.eval()
    batch = collate(task, mixed_indices(task))
    ni = batch["net_input"]
    src_group = model.encoder.group_of_lang[ni["src_lang_id"]]
    tgt_group = model.decoder.group_of_lang[ni["tgt_lang_id"]]
    assert set(src_group.tolist()) == {0, 1} and set(tgt_group.tolist()) == {0, 1}
    rows = {}
    hooks = []
    for stack in ("encoder", "decoder"):
        for i, layer in enumerate(getattr(model, stack).layers):
            for g, copy_ in enumerate(layer.per_lang):
                hooks.append(copy_.register_forward_hook(
                    lambda mod, inp, out, key=(stack, i, g): rows.__setitem__(key, inp[0].size(1))))
    logits(model, batch)
    for h in hooks:
        h.remove()
    for i in range(2):
        for g in range(2):
            assert rows.get(("encoder", i, g), 0) == int(src_group.eq(g).sum())
            assert rows.get(("decoder", i, g), 0) == int(tgt_group.eq(g).sum())


@pytest.mark.parametrize("stack,group", [("encoder", 1), ("decoder", 0)])
def test_perturbing_one_groups_stack_changes_only_its_sentences(corpus, families, stack, group):
    task, model, _ = build(corpus, families, "--multi-encoder", "src-family", "--multi-decoder", "tgt-family",
                           "--encoder-normalize-before", "--decoder-normalize-before")
    model.eval()
    batch = collate(task, mixed_indices(task))
    before = logits(model, batch)
    with torch.no_grad():
        for layer in getattr(model, stack).layers:
            for p in layer.per_lang[group].parameters():
                p.add_(0.5 * torch.randn_like(p))
        getattr(model, stack).layer_norm.per_lang[group].weight.mul_(2.0)  # the group's final (pre-)norm
    after = logits(model, batch)
    ids = batch["net_input"]["src_lang_id" if stack == "encoder" else "tgt_lang_id"]
    in_group = getattr(model, stack).group_of_lang[ids].eq(group)
    assert in_group.any() and (~in_group).any()
    changed = (after - before).abs().flatten(1).amax(1) > 1e-4
    assert torch.equal(changed, in_group), (changed, in_group)


# --- invariance: a sentence's output does not depend on the other sentences of its batch ------

def test_mixed_batch_equals_each_sentence_alone(variant):
    task, model, _ = variant
    batch = collate(task, mixed_indices(task))
    mixed = dict(zip(row_keys(task, batch), logits(model, batch)))
    for i in mixed_indices(task):
        alone = collate(task, [i])
        n = alone["target"].size(1)
        torch.testing.assert_close(mixed[row_keys(task, alone)[0]][:n], logits(model, alone)[0], atol=1e-5, rtol=1e-4)


def test_language_ids_change_the_output(variant):
    """Guards the invariance tests: routing a sentence to another group's stack changes its output."""
    task, model, sides = variant
    batch = collate(task, [0, 1])  # en-xx
    other = {"src": task.inventory.id("xx"), "tgt": task.inventory.id("yy")}  # another group for every variant
    for side in sides:
        swapped = {**batch, "net_input": dict(batch["net_input"])}
        key = f"{side}_lang_id"
        swapped["net_input"][key] = torch.full_like(batch["net_input"][key], other[side])
        assert not torch.allclose(logits(model, batch), logits(model, swapped), atol=1e-4), side


def test_incremental_decoding_equals_full_decoding(variant):
    task, model, _ = variant
    assert_incremental_equals_full(task, model, collate(task, mixed_indices(task)))


def test_beam_search_mixed_equals_alone(variant):
    task, model, _ = variant
    assert_beam_search_mixed_equals_alone(task, model, max_len_b=12)


def test_batches_grouped_by_direction_run_one_stand_in_per_layer_with_each_rows_own_weights(variant, monkeypatch):
    """Decoding a batch grouped by direction (as the task decodes) runs one stand-in of each
    decoder layer over every row, each row through its own group's weights: every sentence gets
    what it gets alone, incremental decoding equals full decoding, and beam search equals the
    copies run one by one (each group's layer norms with weights of their own)."""
    from fairseq_langshare.modules.language_specific_layer import LanguageSpecificDecoderLayer
    from fairseq_langshare.tasks.multilingual_langshare import direction_order, take_rows

    task, model, sides = variant
    model = copy.deepcopy(model)
    rng = torch.Generator().manual_seed(0)
    with torch.no_grad():  # every group's layer norms their own affine weights (fresh ones are all 1 and 0)
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.copy_(1 + 0.3 * torch.randn(module.weight.shape, generator=rng))
                module.bias.copy_(0.3 * torch.randn(module.bias.shape, generator=rng))

    def grouped(batch):
        order = direction_order(batch["net_input"])
        return batch if order is None else take_rows(batch, order)

    calls = []
    run = LanguageSpecificDecoderLayer._grouped_forward
    monkeypatch.setattr(LanguageSpecificDecoderLayer, "_grouped_forward", lambda self, *a: calls.append(1) or run(self, *a))
    batch = grouped(collate(task, mixed_indices(task)))
    mixed = dict(zip(row_keys(task, batch), logits(model, batch)))
    for i in mixed_indices(task):
        alone = collate(task, [i])
        n = alone["target"].size(1)
        torch.testing.assert_close(mixed[row_keys(task, alone)[0]][:n], logits(model, alone)[0], atol=1e-5, rtol=1e-4)
    with torch.no_grad():
        assert_incremental_equals_full(task, model, batch)
    assert bool(calls) == ("tgt" in sides)  # the stand-in ran wherever the decoder has groups
    assert_beam_search_mixed_equals_alone(task, model, collater=lambda idx: grouped(collate(task, idx)), max_len_b=12)
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=12)
    stand_in = [h[0]["tokens"].tolist() for h in generator.generate([model], batch)]
    monkeypatch.setattr(LanguageSpecificDecoderLayer, "grouped_inference", False)
    assert [h[0]["tokens"].tolist() for h in generator.generate([model], batch)] == stand_in


def test_beam_search_scores_equal_full_forward_scores(variant):
    """Beam search reorders each group's caches at every step: every hypothesis' score must be
    what a full forward pass gives its tokens."""
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
            lprobs = model.get_normalized_probs(model(**net_input, prev_output_tokens=prev), log_probs=True)[0]
            expected = lprobs.gather(-1, tokens[0].unsqueeze(-1)).squeeze(-1)
            torch.testing.assert_close(hypo["positional_scores"], expected, atol=1e-4, rtol=1e-4)


def test_absent_groups_get_no_gradient(corpus, families):
    task, model, _ = build(corpus, families, "--multi-encoder", "src-family", "--multi-decoder", "tgt-family")
    model.train()
    batch = collate(task, list(range(6)))  # en->xx only: encoder group 0 (Germanic), decoder group 1 (Romance)
    logits(model, batch).logsumexp(-1).sum().backward()
    used = {"encoder": 0, "decoder": 1}
    for name, p in model.named_parameters():
        if ".per_lang." not in name:
            assert p.grad is not None, name
            continue
        group = int(name.split(".per_lang.")[1].split(".")[0])
        if group == used[name.split(".")[0]]:
            assert p.grad is not None and p.grad.abs().sum() > 0, name
        else:
            assert p.grad is None or not p.grad.any(), name


# --- parameter counts ------------------------------------------------------------------------

def layer_params(d, f, decoder):
    attention = 4 * (d * d + d)
    ffn = d * f + f + f * d + d
    norms = (3 if decoder else 2) * 2 * d
    return attention * (2 if decoder else 1) + ffn + norms


@pytest.mark.parametrize("flags,g_enc,g_dec", [
    (["--multi-encoder", "src-family", "--multi-decoder", "tgt-lang"], 2, 3),
    (["--multi-encoder", "src-lang", "--encoder-normalize-before", "--decoder-normalize-before"], 3, 1),
    (["--multi-decoder", "tgt-family", "--share-all-embeddings", "--decoder-normalize-before"], 1, 2),
], ids=["family-lang", "lang-prenorm", "family-shared-emb"])
def test_parameter_counts_match_the_formula(corpus, families, flags, g_enc, g_dec):
    """|theta| = embeddings + G_enc * (L_enc * enc_layer + norm) + G_dec * (L_dec * dec_layer + norm);
    |theta_eff| = the same with G = 1 = a langshare_transformer of the same size."""
    task, model, args = build(corpus, families, *flags)
    d, f, L = 32, 64, 2
    V = len(task.source_dictionary)
    embeddings = V * d * (1 if "--share-all-embeddings" in flags else 3)  # encoder, decoder input, output projection
    enc_norm = 2 * d if "--encoder-normalize-before" in flags else 0
    dec_norm = 2 * d if "--decoder-normalize-before" in flags else 0
    enc_stack, dec_stack = L * layer_params(d, f, False) + enc_norm, L * layer_params(d, f, True) + dec_norm
    total = sum(p.numel() for p in model.parameters())
    assert total == embeddings + g_enc * enc_stack + g_dec * dec_stack
    baseline_flags = [x for i, x in enumerate(flags)
                      if x not in ("--multi-encoder", "--multi-decoder") and flags[i - 1] not in ("--multi-encoder",
                                                                                                "--multi-decoder")]
    _, baseline, _ = build_task_and_model(corpus, arch="langshare_transformer_tiny", extra=baseline_flags, pairs=M2M)
    for src in range(3):
        for tgt in range(3):
            assert model.effective_parameters(src, tgt) == embeddings + enc_stack + dec_stack
    assert embeddings + enc_stack + dec_stack == sum(p.numel() for p in baseline.parameters())


# --- export ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_variant_exports_to_an_equivalent_plain_transformer(corpus, families, name):
    task, model, args = build(corpus, families, *VARIANTS[name][0])
    model.eval()
    starts = [0] + list(task.dataset("valid").cumulative_sizes[:-1])
    for start in starts:  # en-xx, en-yy, xx-yy
        batch = collate(task, list(range(start, start + 5)))
        ni = dict(batch["net_input"])
        src_id, tgt_id = int(ni["src_lang_id"][0]), int(ni["tgt_lang_id"][0])
        weights, changes = MultistackTransformerModel.export_state_dict(model.state_dict(), args, src_id, tgt_id)
        assert not any(".per_lang." in k or "group_" in k for k in weights)
        plain_args = copy.deepcopy(args)
        for key, value in changes.items():
            if value is None and hasattr(plain_args, key):
                delattr(plain_args, key)
        plain = TransformerModel.build_model(plain_args, task).eval()
        plain.load_state_dict(weights, strict=True)
        assert sum(p.numel() for p in plain.parameters()) == model.effective_parameters(src_id, tgt_id)
        expected = model(**ni)[0]
        for key in ("src_lang_id", "tgt_lang_id"):
            ni.pop(key)
        torch.testing.assert_close(plain(**ni)[0], expected)


# --- fairseq-train, fairseq-generate, langshare export ---------------------------------------

TRAIN = ["--criterion", "langshare_label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--optimizer", "adam",
         "--lr", "0.005", "--max-tokens", "1000", "--log-format", "json", "--log-interval", "10", "--cpu",
         "--no-epoch-checkpoints", "--num-workers", "0", "--seed", "3", "--disable-validation"]


def test_train_generate_and_export_end_to_end(corpus, tmp_path):
    fam = tmp_path / "families.tsv"
    fam.write_text(FAMILIES)
    save = tmp_path / "ckpt"
    records = train(task_args(corpus) + TRAIN + [
        "--arch", ARCH, "--multi-encoder", "src-lang", "--multi-decoder", "tgt-family", "--language-families", str(fam),
        "--max-update", "60", "--save-dir", str(save)])
    assert any(int(float(r.get("num_updates", 0))) == 60 for r in records)
    ckpt = save / "checkpoint_last.pt"
    saved = torch.load(ckpt, weights_only=True)
    assert saved["cfg"]["model"].language_family_map == "en=Germanic,xx=Romance,yy=Germanic"
    assert saved["model"]["decoder.group_of_lang"].tolist() == [0, 1, 0]
    fam.write_text("en\tA\nxx\tA\nyy\tA\n")  # the file changes (or disappears): the checkpoint keeps its grouping
    for src, tgt in (("en", "xx"), ("en", "yy")):
        full = full_generate(corpus, ckpt, src, tgt)
        assert len(full) == 20
        out = tmp_path / f"{src}-{tgt}.pt"
        report = export_pair(ckpt, src, tgt, out, verbose=False)
        assert plain_generate(corpus, out, src, tgt) == full
        exported = torch.load(out, weights_only=True)
        assert exported["cfg"]["model"]["_name"] == "transformer"
        assert not any(k.startswith(("multi_", "language_famil")) for k in exported["cfg"]["model"])
        group = 1 if tgt == "xx" else 0
        assert torch.equal(exported["model"]["decoder.layers.1.fc1.weight"],
                           saved["model"][f"decoder.layers.1.per_lang.{group}.fc1.weight"])
        # the file holds what the pair runs: the full model minus the other stacks
        per_copy = {}
        for key, value in saved["model"].items():
            if ".per_lang." in key:
                stack, g = key.split(".")[0], int(key.split(".per_lang.")[1].split(".")[0])
                per_copy[(stack, g)] = per_copy.get((stack, g), 0) + value.numel()
        unused = sum(n for (stack, g), n in per_copy.items()
                     if g != {"encoder": 0, "decoder": group}[stack])
        assert report["full_params"] - report["params"] == unused


@pytest.mark.slow
def test_two_process_gloo_training_with_unused_stacks(corpus, families, tmp_path):
    """en->xx/en->yy training never runs the Romance encoder: legacy_ddp all-reduces its zeros."""
    outs = train_two_gloo_ranks(corpus, tmp_path, ["--arch", ARCH, "--multi-encoder", "src-family", "--multi-decoder",
                                                   "tgt-lang", "--language-families", str(families)], max_tokens=200)
    assert '"num_updates": "3"' in outs[0]
    saved = torch.load(tmp_path / "ckpt" / "checkpoint_last.pt", weights_only=True)
    assert saved["model"]["encoder.group_of_lang"].tolist() == [0, 1, 0]


def test_stacks_no_training_direction_reaches_are_named_in_one_warning(corpus, families, caplog):
    """Was silent: an O2M run with --multi-encoder src-lang built one encoder per language, of which only
    English's ever trains; a zero-shot sentence from xx decoded with an untrained encoder."""
    flags = ("--multi-encoder", "src-lang", "--multi-decoder", "tgt-lang")
    with caplog.at_level("WARNING", logger="fairseq_langshare.models.multistack_transformer"):
        build(corpus, families, *flags, pairs=["en-xx", "en-yy"])
    warned = [r.getMessage() for r in caplog.records if "never train" in r.getMessage()]
    assert warned == [
        "--multi-encoder src-lang: no training direction of --lang-pairs has a source language in xx, yy, so 2 of "
        "the 3 encoders never train (a sentence routed to one decodes with untrained weights)",
        "--multi-decoder tgt-lang: no training direction of --lang-pairs has a target language in en, so 1 of the "
        "3 decoders never train (a sentence routed to one decodes with untrained weights)"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="fairseq_langshare.models.multistack_transformer"):
        build(corpus, families, *flags, pairs=["en-xx", "xx-yy", "yy-en"])  # every language on both sides
        build(corpus, families, "--multi-encoder", "src-family", pairs=["en-yy", "xx-en"])  # Germanic, Romance
    assert not [r for r in caplog.records if "never train" in r.getMessage()]


def test_decoding_a_direction_does_not_warn_of_untrained_stacks(corpus, tmp_path, caplog):
    """The warning belongs to the training run. Was: fairseq-generate -s xx -t yy (fairseq's task then holds only
    that pair) warned that the en encoder, which trained, never trains."""
    from tiny_corpus import generate

    save = tmp_path / "ckpt"
    flags = ["--arch", ARCH, "--multi-encoder", "src-lang", "--multi-decoder", "tgt-lang"]
    with caplog.at_level("WARNING", logger="fairseq_langshare.models.multistack_transformer"):
        train(task_args(corpus) + TRAIN + flags + ["--max-update", "1", "--save-dir", str(save)])
    assert len([r for r in caplog.records if "never train" in r.getMessage()]) == 2  # encoders, decoders
    caplog.clear()
    with caplog.at_level("WARNING", logger="fairseq_langshare.models.multistack_transformer"):
        generate(task_args(corpus) + ["--path", str(save / "checkpoint_last.pt"), "--gen-subset", "test", "-s", "xx",
                                      "-t", "yy", "--beam", "1", "--cpu", "--max-tokens", "1000"])
    assert not [r.getMessage() for r in caplog.records if "never train" in r.getMessage()]


def test_lang_pairs_given_as_a_file_route_as_the_list(corpus, families, tmp_path):
    """--lang-pairs FILE (one pair per line, as the task accepts) gives the directions the list gives. Was:
    ``ValueError: not enough values to unpack`` at build, from the file's path split at '-'."""
    listed = tmp_path / "pairs.txt"
    listed.write_text("en-xx\nen-yy\n")
    flags = ("--multi-encoder", "src-lang", "--multi-decoder", "tgt-lang")
    _, model, _ = build(corpus, families, *flags, "--lang-pairs", str(listed), pairs=["en-xx", "en-yy"])
    assert model.trained_codes == {"src": ["en"], "tgt": ["xx", "yy"]}
    _, same, _ = build(corpus, families, *flags, pairs=["en-xx", "en-yy"])
    assert {id(p) for p in model.idle_parameters()} and len(model.idle_parameters()) == len(same.idle_parameters())
