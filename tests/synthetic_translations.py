"""Synthetic references and hypotheses of known quality, for the significance, compare and head-to-head report
tests: a hypothesis is its reference with a share of the words replaced."""

import random

WORDS = "the a cat dog sat on mat house red blue green runs fast slow open file save quit".split()


def sentences(n, seed=0):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 10))) for _ in range(n)]


def degrade(refs, share, seed):
    """Replace ``share`` of the words of every sentence (at least one) with random words."""
    rng = random.Random(seed)
    out = []
    for r in refs:
        words = r.split()
        hit = set(rng.sample(range(len(words)), max(1, round(share * len(words)))))
        out.append(" ".join(rng.choice(WORDS) + "x" if i in hit else w for i, w in enumerate(words)))
    return out
