"""The language-aware base: ids reach every layer, per sentence, in training and decoding."""

import pytest
import torch
from fairseq.models.transformer import TransformerModel
from fairseq.sequence_generator import SequenceGenerator

from fairseq_langshare.modules.routing import MissingLanguageIds
from language_probe_model import build_probe
from tiny_corpus import build_task_and_model


@pytest.fixture(scope="module", params=["o2m", "m2m"])
def setup(corpus, request):
    # m2m adds xx-yy (valid data only) so batches also mix source languages
    pairs = ["en-xx", "en-yy"] + (["xx-yy"] if request.param == "m2m" else [])
    task, model, args = build_task_and_model(corpus, extra=["--dropout", "0.0"], pairs=pairs)
    task.load_dataset("valid")
    probe = build_probe(task, args).eval()
    return task, model.eval(), probe, args


def collate(task, indices):
    ds = task.dataset("valid")
    return ds.collater([ds[i] for i in indices])


def mixed_indices(task):
    """Interleaved rows from every direction of the (concatenated) valid set."""
    starts = [0] + list(task.dataset("valid").cumulative_sizes[:-1])
    return [start + k for k in range(3) for start in starts]


def test_batches_carry_per_sentence_ids_in_row_order(setup):
    task, *_ = setup
    batch = collate(task, mixed_indices(task))
    d = task.source_dictionary
    for row in range(batch["target"].size(0)):
        # the toy languages mark every word with their code: read the language off the tokens
        tgt_word = d[batch["target"][row, 0]]
        src_word = d[batch["net_input"]["src_tokens"][row, -2]]  # left-padded, ends with eos
        assert batch["net_input"]["tgt_lang_id"][row] == task.inventory.id(tgt_word[-2:])
        src = src_word[-2:] if src_word[-2:] in ("xx", "yy") else "en"
        assert batch["net_input"]["src_lang_id"][row] == task.inventory.id(src)
    assert len(set(batch["net_input"]["tgt_lang_id"].tolist())) == 2


def test_the_ids_a_batch_carries_on_the_host_route_it_and_a_changed_batch_is_refused(setup):
    """The collater keeps each batch's ids as lists (``lang_ids_on_host``); the task hands them to the
    routing once the batch is on the device (fairseq's trainer has copied its tensors there), so the
    model groups the rows without reading the device, with the same output. Ids replaced after
    collation are refused, not routed by the stale lists; without the lists the ids are read."""
    from benchmarks.device_waits import device_waits
    from fairseq.utils import apply_to_sample

    task, model, probe, _ = setup
    batch = collate(task, mixed_indices(task))
    assert batch["lang_ids_on_host"] == {key: batch["net_input"][key].tolist() for key in ("src_lang_id", "tgt_lang_id")}
    expected = probe(**batch["net_input"])[0]
    on_device = task.ensure_lang_ids(apply_to_sample(torch.clone, batch), probe)  # new tensors, as on a GPU
    with device_waits() as sites:
        out = probe(**on_device["net_input"])[0]
    assert not [line for line in sites if line.startswith("fairseq_langshare/")], sites
    torch.testing.assert_close(out, expected, rtol=0, atol=0)

    changed = apply_to_sample(torch.clone, batch)
    changed["net_input"]["tgt_lang_id"] = changed["net_input"]["tgt_lang_id"].flip(0)  # a script's edit
    with pytest.raises(RuntimeError, match="differ from the lists its collater kept"):
        task.ensure_lang_ids(changed, probe)
    changed.pop("lang_ids_on_host")
    flipped = dict(batch["net_input"], tgt_lang_id=batch["net_input"]["tgt_lang_id"].flip(0))
    torch.testing.assert_close(probe(**task.ensure_lang_ids(changed, probe)["net_input"])[0],
                               probe(**flipped)[0], rtol=0, atol=0)


