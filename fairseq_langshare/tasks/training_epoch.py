"""What an epoch of training reads: every sentence, and after a resume on another number of processes the
rest of the epoch where it stopped.

**The last batch.** fairseq 0.12's ``data_utils.batch_by_size`` cuts an epoch's batches from the
sentences in their order, each a multiple of ``--required-batch-size-multiple`` (default 8) but the last,
and then drops the last unless it is a multiple too. A training set is ordered by length, so the longest
sentences of the corpus never trained (up to 7 sentences, the same ones every epoch).
``keep_the_last_batch`` keeps it.

**The position.** fairseq deals an epoch's batches out to the ranks in turn (rank r reads batches r, r+N, r+2N, ... of
the shuffled epoch: ``ShardedIterator``) and saves the position in the epoch as the count of the
*rank's* batches. After k batches on N processes the first k*N batches of the epoch are done, so on M
processes each rank resumes after k*N/M of its own. fairseq resumes after k: on fewer processes it
reads batches again, and on more, once the run stopped past 1/M of its epoch, it stops with "Cannot
resume training due to dataloader mismatch". ``resume_across_process_counts`` saves the process count
with the position and rescales a position saved with another.
"""

import logging
from typing import Callable, Optional

import numpy as np
from fairseq.data import iterators

from ..modules.first_rank import first_rank

logger = logging.getLogger(__name__)

__all__ = ["keep_the_last_batch", "resume_across_process_counts", "rescaled_position"]


def keep_the_last_batch(dataset) -> None:
    """``dataset.batch_by_size`` made to keep the last batch fairseq's drops (once per dataset object). The
    batches are consecutive slices of the sentences given: what follows the last one is the dropped batch."""
    cut = dataset.batch_by_size
    if getattr(cut, "keeps_the_last_batch", False):
        return

    def batch_by_size(indices, *args, **kwargs):
        batches = cut(indices, *args, **kwargs)
        done = sum(len(batch) for batch in batches)
        if 0 < done < len(indices) and np.array_equal(np.concatenate(batches), np.asarray(indices)[:done]):
            batches = list(batches) + [np.asarray(indices[done:], dtype=np.int64)]
        return batches

    batch_by_size.keeps_the_last_batch = True
    dataset.batch_by_size = batch_by_size


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
        saved = state_dict.get("num_shards") or self.saved_process_count()
        super().load_state_dict(rescaled_position(state_dict, saved, self.num_shards))


def resume_across_process_counts(itr, saved_process_count: Callable[[], Optional[int]]):
    """``itr``, when it is fairseq's plain ``EpochBatchIterator``, made a ``_ProcessCountAwareIterator`` (the
    class adds methods only, so the object built by fairseq's task is kept as it is); other iterators unchanged."""
    if type(itr) is iterators.EpochBatchIterator:
        itr.__class__ = _ProcessCountAwareIterator
        itr.saved_process_count = saved_process_count
    return itr
