"""How well the off-target rate's language identifier tells a corpus's languages apart, by the
length of the sentence: what ``fairseq_langshare.off_target.MIN_CHARS`` was chosen from.

For every language of the corpus, the share of its reference sentences (the distinct ones of the
given splits) of at least N characters that py3langid, restricted to the corpus's languages,
identifies as that language, for several N. References only: no model's output is read.

    PYTHONPATH=. python experiments/language_id_lengths.py demo_run/corpus --out docs/results/language-id-by-length.json
"""

import argparse
import datetime

from fairseq_langshare.atomic_files import write_json_atomic
from fairseq_langshare.off_target import Identifier, corpus_languages, reference_sentences

LENGTHS = (1, 10, 15, 20, 25, 30)


def measure(corpus, splits=("test", "valid"), lengths=LENGTHS):
    languages = corpus_languages(corpus)
    identifier = Identifier(languages)
    sentences = {lang: [] for lang in languages}
    for split in splits:
        for lang, found in reference_sentences(corpus, split, languages, min_chars=1, max_references=10 ** 9).items():
            sentences[lang] += [s for s in found if s not in sentences[lang]]
    table = {}
    for n in lengths:
        row = {}
        for lang, found in sentences.items():
            labels = identifier.identify(found, min_chars=n)
            kept = [label for label in labels if label is not None]
            row[lang] = {"sentences": len(kept),
                         "accuracy": sum(label == identifier.labels[lang] for label in kept) / len(kept) if kept else None}
        table[str(n)] = row
    return {"identifier": identifier.name, "corpus": corpus, "splits": list(splits), "date": datetime.date.today().isoformat(),
            "by_min_chars": table}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus")
    parser.add_argument("--splits", default="test,valid")
    parser.add_argument("--out", default="docs/results/language-id-by-length.json")
    args = parser.parse_args(argv)
    data = measure(args.corpus, tuple(args.splits.split(",")))
    write_json_atomic(args.out, data)
    langs = list(next(iter(data["by_min_chars"].values())))
    print("min chars | " + " | ".join(langs))
    for n, row in data["by_min_chars"].items():
        print(f"{n:>9} | " + " | ".join("-" if row[l]["accuracy"] is None else f"{row[l]['accuracy']:.2f} ({row[l]['sentences']})"
                                      for l in langs))


if __name__ == "__main__":
    main()