@pytest.mark.parametrize("write", ["data", "numpy"])
@pytest.mark.parametrize("between", [1, 0])
def test_ids_changed_where_their_version_does_not_show_route_by_their_values_when_run_again(setup, write, between):
    """A script that edits a batch's ids in place through ``.data`` or numpy (writes torch's version counter
    does not see) and runs the batch through the task again, with or without another batch between: the
    rows are routed by the new values, as the same values in a fresh tensor are (what the routing knows of
    a batch's ids serves that batch only; was: host copies kept for the tensor's life routed the rows by
    the old languages, and a cached grouping did when no batch came between)."""
    task, _, probe, _ = setup
    first, other = collate(task, mixed_indices(task)), collate(task, list(reversed(mixed_indices(task))))
    with torch.no_grad():
        for batch in (first, other)[:1 + between]:
            probe(**task.ensure_lang_ids(batch, probe)["net_input"])
        ids = first["net_input"]["tgt_lang_id"]
        new_values = [task.inventory.id("yy")] * ids.numel()  # was a mix of xx and yy
        if write == "data":
            ids.data.fill_(new_values[0])
        else:
            ids.numpy()[:] = new_values
        assert ids.tolist() == new_values
        first.pop("lang_ids_on_host")  # as the refusal of changed ids says
        out = probe(**task.ensure_lang_ids(first, probe)["net_input"])[0]
        fresh = probe(**dict(first["net_input"], tgt_lang_id=torch.tensor(new_values)))[0]
    torch.testing.assert_close(out, fresh, rtol=0, atol=0)


def test_same_weights_same_outputs_as_fairseq_transformer(setup):
    task, model, _, args = setup
    plain = TransformerModel.build_model(args, task).eval()
    state = {k: v for k, v in model.state_dict().items() if k != "lang_inventory"}
    plain.load_state_dict(state)
    batch = collate(task, mixed_indices(task))
    net_input = dict(batch["net_input"])
    ours = model(**net_input)[0]
    for key in ("src_lang_id", "tgt_lang_id"):
        net_input.pop(key)
    theirs = plain(**net_input)[0]
    torch.testing.assert_close(ours, theirs)


def _logits(model, batch):
    return model(**batch["net_input"])[0]


def row_keys(task, batch):
    """Identify rows by their source tokens and target language (ids repeat across directions)."""
    pad = task.source_dictionary.pad()
    ni = batch["net_input"]
    return [(tuple(t[t.ne(pad)].tolist()), int(l)) for t, l in zip(ni["src_tokens"], ni["tgt_lang_id"])]


def test_mixed_batch_equals_each_sentence_alone(setup):
    task, _, probe, _ = setup
    batch = collate(task, mixed_indices(task))
    mixed = dict(zip(row_keys(task, batch), _logits(probe, batch)))
    for i in mixed_indices(task):
        alone = collate(task, [i])
        n = alone["target"].size(1)
        torch.testing.assert_close(mixed[row_keys(task, alone)[0]][:n], _logits(probe, alone)[0], atol=1e-5, rtol=1e-4)


def test_language_ids_change_the_probe_output(setup):
    """Guards the test above: routing to the wrong language would change the output."""
    task, _, probe, _ = setup
    batch = collate(task, [0])
    swapped = {**batch, "net_input": dict(batch["net_input"])}
    swapped["net_input"]["tgt_lang_id"] = torch.full_like(batch["net_input"]["tgt_lang_id"], task.inventory.id("yy"))
    assert not torch.allclose(_logits(probe, batch), _logits(probe, swapped))


def test_missing_ids_are_a_clear_error(setup):
    task, _, probe, _ = setup
    batch = collate(task, [0, 1])
    net_input = {k: v for k, v in batch["net_input"].items() if not k.endswith("lang_id")}
    with pytest.raises(MissingLanguageIds, match="multilingual_langshare"):
        probe(**net_input)


def test_encoder_out_carries_and_reorders_ids(setup):
    task, _, probe, _ = setup
    batch = collate(task, mixed_indices(task))
    ni = batch["net_input"]
    enc = probe.encoder(ni["src_tokens"], ni["src_lengths"], src_lang_id=ni["src_lang_id"], tgt_lang_id=ni["tgt_lang_id"])
    assert torch.equal(enc["tgt_lang_id"][0], ni["tgt_lang_id"])
    order = torch.tensor([5, 5, 0, 2])
    re = probe.encoder.reorder_encoder_out(enc, order)
    assert torch.equal(re["tgt_lang_id"][0], ni["tgt_lang_id"][order])
    assert torch.equal(re["src_lang_id"][0], ni["src_lang_id"][order])


def encode(model, batch):
    ni = batch["net_input"]
    return model.encoder(ni["src_tokens"], ni["src_lengths"], src_lang_id=ni["src_lang_id"], tgt_lang_id=ni["tgt_lang_id"])


def assert_incremental_equals_full(task, model, batch):
    """Step-by-step decoding with fairseq's incremental state gives the teacher-forced outputs."""
    enc = encode(model, batch)
    prev = batch["net_input"]["prev_output_tokens"]
    full = model.decoder(prev, encoder_out=enc)[0]
    state = {}
    steps = [model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)[0] for t in range(prev.size(1))]
    real = prev.ne(task.target_dictionary.pad())  # full decoding masks padded positions
    torch.testing.assert_close(torch.cat(steps, dim=1)[real], full[real], atol=1e-5, rtol=1e-4)


