"""What an epoch of training reads: every sentence, and after a resume on another number of processes the
rest of the epoch where it stopped.

**The last batch.** fairseq 0.12's ``data_utils.batch_by_size`` cuts an epoch's batches from the
sentences in their order, each a multiple of ``--required-batch-size-multiple`` (default 8) but the last,
and then drops the last unless it is a multiple too. A training set is ordered by length, so the longest
sentences of an epoch never trained (the whole last batch, whatever its size: the same sentences every
epoch where the epoch is the whole corpus, and a training set of fewer sentences than the multiple not at
all). ``keep_the_last_batch``
keeps it.

**The position.** fairseq deals an epoch's batches out to the ranks in turn (rank r reads batches r, r+N, r+2N, ... of
the shuffled epoch: ``ShardedIterator``) and saves the position in the epoch as the count of the
*rank's* batches. After k batches on N processes the first k*N batches of the epoch are done, so on M
processes each rank resumes after k*N/M of its own. fairseq resumes after k: on fewer processes it
reads batches again, and on more, once the run stopped past 1/M of its epoch, it stops with "Cannot
resume training due to dataloader mismatch". ``resume_across_process_counts`` saves the process count
with the position and rescales a position saved with another.
"""

import functools
import logging
from typing import Callable, Optional

import numpy as np
from fairseq.data import iterators

from ..modules.first_rank import first_rank

logger = logging.getLogger(__name__)

__all__ = ["keep_the_last_batch", "resume_across_process_counts", "rescaled_position"]


def keep_the_last_batch(dataset) -> None:
    """``dataset.batch_by_size`` made to keep the last batch fairseq's drops (once per dataset object; a
    ``functools.partial`` of module functions, so the dataset still pickles for spawned loader workers)."""
    if not isinstance(dataset.batch_by_size, functools.partial):
        dataset.batch_by_size = functools.partial(_with_the_last_batch, type(dataset).batch_by_size, dataset)


def _with_the_last_batch(batch_by_size, dataset, indices, *args, **kwargs):
    """``batch_by_size(dataset, indices, ...)``, and the sentences after its last batch as one more batch: the
    batches are consecutive slices of ``indices``, so what follows the last one is the batch fairseq dropped
    (all of them, where it dropped the only one)."""
    batches = batch_by_size(dataset, indices, *args, **kwargs)
    done = sum(len(batch) for batch in batches)
    if done < len(indices) and (done == 0 or np.array_equal(np.concatenate(batches), np.asarray(indices)[:done])):
        batches = list(batches) + [np.asarray(indices[done:], dtype=np.int64)]
    return batches


def rescaled_position(state: dict, saved_shards: Optional[int], shards: int) -> dict:
    """``state`` (an ``EpochBatchIterator.state_dict``) saved on ``saved_shards`` processes, as the same place
    in the epoch on ``shards``: floor(k * saved_shards / shards) batches of each rank done. A split that is
    not exact reads the last ``k * saved_shards % shards`` batches done again (none is skipped)."""
    done = int(state.get("iterations_in_epoch", 0) or 0)
    if not saved_shards or saved_shards == shards or done <= 0:
        return state
    read = done * int(saved_shards)
    position = read // shards
    if first_rank():
        again = read - position * shards
        resumes = "the process resumes" if shards == 1 else f"each of the {shards} processes resumes"
        logger.info(f"epoch {state.get('epoch')} stopped after {read} of its batches on {saved_shards} "
                    f"process{'es' if saved_shards > 1 else ''}: {resumes} after {position} of its own"
                    + (f" ({again} batch{'es' if again > 1 else ''} done {'are' if again > 1 else 'is'} read again)"
                       if again else ""))
    return {**state, "iterations_in_epoch": position}


class _ProcessCountAwareIterator(iterators.EpochBatchIterator):
    """fairseq's iterator whose saved position names its process count (``num_shards``) and which rescales a
    position saved on another (``rescaled_position``). ``saved_process_count`` answers for a position saved
    without it (a checkpoint written before this plugin saved it): the resumed checkpoint's world size."""

    saved_process_count: Callable[[], Optional[int]] = staticmethod(lambda: None)

    def state_dict(self):
        return {**super().state_dict(), "num_shards": self.num_shards}

    def load_state_dict(self, state_dict):
        saved = state_dict.get("num_shards")
        if saved is None:
            saved = self.saved_process_count()
            if state_dict.get("iterations_in_epoch", 0) and first_rank():
                logger.warning(f"this checkpoint stopped in epoch {state_dict.get('epoch')} under an earlier version "
                               "of the plugin, which dropped the epoch's last batch where fairseq does: with that "
                               "batch kept, the epoch's batches are shuffled otherwise, so the rest of this epoch "
                               "may read some batches again and skip others; the next epochs are whole")
        super().load_state_dict(rescaled_position(state_dict, saved, self.num_shards))


def resume_across_process_counts(itr, saved_process_count: Callable[[], Optional[int]]):
    """``itr``, when it is fairseq's plain ``EpochBatchIterator``, made a ``_ProcessCountAwareIterator`` (the
    class adds methods only, so the object built by fairseq's task is kept as it is); other iterators unchanged."""
    if type(itr) is iterators.EpochBatchIterator:
        itr.__class__ = _ProcessCountAwareIterator
        itr.saved_process_count = saved_process_count
    return itr
