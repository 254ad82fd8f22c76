"""Hot-path defects of issue 18 (Deliver 4): what each fix guarantees, outputs unchanged.

A "sync" below is a conversion of a tensor to a Python value (``int``, ``bool``, ``float``,
``item``, ``tolist``): on a GPU each one waits for the device. The tests count them.
"""

from contextlib import contextmanager

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator
from fairseq.utils import apply_to_sample

from fairseq_langshare.modules import language_specific_layer as lsl_module
from fairseq_langshare.modules.clsr import LanguageProjections
from fairseq_langshare.modules.language_specific_layer import LanguageSpecificModule
from fairseq_langshare.modules.routing import LanguageIds
from test_language_aware_model import assert_beam_search_mixed_equals_alone, collate, encode, mixed_indices
from tiny_corpus import build_task_and_model

SYNCS = ("__int__", "__bool__", "__float__", "item", "tolist")


@contextmanager
def count_syncs():
    counts = {"n": 0}
    saved = {name: getattr(torch.Tensor, name) for name in SYNCS}

    def wrap(fn):
        def counted(self, *a, **k):
            counts["n"] += 1
            return fn(self, *a, **k)
        return counted

    for name, fn in saved.items():
        setattr(torch.Tensor, name, wrap(fn))
    try:
        yield counts
    finally:
        for name, fn in saved.items():
            setattr(torch.Tensor, name, fn)


def _backward_nodes(out):
    seen, stack, names = set(), [out.grad_fn], []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.append(type(node).__name__)
        stack.extend(n for n, _ in node.next_functions)
    return names


def test_clsr_bank_is_sliced_once_per_call_in_training():
    """``rows @ weight[lang]`` per language: each slice's backward writes a zero tensor the size of
    the whole bank (and adds it). One ``index_select`` per call: one."""
    proj = LanguageProjections(20, 8)
    ids = torch.arange(20).repeat(2)
    h = torch.randn(3, ids.numel(), 8)
    out = proj(h, ids)
    names = _backward_nodes(out)
    assert sum(n.startswith("SelectBackward") for n in names) == 0
    assert sum(n.startswith("IndexSelectBackward") for n in names) <= 3  # bank once, rows gather/scatter
    out.square().sum().backward()
    expected = torch.stack([h[:, ids == lang].reshape(-1, 8).t() @ (2 * out[:, ids == lang].reshape(-1, 8))
                            for lang in range(20)])
    torch.testing.assert_close(proj.weight.grad, expected, atol=1e-5, rtol=1e-4)


def test_binding_ids_makes_no_sync():
    ids = LanguageIds()
    mask = torch.zeros(4, 7, dtype=torch.bool)
    with count_syncs() as n:
        with ids.bind(torch.zeros(4, dtype=torch.long), torch.ones(4, dtype=torch.long), padding_mask=mask):
            ids.raw_padding_mask(1)
    assert n["n"] == 0
    with ids.bind(None, None, padding_mask=mask):
        assert ids.padding_mask(7) is None and ids.padding_mask(1) is None  # nothing padded: None, as before
    mask[0, :2] = True
    with ids.bind(None, None, padding_mask=mask):
        assert ids.padding_mask(7) is mask and ids.padding_mask(1) is None and ids.padding_mask(6) is not None


@pytest.fixture(scope="module")
def clsr(corpus):
    task, model, _ = build_task_and_model(corpus, arch="clsr_transformer_tiny",
                                          extra=["--clsr-encoder-lang", "tgt", "--max-update", "100", "--dropout", "0"])
    task.load_dataset("valid")
    return task, model


