"""Per-sentence language ids that survive batching.

fairseq's ``--enable-lang-ids`` stamps a whole batch with the ids of the dataset whose
collater runs, and the multilingual containers collate a mixed batch with the *first*
direction's collater. Here every item carries its own language codes and the collater maps
them to ids after fairseq's length sort, so row i of the batch gets the ids of the sentence
in row i, whatever directions are mixed.
"""

import torch
from fairseq.data import BaseWrapperDataset

from ..languages import LanguageInventory

__all__ = ["LanguageTaggedDataset", "attach_lang_ids", "HOST_IDS"]


class LanguageTaggedDataset(BaseWrapperDataset):
    """Wraps one direction's ``LanguagePairDataset`` and tags its items with ``src``/``tgt`` codes."""

    def __init__(self, dataset, src_lang: str, tgt_lang: str, inventory: LanguageInventory):
        super().__init__(dataset)
        for code in (src_lang, tgt_lang):
            inventory.id(code)  # fail early on a code outside --langs
        self.src_lang, self.tgt_lang, self.inventory = src_lang, tgt_lang, inventory

    def __getitem__(self, index):
        item = dict(self.dataset[index])
        item["src_lang"], item["tgt_lang"] = self.src_lang, self.tgt_lang
        return item

    def collater(self, samples, **extra_args):
        """Collate (possibly mixed-language) samples and add per-row language ids."""
        if len(samples) == 0:
            return {}
        # Hand fairseq positions as ids; the sorted ids it returns are then the sort order.
        positions = [dict(s, id=i) for i, s in enumerate(samples)]
        batch = self.dataset.collater(positions, **extra_args)
        order = batch["id"]
        batch["id"] = torch.tensor([samples[i]["id"] for i in order.tolist()], dtype=torch.long)
        attach_lang_ids(
            batch,
            [self.inventory.id(samples[i]["src_lang"]) for i in order.tolist()],
            [self.inventory.id(samples[i]["tgt_lang"]) for i in order.tolist()],
        )
        return batch


HOST_IDS = "lang_ids_on_host"  # a batch's ids as lists: they travel with it to the device, as its tensors do not


def attach_lang_ids(batch, src_ids, tgt_ids):
    """Put (B,) id tensors into ``net_input`` (and ``tgt_lang_id`` top-level, which fairseq's
    non-shared collater merges) of a collated batch, and the same ids as lists under ``HOST_IDS``:
    the task hands them to the routing once the batch is on the device, which then need not read
    the device to group the rows by language (``routing.note_host_ids``)."""
    src = torch.as_tensor(src_ids, dtype=torch.long)
    tgt = torch.as_tensor(tgt_ids, dtype=torch.long)
    batch["net_input"]["src_lang_id"] = src
    batch["net_input"]["tgt_lang_id"] = tgt
    batch["tgt_lang_id"] = tgt
    batch[HOST_IDS] = {"src_lang_id": src.tolist(), "tgt_lang_id": tgt.tolist()}
    return batch
