"""A run resumed on another number of processes picks its epoch up where it stopped: no batch of the
epoch is read twice or skipped (fairseq counts the position in the rank's batches, and deals the
epoch's batches out to the ranks in turn)."""

import pytest
import torch

from tiny_corpus import build_task_and_model


@pytest.fixture(scope="module")
def save_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("save")


@pytest.fixture(scope="module")
def task(corpus, save_dir):
    task, _, _ = build_task_and_model(corpus, extra=["--save-dir", str(save_dir)])
    task.load_dataset("train", epoch=1)
    return task


def iterator(task, shards, shard):
    return task.get_batch_iterator(task.dataset("train"), max_sentences=16, num_shards=shards, shard_id=shard,
                                   seed=1, epoch=1, disable_iterator_cache=True)


def ids(batches):
    """(sentence id, target language) of every row: ids count within a direction."""
    return [row for batch in batches if batch
            for row in zip(batch["id"].tolist(), batch["net_input"]["tgt_lang_id"].tolist())]


def take(itr, n):
    epoch = itr.next_epoch_itr(shuffle=True)
    return [next(epoch) for _ in range(n)]


def whole_epoch(task):
    return sorted(ids(iterator(task, 1, 0).next_epoch_itr(shuffle=True)))


@pytest.mark.parametrize("before,after", [(1, 2), (2, 1), (2, 4), (4, 2)])
def test_a_resume_on_another_number_of_processes_reads_the_rest_of_the_epoch_once(task, before, after):
    """Stopped three quarters into the epoch: past 1/after of it, where fairseq stopped a resume on more
    processes ("Cannot resume training due to dataloader mismatch") and re-read batches on fewer."""
    resume_reads_the_rest_once(task, before, after)


@pytest.mark.parametrize("before,after", [(2, 1), (1, 2)])
def test_a_position_saved_without_its_process_count_takes_the_checkpoints(task, save_dir, caplog, before, after):
    """A checkpoint written before the position named its process count: the resumed checkpoint's world size
    (its config) says it. Such a checkpoint came from a version that dropped the epoch's last batch, whose
    epoch was shuffled without it: one warning says the rest of that epoch may differ."""
    torch.save({"cfg": {"distributed_training": {"distributed_world_size": before}}}, save_dir / "checkpoint_last.pt")
    try:
        resume_reads_the_rest_once(task, before, after, saved_without_count=True)
    finally:
        (save_dir / "checkpoint_last.pt").unlink()
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == after and all("under an earlier version of the plugin" in w for w in warned)


def resume_reads_the_rest_once(task, before, after, saved_without_count=False):
    per_rank = len(iterator(task, before, 0))
    done_per_rank = (3 * per_rank // 4) // after * after  # a multiple of the new count: the split is exact
    done, state = [], None
    for shard in range(before):
        itr = iterator(task, before, shard)
        done += ids(take(itr, done_per_rank))
        state = itr.state_dict()  # every rank saves the same position
    if saved_without_count:
        state.pop("num_shards")
    rest = []
    for shard in range(after):
        itr = iterator(task, after, shard)
        itr.load_state_dict(state)
        rest += ids(itr.next_epoch_itr(shuffle=True))
    assert sorted(done + rest) == whole_epoch(task)


def test_the_same_number_of_processes_resumes_as_fairseq_does(task):
    itr = iterator(task, 2, 1)
    done = take(itr, 3)
    resumed = iterator(task, 2, 1)
    resumed.load_state_dict(itr.state_dict())
    rest = list(resumed.next_epoch_itr(shuffle=True))
    assert ids(done + rest) == ids(iterator(task, 2, 1).next_epoch_itr(shuffle=True))


@pytest.mark.parametrize("saved,now,line", [
    (2, 1, "epoch 3 stopped after 10 of its batches on 2 processes: the process resumes after 10 of its own"),
    (1, 2, "epoch 3 stopped after 5 of its batches on 1 process: each of the 2 processes resumes after 2 of its own "
           "(1 batch done is read again)"),
    (1, 4, "epoch 3 stopped after 5 of its batches on 1 process: each of the 4 processes resumes after 1 of its own "
           "(1 batch done is read again)"),
    (3, 2, "epoch 3 stopped after 15 of its batches on 3 processes: each of the 2 processes resumes after 7 of its "
           "own (1 batch done is read again)"),
])
def test_the_rescaled_position_is_said_in_one_line(caplog, saved, now, line):
    """5 batches done on the saved number of processes (was: 'each of the 1 processes', '1 of the batches done
    are read again')."""
    from fairseq_langshare.tasks.training_epoch import rescaled_position

    with caplog.at_level("INFO"):
        state = rescaled_position({"epoch": 3, "iterations_in_epoch": 5, "shuffle": True}, saved, now)
    assert state["iterations_in_epoch"] == 5 * saved // now
    assert [r.getMessage() for r in caplog.records] == [line]


def test_the_training_set_keeping_its_last_batch_still_pickles(task):
    """A data loader whose workers start by spawn (macOS, Windows; Linux from Python 3.14) pickles the dataset:
    was "Can't pickle local object 'keep_the_last_batch.<locals>.batch_by_size'"."""
    import pickle

    dataset = task.dataset("train")
    task.get_batch_iterator(dataset, max_tokens=1000, required_batch_size_multiple=8, seed=1, epoch=1)
    copy = pickle.loads(pickle.dumps(dataset))
    indices = dataset.ordered_indices()
    assert [b.tolist() for b in copy.batch_by_size(indices, max_tokens=1000, required_batch_size_multiple=8)] == \
        [b.tolist() for b in dataset.batch_by_size(indices, max_tokens=1000, required_batch_size_multiple=8)]


@pytest.mark.parametrize("sentences", [1, 7, 9])
def test_a_training_set_smaller_than_the_multiple_is_one_batch(task, sentences):
    """fairseq dropped the only batch of a training set of fewer sentences than --required-batch-size-multiple:
    nothing trained (was kept only when some batch had been cut before it)."""
    dataset = task.dataset("train")
    task.get_batch_iterator(dataset, max_tokens=1000, required_batch_size_multiple=8, seed=1, epoch=1)
    indices = dataset.ordered_indices()[:sentences]
    batches = dataset.batch_by_size(indices, max_tokens=1000, required_batch_size_multiple=8)
    assert sorted(i for batch in batches for i in batch.tolist()) == sorted(indices.tolist())
