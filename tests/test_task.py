"""Task-level behaviour of multilingual_langshare that needs no training."""

import shutil

import pytest
import torch
from fairseq import options, tasks

from tiny_corpus import make_corpus, task_args


def setup_task(corpus, *extra, langs=None, pairs=None):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, task_args(corpus, langs, pairs) + ["--arch", "langshare_transformer_tiny", *extra])
    return tasks.setup_task(args)


def test_language_without_dictionary_is_a_one_line_error(corpus):
    with pytest.raises(FileNotFoundError, match=r"no dictionary for language 'zz': expected .*dict.zz.txt"):
        setup_task(corpus, langs=["en", "xx", "yy", "zz"], pairs=["en-xx", "en-zz"])


def test_pair_without_data_is_a_one_line_error(corpus, tmp_path):
    data = tmp_path / "bin"
    shutil.copytree(corpus["bin"], data)
    shutil.copy(data / "dict.en.txt", data / "dict.zz.txt")
    task = setup_task({**corpus, "bin": data}, langs=["en", "xx", "yy", "zz"], pairs=["en-xx", "en-zz"])
    with pytest.raises(FileNotFoundError, match=r"no train data for the pair en-zz .*train.en-zz.en.idx") as err:
        task.load_dataset("train")
    assert "\n" not in str(err.value)
    # fairseq-train loads valid first: was "no valid data ... (langshare prepare-data with a valid.en-zz.tsv, ...)",
    # which made en-zz a test-only direction, and the next run stopped on its training data
    with pytest.raises(FileNotFoundError) as err:
        task.load_dataset("valid")
    assert str(err.value).startswith("no valid data for the pair en-zz, and no train data either, in ")
    assert str(err.value).endswith(": binarize that direction (langshare prepare-data given en-zz.tsv, from which "
                                   "valid and test sets are held out, or fairseq-preprocess) or remove it from "
                                   "--lang-pairs / -s -t")


def test_unknown_language_in_pairs_is_a_clear_error(corpus):
    with pytest.raises(ValueError, match="unknown language 'zz': it is not in --langs en,xx,yy"):
        setup_task(corpus, pairs=["en-xx", "en-zz"])


def test_training_batches_mix_directions_and_ids_follow_rows(corpus):
    task = setup_task(corpus, "--sampling-method", "temperature", "--sampling-temperature", "5")
    task.load_dataset("train")
    itr = task.get_batch_iterator(task.dataset("train"), max_tokens=300, seed=1).next_epoch_itr(shuffle=True)
    d = task.source_dictionary
    mixed = 0
    for batch in itr:
        tgt_ids = batch["net_input"]["tgt_lang_id"]
        assert tgt_ids.shape == batch["id"].shape and tgt_ids.dtype == torch.long
        for row, lang in enumerate(tgt_ids.tolist()):
            assert d[batch["target"][row, 0]].endswith(task.inventory.langs[lang])
        mixed += len(set(tgt_ids.tolist())) > 1
    assert mixed > 0, "no batch mixed directions"


def test_validation_and_generation_batches_keep_every_sentence(corpus):
    task = setup_task(corpus)
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    itr = task.get_batch_iterator(dataset, max_tokens=1000, required_batch_size_multiple=8).next_epoch_itr(shuffle=False)
    assert sum(b["id"].numel() for b in itr) == len(dataset)


@pytest.fixture(scope="module")
def odd_corpus(tmp_path_factory):
    """301 training pairs per direction: 602 in all, not a multiple of 8."""
    return make_corpus(tmp_path_factory.mktemp("odd"), n_train=301)


@pytest.mark.parametrize("sampling", ["concat", "temperature"])
def test_training_batches_keep_every_sentence_and_the_multiple(odd_corpus, sampling):
    """fairseq 0.12 drops the epoch's last batch when its size is not a multiple of
    --required-batch-size-multiple (default 8): batches are cut from the sentences ordered by length, so the
    longest sentences of the corpus never trained (was: 2 of 1,978 pairs in a user's corpus, every epoch).
    The training split keeps the multiple for every batch but the last, and keeps the last."""
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, task_args(odd_corpus) + [
        "--arch", "langshare_transformer_tiny", "--sampling-method", sampling])
    task = tasks.setup_task(args)
    task.load_dataset("train", epoch=1)
    dataset = task.dataset("train")
    batches = list(task.get_batch_iterator(dataset, max_tokens=1000, required_batch_size_multiple=8,
                                           seed=1, epoch=1).next_epoch_itr(shuffle=False))
    assert sum(b["id"].numel() for b in batches) == len(dataset)
    sizes = [b["id"].numel() for b in batches]
    assert sizes[-1] % 8 and all(size % 8 == 0 for size in sizes[:-1]), sizes  # the case this guards