def test_incremental_decoding_equals_full_decoding(setup):
    task, _, probe, _ = setup
    assert_incremental_equals_full(task, probe, collate(task, mixed_indices(task)))


def assert_beam_search_mixed_equals_alone(task, model, indices=None, collater=None, beam=3, max_len_b=12,
                                         min_distinct_lengths=1, copy_model=True):
    """Beam search over a mixed-language batch gives every sentence the hypothesis it gets alone.
    ``indices`` default to ``mixed_indices(task)``, ``collater(indices)`` to ``collate(task, ...)``;
    ``min_distinct_lengths`` > 1 asks for hypotheses that finish at different steps; the search
    runs on a copy (it sets a beam size on the attention modules) unless ``copy_model`` is False."""
    import copy

    indices = mixed_indices(task) if indices is None else indices
    collater = collater or (lambda idx: collate(task, idx))
    model = copy.deepcopy(model) if copy_model else model
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=beam, max_len_b=max_len_b)
    batch = collater(indices)
    hypos = generator.generate([model], batch)
    assert len({len(h[0]["tokens"]) for h in hypos}) >= min_distinct_lengths, "hypotheses of different lengths"
    mixed = {k: h[0]["tokens"].tolist() for k, h in zip(row_keys(task, batch), hypos)}
    for i in indices:
        alone = collater([i])
        assert generator.generate([model], alone)[0][0]["tokens"].tolist() == mixed[row_keys(task, alone)[0]]


def rows_per_layer(model, batch):
    """{(stack, layer index): rows the layer ran on} in one forward call (hooks on each layer's
    first layer norm)."""
    seen = {}
    hooks = [layer.self_attn_layer_norm.register_forward_hook(
        lambda m, args, out, key=(stack, i): seen.__setitem__(key, args[0].size(1)))
        for stack in ("encoder", "decoder") for i, layer in enumerate(getattr(model, stack).layers)]
    try:
        with torch.no_grad():
            model(**batch["net_input"])
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def assert_row_dispatch_equals_union(task, model, union, max_len_b=10):
    """A model whose layers run on row subsets (``modules/row_subsets.py``) against its union path
    (``union(True)``: every row runs every layer the batch keeps): the same logits and the same
    beam-search translations for a mixed batch, and each sentence's beam search as alone."""
    batch = collate(task, mixed_indices(task))
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=max_len_b)
    with torch.no_grad():
        per_row = model(**batch["net_input"])[0]
        per_row_hypos = [h[0]["tokens"].tolist() for h in generator.generate([model], batch)]
        union(True)
        try:
            whole = model(**batch["net_input"])[0]
            whole_hypos = [h[0]["tokens"].tolist() for h in generator.generate([model], batch)]
        finally:
            union(False)
    torch.testing.assert_close(per_row, whole, atol=1e-5, rtol=1e-4)
    assert per_row_hypos == whole_hypos
    assert_beam_search_mixed_equals_alone(task, model, max_len_b=max_len_b)


def reorder_schedule(lang_ids, steps, beam, seed=0):
    """The orders fairseq's beam search may apply before each of ``steps`` decoding steps (a list
    per step) to a batch of ``lang_ids.numel()`` sentences of ``beam`` adjacent rows each: every row
    copies a row of its own sentence. Two orders between two steps, sentences that finish (the
    batch shrinks, the row sets change), and at the last step the sentences of one language only
    (layers that ran on a subset run on every row or on none)."""
    gen = torch.Generator().manual_seed(seed)
    langs = lang_ids.clone()  # of the sentences left

    def beams(sentences):  # each row of these sentences copies a random row of its sentence
        picks = torch.randint(beam, (sentences.numel() * beam,), generator=gen)
        return sentences.repeat_interleave(beam) * beam + picks

    schedule = [[]]
    for t in range(1, steps):
        left = torch.arange(langs.numel())
        if t == steps - 1:
            left = (langs == langs[0]).nonzero().squeeze(1)
        elif t == 3:  # the first sentence of every language with more than one finishes
            left = torch.tensor([i for i in range(langs.numel()) if (langs[:i] == langs[i]).any()
                                 or (langs == langs[i]).sum() == 1])
        orders = [beams(left)] + ([beams(torch.arange(langs.numel()))] if t == 2 else [])
        langs = langs[left]
        schedule.append(orders)
    return schedule


