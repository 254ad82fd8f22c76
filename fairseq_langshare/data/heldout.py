"""Held-out sets of a corpus under construction: carved from training data by a hash of the source
side, or added as test-only (zero-shot) directions.

:class:`HeldOutPicker` streams a direction's training pairs and keeps those whose key sentence
(the source side; the pivot language's side where every trained direction shares one language,
as ``prepare-gettext`` hashes English) hashes lowest: the same sentence is picked, for the same
split, in every direction that has it, so multi-way data gets one held-out set of sentences, and
the choice depends on the sentence alone, not on the order or size of the file. Then
:func:`settle_splits` drops from the carved sets every pair sharing a sentence with a held-out set
of the other split (given sets win over carved ones, test over valid). Training pairs
that share a sentence with any held-out set of that language are then removed
(``corpus_build.PairCleaner``): no held-out sentence occurs in any training direction.

:func:`add_test_only_directions` writes directions that have valid/test data and no training
data (zero-shot directions): ``prepare-data``'s given test-only files.
"""

import heapq

from .corpus_build import fingerprint, write_pair_files

HELDOUT_MAX_SHARE = 0.05  # a carved valid or test set takes at most this share of a direction's pairs


class HeldOutPicker:
    """Held-out valid and test pairs of one direction, picked by a hash of a key sentence (the
    source side, or the pivot language's side): each distinct key sentence has one role, valid or
    test, by one bit of its hash, and each split takes the pairs whose key hashes lowest among
    those of its role (of several pairs with one key, the one whose other side hashes lowest).
    A key sentence gets the same role in every direction; a sentence that is the key in one
    direction and the other side in another can still be picked for both splits, which
    :func:`settle_splits` resolves. Memory O(valid + test)."""

    def __init__(self, valid_size, test_size, salt="heldout"):
        self.sizes = {"valid": valid_size, "test": test_size}
        self.salt = salt
        self._heaps = {"valid": [], "test": []}  # (-key hash, key): the lowest, highest on top
        self._best = {}  # key -> (other side's hash, (a, b))

    def offer(self, key, a, b, other):
        """Pair (a, b) whose key sentence is ``key`` and other side ``other``."""
        if key in self._best:
            h = fingerprint(other)
            if h < self._best[key][0]:
                self._best[key] = (h, (a, b))
            return
        hk = fingerprint(self.salt + "\x00" + key)
        role = "test" if hk & 1 else "valid"
        heap, k = self._heaps[role], self.sizes[role]
        if not k:
            return
        if len(heap) < k:
            heapq.heappush(heap, (-hk, key))
        elif hk < -heap[0][0]:
            _, out = heapq.heapreplace(heap, (-hk, key))
            del self._best[out]
        else:
            return
        self._best[key] = (fingerprint(other), (a, b))

    def picked(self):
        """{split: [(a, b)]}, each in ascending hash order."""
        return {split: [self._best[key][1] for _, key in sorted(heap, key=lambda e: (-e[0], e[1]))]
                for split, heap in self._heaps.items()}


def settle_splits(sets):
    """Keep valid and test apart across directions: drop from each carved set every pair that shares
    a sentence (same language, either side) with a pair of the other split in a set that wins over
    it. Given sets win over carved ones and are kept whole; among carved sets, test wins over valid.

    ``sets``: {direction: {split: (pairs, given)}} with split valid or test. Returns
    ({direction: {split: kept pairs}}, {direction: {split: pairs dropped}}, only non-zero)."""
    other = {"valid": "test", "test": "valid"}
    taken = {"valid": {}, "test": {}}  # split -> {lang: sentences of the sets settled so far}
    kept, dropped = {}, {}
    order = sorted(((not given, split == "valid", d, split) for d, splits in sets.items()
                    for split, (_, given) in splits.items()))  # given first, then carved test, then valid
    for carved, _, d, split in order:
        a, b = d.split("-")
        clash = taken[other[split]]
        pairs = [(x, y) for x, y in sets[d][split][0]
                 if not carved or (x not in clash.get(a, ()) and y not in clash.get(b, ()))]
        if len(pairs) < len(sets[d][split][0]):
            dropped.setdefault(d, {})[split] = len(sets[d][split][0]) - len(pairs)
        kept.setdefault(d, {})[split] = pairs
        for x, y in pairs:
            taken[split].setdefault(a, set()).add(x)
            taken[split].setdefault(b, set()).add(y)
    return kept, dropped


def carve_sizes(n_pairs, valid_size, test_size, share=HELDOUT_MAX_SHARE):
    """(valid, test) sizes carved from a direction of ``n_pairs`` pairs: the requested sizes, each
    at most ``share`` of the pairs (at least one where a size is requested)."""
    cap = max(1, int(n_pairs * share))
    return min(valid_size, cap), min(test_size, cap)


def add_test_only_directions(tmp, rows):
    """Write test-only (zero-shot) directions into the corpus under construction ``tmp``.

    ``rows``: {a-b: {split: [(a sentence, b sentence)]}} with split valid or test (never train);
    splits without a pair are not written. Returns {a-b: {split: pairs written}}. The caller lists
    the directions as ``zero_shot_pairs`` in its manifest, keeps them out of lang_pairs.txt, keeps
    their sentences out of training (``corpus_build.add_heldout`` and ``PairCleaner``) and binarizes
    them with the rest (``corpus_build.encode_and_binarize``)."""
    counts = {}
    for pair, splits in rows.items():
        a, b = pair.split("-")
        if a == b or "train" in splits:
            raise ValueError(f"test-only direction {pair}: needs two languages and valid/test data only")
        for split, pairs in splits.items():
            if pairs:
                counts.setdefault(pair, {})[split] = write_pair_files(tmp, split, pair, pairs)
    return counts