def test_clsr_auxiliary_outputs_make_no_sync(clsr):
    task, model = clsr
    model.train()
    model.set_num_updates(50)
    batch = collate(task, mixed_indices(task))
    assert batch["net_input"]["src_tokens"].eq(task.source_dictionary.pad()).any()  # padded: counts matter
    model(**batch["net_input"])
    with count_syncs() as n:
        losses, stats = model.auxiliary_outputs()
    model.eval()
    # the only conversion left: the logged statistics (gate_open, _enc, _dec), read in one go (was
    # one each); the budget's counts stay on the device (was one int() per unit and stack)
    assert n["n"] == 1
    assert 0 < stats["gate_open"] < 1 and losses["budget"][0].dim() == 0


def test_lsl_container_checks_ids_from_the_routing_grouping():
    ids = LanguageIds()
    module = LanguageSpecificModule([torch.nn.Linear(4, 4) for _ in range(3)], ids, "tgt")
    x, lang = torch.randn(2, 5, 4), torch.full((5,), 2)
    with ids.bind(None, lang):
        module(x)
        with count_syncs() as n:
            y = module(x)  # a second container of the same call: the grouping is cached
    assert n["n"] == 0
    torch.testing.assert_close(y, module.copies[2](x))
    with ids.bind(None, torch.tensor([0, 3])), pytest.raises(IndexError, match="language id 3 has no"):
        module(torch.randn(2, 2, 4))


@pytest.fixture(scope="module")
def separate(corpus):
    task, model, _ = build_task_and_model(corpus, arch="lsl_transformer_tiny",
                                          extra=["--lsl-separate-decoder", "--dropout", "0"])
    task.load_dataset("valid")
    model.eval()
    return task, model


def _one_direction(task):
    ds = task.datasets["valid"]
    return [i for i in range(len(ds)) if ds[i]["tgt_lang"] == "xx"][:3]


def test_single_language_batches_are_not_packed(separate, monkeypatch):
    task, model = separate
    calls, pack = [], lsl_module._pack
    monkeypatch.setattr(lsl_module, "_pack", lambda *a: calls.append(1) or pack(*a))
    batch = collate(task, _one_direction(task))
    with torch.no_grad():
        enc = encode(model, batch)
        prev = batch["net_input"]["prev_output_tokens"]
        model.decoder(prev, encoder_out=enc)
        state = {}
        for t in range(3):
            model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)
    assert calls == []


def test_separate_decoders_compare_ids_once_per_step_and_translate_as_before(separate, monkeypatch):
    """One ``torch.equal`` per decoding step for all layers (was one per layer), and beam search
    (which reorders and prunes rows) gives each sentence the translation it gets alone."""
    task, model = separate
    equal = torch.equal
    calls = []
    monkeypatch.setattr(torch, "equal", lambda a, b: calls.append(1) or equal(a, b))
    gen = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=8, min_len=8)
    for indices in (_one_direction(task), mixed_indices(task)):
        calls.clear()
        with torch.no_grad():
            gen.generate([model], collate(task, indices))
        assert len(calls) <= 9, len(calls)  # 9 decoding steps
        assert_beam_search_mixed_equals_alone(task, model, indices, min_distinct_lengths=1)


def test_one_direction_decoding_reorders_one_copy_per_layer(separate, monkeypatch):
    """fairseq's reorder walks every module (all languages' decoders); the decoder's walk stops at
    the per-language containers, which reorder the copy that holds rows."""
    from fairseq.modules import MultiheadAttention

    task, model = separate
    reorder, calls = MultiheadAttention.reorder_incremental_state, []
    monkeypatch.setattr(MultiheadAttention, "reorder_incremental_state",
                        lambda self, *a: calls.append(self) or reorder(self, *a))
    gen = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=4, min_len=4)
    with torch.no_grad():
        gen.generate([model], collate(task, _one_direction(task)))
    xx = task.inventory.id("xx")
    owners = {id(m): lang for layer in model.decoder.layers for lang, copy in enumerate(layer.copies)
              for m in copy.modules() if isinstance(m, MultiheadAttention)}
    assert calls and {owners[id(m)] for m in calls} == {xx}
    assert_beam_search_mixed_equals_alone(task, model, _one_direction(task))


