"""How many held-out rows of a prepared corpus share a sentence with its training data.

For every valid/test file pair under CORPUS/raw/: the rows (source, target) of which either side
occurs verbatim in any train file of the corpus (any direction, either side), and, case-folded,
how many more; for zero-shot directions (manifest ``zero_shot_pairs``) also the test rows with a
side in a valid file. The gettext corpora hold out by a hash of the English msgid, so a
translation two msgids share ("Bolivia", "mappe") can be on both sides of the split.

    python experiments/heldout_overlap.py --out docs/results/heldout_overlap.json CORPUS [CORPUS ...]
"""

import argparse
import glob
import json
import os


def _lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def _pairs(raw, split):
    """{direction: [(source, target)]} of a split's raw files."""
    out = {}
    for path in sorted(glob.glob(os.path.join(raw, f"{split}.*-*.*"))):
        pair, lang = os.path.basename(path).split(".")[1:3]
        src, tgt = pair.split("-")
        if lang == src:
            out[pair] = list(zip(_lines(path), _lines(os.path.join(raw, f"{split}.{pair}.{tgt}"))))
    return out


def overlap(corpus):
    raw = os.path.join(corpus, "raw")
    with open(os.path.join(corpus, "manifest.json"), encoding="utf-8") as f:
        zero_shot = set(json.load(f).get("zero_shot_pairs") or [])
    train = {s for rows in _pairs(raw, "train").values() for row in rows for s in row}
    folded = {s.casefold() for s in train}
    valid = {s for rows in _pairs(raw, "valid").values() for row in rows for s in row}
    report = {}
    for split in ("valid", "test"):
        for kind in ("supervised", "zero-shot"):
            rows = [row for pair, rs in _pairs(raw, split).items() if (pair in zero_shot) == (kind == "zero-shot")
                    for row in rs]
            if not rows:
                continue
            exact = [r for r in rows if r[0] in train or r[1] in train]
            cased = [r for r in rows if r not in exact and (r[0].casefold() in folded or r[1].casefold() in folded)]
            entry = {"rows": len(rows), "a_side_in_train": len(exact), "a_side_in_train_casefolded_only": len(cased)}
            if split == "test":
                entry["a_side_in_valid"] = sum(1 for r in rows if r[0] in valid or r[1] in valid)
            report[f"{split} {kind}"] = entry
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpora", nargs="+")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    data = {os.path.join(*os.path.normpath(os.path.abspath(c)).split(os.sep)[-2:]): overlap(c) for c in args.corpora}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    print(json.dumps(data, indent=1))


if __name__ == "__main__":
    main()