def assert_reordered_decoding_equals_union(task, model, union, steps=6, beam=2):
    """Incremental decoding of a mixed batch through ``reorder_schedule``'s orders (applied as
    fairseq applies a beam's: to the incremental state and to the encoder output) gives, at every
    step and row, the union path's outputs and the full decoding's: the caches of layers that run
    on row subsets follow every order. On a copy of the model (it sets a beam size)."""
    import copy

    model = copy.deepcopy(model)
    model.decoder.set_beam_size(beam)
    batch = collate(task, mixed_indices(task))
    prev = batch["net_input"]["prev_output_tokens"]
    steps = min(steps, prev.size(1))
    assert steps >= 5
    schedule = reorder_schedule(batch["net_input"]["tgt_lang_id"], steps, beam)
    expand = torch.arange(prev.size(0)).repeat_interleave(beam)  # as the generator expands a batch
    dictionary = task.target_dictionary
    hypotheses = prev.index_select(0, expand).clone()  # beams with histories of their own (no padding)
    hypotheses[:, 1:] = torch.randint(dictionary.nspecial, len(dictionary), (hypotheses.size(0), prev.size(1) - 1),
                                      generator=torch.Generator().manual_seed(1))
    outputs = []
    with torch.no_grad():
        for on in (False, True):
            union(on)
            try:
                enc = model.encoder.reorder_encoder_out(encode(model, batch), expand)
                state, tokens, outs, full = {}, hypotheses, [], []
                for t in range(steps):
                    for order in schedule[t]:
                        model.decoder.reorder_incremental_state_scripting(state, order)
                        enc = model.encoder.reorder_encoder_out(enc, order)
                        tokens = tokens.index_select(0, order)
                    outs.append(model.decoder(tokens[:, : t + 1], encoder_out=enc, incremental_state=state)[0][:, -1])
                    full.append(model.decoder(tokens[:, : t + 1], encoder_out=enc)[0][:, -1])
            finally:
                union(False)
            outputs.append((outs, full))
    (per_row, full), (whole, _) = outputs
    for t in range(steps):
        torch.testing.assert_close(per_row[t], whole[t], atol=1e-5, rtol=1e-4, msg=lambda m: f"step {t}: {m}")
        torch.testing.assert_close(per_row[t], full[t], atol=1e-5, rtol=1e-4, msg=lambda m: f"step {t}, full: {m}")


def test_beam_search_keeps_each_hypothesis_language(setup):
    task, _, probe, _ = setup
    assert_beam_search_mixed_equals_alone(task, probe, copy_model=False)  # the probe holds non-leaf tensors


def test_reordered_langs_route_by_code_after_loading(corpus):
    """Without language tokens, a checkpoint loads under a reordered --langs and every
    sentence still goes through its own language's weights."""
    task_a, _, args_a = build_task_and_model(corpus, extra=["--dropout", "0.0"], langtok=False)
    probe_a = build_probe(task_a, args_a).eval()
    task_b, _, args_b = build_task_and_model(corpus, extra=["--dropout", "0.0"], langtok=False,
                                             langs=["yy", "xx", "en"], seed=7)
    probe_b = build_probe(task_b, args_b).eval()
    assert task_b.inventory.id("yy") == 0
    probe_b.load_state_dict(probe_a.state_dict())
    assert task_b.inventory.id("yy") == 2 and probe_b.langs == ["en", "xx", "yy"]
    for task in (task_a, task_b):
        task.load_dataset("valid")
    indices = mixed_indices(task_a)
    batch_a, batch_b = collate(task_a, indices), collate(task_b, indices)
    assert torch.equal(batch_a["net_input"]["tgt_lang_id"], batch_b["net_input"]["tgt_lang_id"])
    torch.testing.assert_close(_logits(probe_b, batch_b), _logits(probe_a, batch_a))


@pytest.mark.parametrize("arch", ["langshare_adapter_transformer", "langshare_multistack_transformer", "lsl_transformer",
                                  "clsr_transformer", "latent_depth_transformer", "adaptive_sparse_transformer"])
def test_a_method_built_for_a_task_without_languages_names_the_task_to_use(tmp_path, arch):
    """fairseq's own tasks put no language ids in a batch: every method refuses to be built for one (one
    line, before any data is read), not only at its first forward."""
    from fairseq import models, options
    from fairseq.data import Dictionary
    from fairseq.tasks.translation import TranslationTask

    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(tmp_path), "--task", "translation", "--arch", arch, "--max-update", "10"])
    dictionary = Dictionary()
    with pytest.raises(ValueError, match=f"^{arch} .*: use --task multilingual_langshare with --langs$"):
        models.ARCH_MODEL_REGISTRY[arch].build_model(args, TranslationTask(args, dictionary, dictionary))