def test_train_mode_reaches_every_copy_without_walking_copies_already_in_it():
    ids = LanguageIds()
    module = LanguageSpecificModule([torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5))
                                     for _ in range(4)], ids, "tgt")
    module.eval()
    assert not any(m.training for m in module.modules())
    module.train()
    assert all(m.training for m in module.modules())
    calls = []
    for copy in module.copies:
        copy.train = lambda mode=True, copy=copy: calls.append(copy) or torch.nn.Module.train(copy, mode)
    module.train()
    assert calls == []  # already training: not walked
    module.eval()
    assert len(calls) == 4 and not any(m.training for m in module.modules() if not isinstance(m, type(module)))


# --- waits for the device in a training step (issue 41: latent depth scaled at 0.61 on the H200,
# where each of its 18 synchronisations per update, 10 of them the plugin's, stalls two ranks that
# share the device). Counted on the CPU by benchmarks/device_waits.py, checked there against
# torch.cuda.set_sync_debug_mode.

# what a training step of each method may ask the device for beyond a baseline of the same depth,
# at most: (flags, updates before the step, budget)
WAIT_BUDGETS = {
    # none: the collater keeps the batch's ids as lists, which the task hands to the routing once the
    # batch is on the device (routing.note_host_ids); grouping the rows by language reads nothing
    "adapter": ([], 5, 0),
    "lsl": ([], 5, 0),
    "multistack": ([], 5, 0),
    # the logged gate statistics, the budget loss: one read each
    "clsr": ([], 5, 2),
    # after the commit, the plan of each latent stack (how many rows keep each layer on which
    # languages disagree), the logged statistics
    "latent_depth": (["--latent-commit-updates", "1"], 5, 3),
    # in phase 2, the auxiliary losses the criterion logs, read in one go
    "adaptive_sparse": (["--sparse-t-bar", "1"], 5, 1),
}


def _waits_of_a_training_step(corpus, method, flags, updates):
    """Per source line, what the second training step (forward, criterion, backward) asks the
    device, and the model's depth."""
    from benchmarks.device_waits import device_waits
    from method_configs import METHODS, TRAIN, distinct_languages

    task, model, args = build_task_and_model(corpus, extra=[*METHODS[method][2:], *TRAIN, *flags, "--dropout", "0"],
                                             arch=METHODS[method][1])
    task.load_dataset("valid")
    criterion = task.build_criterion(args)
    distinct_languages(model)  # languages keep different components
    if method == "latent_depth":  # language n keeps decoder layers n and n + 1 (mod 4): xx and yy differ
        selector = model.decoder.layer_select
        n, layers = selector.alpha().shape
        selector.set_alpha(torch.tensor([[5.0 if (k - i) % layers < 2 else -5.0 for k in range(layers)]
                                         for i in range(n)]))
    model.train()
    model.set_num_updates(updates)  # e.g. after latent depth's commit, in adaptive sparsity's phase 2
    rows = mixed_indices(task)
    loss, *_ = criterion(model, collate(task, rows))  # the first step after the switch (commit, tables)
    loss.backward()
    # another batch, as the task trains on it: copied to the device (new tensors) by fairseq's trainer, then
    # given to the model by the task's train_step
    batch = task.ensure_lang_ids(apply_to_sample(torch.clone, collate(task, [i + 3 for i in rows])), model)
    with device_waits() as sites:
        loss, _, logged = criterion(model, batch)
        loss.backward()
    assert all(isinstance(v, (int, float)) for v in logged.values() if not torch.is_tensor(v))
    if method == "latent_depth":  # the step ran a layer on some rows only
        assert any(torch.is_tensor(step) for step in model.decoder.layer_select._cache["plan"]["plan"])
    return sites, ["--encoder-layers", str(args.encoder_layers), "--decoder-layers", str(args.decoder_layers)]