def test_batches_without_ids_get_them_from_the_inference_direction(corpus):
    """fairseq-interactive builds net_input from tokens only."""
    parser = options.get_generation_parser()
    args = options.parse_args_and_arch(parser, task_args(corpus) + ["-s", "en", "-t", "yy"])
    task = tasks.setup_task(args)
    sample = {"net_input": {"src_tokens": torch.ones(3, 4, dtype=torch.long), "src_lengths": torch.tensor([4, 4, 4])}}
    original = sample["net_input"]
    sample = task.ensure_lang_ids(sample)
    assert "src_lang_id" not in original  # the caller's batch is left alone
    assert sample["net_input"]["src_lang_id"].tolist() == [task.inventory.id("en")] * 3
    assert sample["net_input"]["tgt_lang_id"].tolist() == [task.inventory.id("yy")] * 3


def test_plain_fairseq_transformer_trains_on_the_task(corpus):
    """Models that take no language ids (fairseq's own transformer) get batches without them."""
    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, task_args(corpus) + [
        "--arch", "transformer", "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16",
        "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "16", "--decoder-ffn-embed-dim", "16"])
    task = tasks.setup_task(args)
    model = task.build_model(args)
    task.load_dataset("valid")
    ds = task.dataset("valid")
    batch = ds.collater([ds[i] for i in range(4)])
    loss, _, _ = task.valid_step(batch, model, LabelSmoothedCrossEntropyCriterion(task, False, 0.0))
    assert torch.isfinite(loss)
    assert "src_lang_id" not in task.ensure_lang_ids(batch, model)["net_input"]
    assert "src_lang_id" in batch["net_input"]  # the shared batch is left intact for other models


def test_inference_groups_the_batch_by_direction_and_answers_in_the_callers_order(corpus, monkeypatch):
    """Decoding a mixed batch runs it grouped by direction (each language one block of rows) and
    gives every sentence the hypotheses it gets when the batch is decoded in its own order."""
    from fairseq.sequence_generator import SequenceGenerator

    import fairseq_langshare.tasks.multilingual_langshare as task_module
    from test_language_aware_model import collate, mixed_indices
    from tiny_corpus import build_task_and_model

    task, model, _ = build_task_and_model(corpus, arch="lsl_transformer_tiny", extra=[
        "--lsl-encoder-layers", "TGT={2}", "--dropout", "0.0"])
    task.load_dataset("valid")
    model.eval()
    batch = collate(task, mixed_indices(task))
    tgt = batch["net_input"]["tgt_lang_id"]
    assert not bool((tgt[1:] >= tgt[:-1]).all()), "the test needs an interleaved batch"
    gen = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=8)
    seen = []
    generate = gen.generate
    monkeypatch.setattr(gen, "generate", lambda models, sample, **kw: seen.append(sample) or generate(models, sample, **kw))
    grouped = task.inference_step(gen, [model], batch)
    ids = seen[-1]["net_input"]["tgt_lang_id"]
    assert bool((ids[1:] >= ids[:-1]).all())
    assert sorted(seen[-1]["id"].tolist()) == sorted(batch["id"].tolist())
    monkeypatch.setattr(task_module, "direction_order", lambda net_input: None)
    plain = task.inference_step(gen, [model], batch)
    assert seen[-1]["id"].tolist() == batch["id"].tolist()
    tokens = lambda hypos: [h[0]["tokens"].tolist() for h in hypos]  # noqa: E731
    assert tokens(grouped) == tokens(plain)
    assert len(set(map(tuple, tokens(plain)))) > 1, "the test needs sentences with different outputs"