@pytest.mark.parametrize("method", sorted(WAIT_BUDGETS))
def test_a_training_step_asks_the_device_only_for_what_sets_its_shapes(corpus, method):
    """fairseq itself reads the device per update (its logging) and per encoder layer (whether the
    batch is padded): the baseline of the same depth pays those; the rest is the method's."""
    flags, updates, budget = WAIT_BUDGETS[method]
    sites, depth = _waits_of_a_training_step(corpus, method, flags, updates)
    base, _ = _waits_of_a_training_step(corpus, "baseline", depth, updates)
    more = {line: n - base.get(line, 0) for line, n in sites.items() if n != base.get(line, 0)}
    assert sum(sites.values()) - sum(base.values()) <= budget, more


def _committed_selector(training_ids):
    """A decoder stack of 5 latent layers over 4 languages, trained on 0 and 1, committed: languages
    0 and 1 agree on layers 1, 3-5, language 2 differs from both, language 3 is undecided."""
    from fairseq_langshare.modules.latent_layers import LayerSelector

    selector = LayerSelector("dec", 4, 5, "tgt", commit_updates=1, trained_languages=training_ids)
    selector.set_alpha(torch.tensor([[5., 5., -5., 5., -5.], [5., -5., -5., 5., -5.],
                                     [-5., 5., 5., -5., 5.], [0., 0., 0., 0., 0.]]))
    selector.num_updates = 2
    selector.train()
    selector.prepare(torch.tensor([0, 1]))  # commits
    assert selector.is_committed()
    return selector


def _plan_text(selector, plan):
    return [step if isinstance(step, str) else selector.plan_rows(layer, step).tolist() for layer, step in enumerate(plan)]


@pytest.mark.parametrize("ids", [[0, 2, 1, 3], [2, 2], [0, 1, 1, 0]])
def test_a_training_plan_runs_each_row_as_its_own_language_decides(ids):
    """The training plan reads nothing for the layers every language agrees on; it once decided them
    from the trained languages alone, so a row of a language outside them (fairseq's
    --extra-lang-pairs trains such directions) ran the trained languages' layers, and an eval call
    with the same ids reused that plan."""
    trained = _committed_selector([0, 1])
    trained.prepare(torch.tensor(ids))
    fresh = _committed_selector([0, 1])
    fresh.eval()
    fresh.prepare(torch.tensor(ids))
    expected = _plan_text(fresh, fresh._call["plan"])
    assert _plan_text(trained, trained._call["plan"]) == expected
    trained.eval()
    trained.prepare(torch.tensor(ids))
    assert _plan_text(trained, trained._call["plan"]) == expected


def test_training_statistics_follow_the_logits_after_the_commit():
    """An fp16 optimizer's momentum moves the logits after the commit: the logged u_l follow them
    (they froze at the commit's values when the step stopped comparing the logits)."""
    selector = _committed_selector([0, 1])
    selector.pop_auxiliary()
    selector.prepare(torch.tensor([0, 1]))
    before = collect_stats(selector)
    with torch.no_grad():
        selector.logits.data.add_(3.0)
    selector.prepare(torch.tensor([0, 1]))
    after = collect_stats(selector)
    assert after["dec_u_1"] > before["dec_u_1"] + 0.001 and after["dec_depth"] > before["dec_depth"]


def collect_stats(module):
    from fairseq_langshare.modules.auxiliary import collect_auxiliary

    return collect_auxiliary(module)[1]


def test_rows_of_a_known_count_sorts_no_bool_tensor(monkeypatch):
    """CUDA sorts no bool tensor before torch 2.5 (the package supports 2.4): the rows of a layer
    that runs on some rows only are found by sorting uint8."""
    from fairseq_langshare.modules import row_subsets

    argsort = torch.argsort

    def no_bool(t, *args, **kwargs):
        assert t.dtype != torch.bool, "torch 2.4 cannot sort bool on CUDA"
        return argsort(t, *args, **kwargs)

    monkeypatch.setattr(torch, "argsort", no_bool)
    mask = torch.tensor([False, True, True, False, True]).view(1, -1, 1)
    assert row_subsets.rows_of(mask, 3).tolist() == [1, 2, 4] == row_subsets.rows_of(mask).tolist()


def _cpu_only_lines():
    """The lines of CLSR's shortcut that reads the gates only where reading costs nothing (the CPU)."""
    import inspect
    from fairseq_langshare.modules import clsr
    return {f"fairseq_langshare/modules/clsr.py:{number}"
            for number, line in enumerate(inspect.getsource(clsr).splitlines(), start=1)
            if "n_open = int(gates.sum())" in line}


def _waits_of_a_beam_search(corpus, method, warm_up, counted, extra=()):
    """What a beam search of ``method`` (distinct selections per language) asks the device for, per
    source line, on the batch ``counted()`` returns, after one search of ``warm_up()``; with the
    number of decoder steps and the hypotheses."""
    from benchmarks.device_waits import device_waits
    from method_configs import METHODS, distinct_languages

    task, model, args = build_task_and_model(corpus, extra=[*METHODS[method][2:], "--dropout", "0", *extra],
                                             arch=METHODS[method][1])
    task.load_dataset("valid")
    distinct_languages(model)
    model.eval()
    args.min_len = 12  # an untrained network may end its hypotheses at once (torch's random numbers decide)
    generator = task.build_generator([model], args)
    steps, forward = [], model.decoder.forward  # the generator calls forward itself: no module hook runs

    def counted_forward(*args, **kwargs):
        steps.append(1)
        return forward(*args, **kwargs)

    model.decoder.forward = counted_forward
    with torch.no_grad():
        task.inference_step(generator, [model], warm_up(task))
        steps.clear()
        batch = counted(task)
        with device_waits() as sites:
            hypos = task.inference_step(generator, [model], batch)
    return sites, len(steps), hypos


@pytest.mark.parametrize("method", ["adapter", "multistack", "lsl", "clsr"])
def test_a_beam_search_of_one_direction_routes_its_steps_without_reading_the_device(corpus, method):
    """Beam search keeps every row in its sentence, so a batch of one direction (the task decodes a test
    set direction by direction) has one language at every step: the reordered ids are known on the host
    (``routing.reorder_ids``) and no step reads them again. Were 1 read per step for the adapters and
    CLSR, 2 for the multi-stacks and LSL (the grouping of the reordered ids, LSL's check that they still
    match its caches); now the batch's ids come with it as lists (``lang_ids_on_host``) and nothing is read."""
    one_direction = list(range(6))  # the valid set's first direction (en-xx)
    batch = lambda task: collate(task, one_direction)  # noqa: E731  new tensors each time, as each batch brings
    sites, steps, hypos = _waits_of_a_beam_search(corpus, method, batch, batch, extra=["--max-update", "100"])
    plugin = {line: n for line, n in sites.items()
              if line.startswith("fairseq_langshare/") and line not in _cpu_only_lines()}
    assert steps > 10 and sum(plugin.values()) <= 2, (steps, plugin)
    assert len(hypos) == len(one_direction)


@pytest.mark.parametrize("method", ["latent_depth", "adaptive_sparse"])
def test_a_beam_search_step_reads_the_device_once_for_the_plan(corpus, method):
    """Each step of a beam search checks that the plan still holds (the same ids, the same logits):
    one device read for all of it (were 3 per step for latent depth, 4 for adaptive sparsity)."""
    batch = {}

    def mixed(task):  # the same batch twice: the plan of these sentences, computed once
        return batch.setdefault("b", collate(task, mixed_indices(task)))

    sites, steps, _ = _waits_of_a_beam_search(corpus, method, mixed, mixed)
    plugin = {line: n for line, n in sites.items() if line.startswith("fairseq_langshare/modules/")}
    assert steps > 10 and sum(plugin.values()) <= steps + 4, (steps, plugin)
