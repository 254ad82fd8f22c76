"""Throughput and peak memory of ``langshare prepare-data`` against ``fairseq-preprocess`` alone.

For each size (pairs in all), in one run:

1. synthesise ``en-XX.tsv`` files from the machine's gettext catalogues (not timed): the five
   largest-catalogue languages of different scripts (fr, de, es, ru, zh_CN), an equal share of
   the pairs each; pair k of a language joins two of its cleaned catalogue pairs, i = k mod n and
   j = (i + 1 + k div n) mod n, source to source and target to target ("Open file Save as" /
   "Ouvrir le fichier Enregistrer sous"): distinct pairs (for k < n(n-1)) of real text, about twice
   a message's length; the English msgids are shared between languages, as in multi-way data;
2. run ``langshare prepare-data --out CORPUS *.tsv`` (the whole pipeline: reading, normalising,
   filtering, held-out sets, deduplication, SentencePiece on its bounded sample, encoding,
   binarisation) as a child process;
3. run ``fairseq-preprocess`` alone on the same tokenised text (the corpus' ``spm/`` files, every
   split, its ``bin/dict.txt``), one child process per direction as a user would, and check that
   it wrote the same binarized data as the pipeline.

Each child's wall time, CPU time (user + system, its descendants included) and peak RSS (``ru_maxrss``
from ``wait4``: the largest resident set of the process and its waited-for descendants) are recorded
with the load average before and after. Lines/s: sentence pairs (TSV lines) per wall-clock second.

    nice -n 10 python -m benchmarks.prepare_data --pairs 1000000 5000000 --work /tmp/prepare-bench
"""

import argparse
import filecmp
import glob
import json
import os
import shutil
import subprocess
import sys
import time

from fairseq_langshare.atomic_files import write_json_atomic

LANGS = ("fr", "de", "es", "ru", "zh_CN")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def synthesise(out_dir, total, locale_dir="/usr/share/locale"):
    """en-XX.tsv files with ``total`` pairs in all (see the module doc); returns their paths."""
    from fairseq_langshare.data import gettext_corpus as gc

    dirs = gc.locale_dirs(locale_dir)
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for index, lang in enumerate(LANGS):
        base = sorted(gc.load_locale(locale_dir, dirs[lang])[0].items())
        n, share = len(base), total // len(LANGS) + (index < total % len(LANGS))
        path = os.path.join(out_dir, f"en-{lang}.tsv")
        with open(path, "w", encoding="utf-8") as f:
            for k in range(share):
                i = k % n
                j = (i + 1 + k // n) % n
                f.write(f"{base[i][0]} {base[j][0]}\t{base[i][1]} {base[j][1]}\n")
        paths.append(path)
    return paths


def run_child(argv, env=None):
    """(wall s, cpu s, peak RSS MiB, return code) of a child process and its descendants."""
    start = time.time()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)  # Python 3.8
    wall = time.time() - start
    if proc.returncode:
        sys.stderr.write(stderr.decode("utf-8", "replace")[-3000:])
        raise RuntimeError(f"{argv[:4]} failed with {proc.returncode}")
    return dict(wall_s=round(wall, 2), cpu_s=round(usage.ru_utime + usage.ru_stime, 2),
                peak_rss_mib=round(usage.ru_maxrss / 1024, 1))


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return env


def bench_size(work, total, workers):
    tsv_dir, corpus, fp_dir = (os.path.join(work, f"{name}-{total}") for name in ("tsv", "corpus", "preprocess"))
    for path in (corpus, fp_dir):
        shutil.rmtree(path, ignore_errors=True)
    t = time.time()
    inputs = synthesise(tsv_dir, total)
    print(f"{total}: synthesised in {time.time() - t:.0f} s", file=sys.stderr, flush=True)
    load = [os.getloadavg()[0]]
    pipeline = run_child([sys.executable, "-m", "fairseq_langshare.cli", "prepare-data", "--out", corpus,
                          "--workers", str(workers), *inputs], _env())
    load.append(os.getloadavg()[0])
    print(f"{total}: prepare-data {pipeline}", file=sys.stderr, flush=True)
    with open(os.path.join(corpus, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    os.makedirs(fp_dir)
    runs = []
    for pair in manifest["stored_pairs"]:
        src, tgt = pair.split("-")
        argv = [sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", src, "--target-lang", tgt,
                "--destdir", fp_dir, "--srcdict", os.path.join(corpus, "bin", "dict.txt"), "--tgtdict",
                os.path.join(corpus, "bin", "dict.txt"), "--dataset-impl", "mmap", "--workers", str(workers)]
        for split in ("train", "valid", "test"):
            if manifest["counts"][split].get(pair):
                argv += [f"--{split}pref", os.path.join(corpus, "spm", f"{split}.{pair}")]
        runs.append(run_child(argv, _env()))
    load.append(os.getloadavg()[0])
    preprocess = dict(wall_s=round(sum(r["wall_s"] for r in runs), 2), cpu_s=round(sum(r["cpu_s"] for r in runs), 2),
                      peak_rss_mib=max(r["peak_rss_mib"] for r in runs), per_direction=runs)
    print(f"{total}: fairseq-preprocess {preprocess['wall_s']} s", file=sys.stderr, flush=True)
    binarized = sorted(os.path.basename(p) for p in glob.glob(os.path.join(corpus, "bin", "*.bin")))
    same = all(filecmp.cmp(os.path.join(corpus, "bin", name), os.path.join(fp_dir, name), shallow=False)
               and filecmp.cmp(os.path.join(corpus, "bin", name[:-3] + "idx"), os.path.join(fp_dir, name[:-3] + "idx"),
                               shallow=False) for name in binarized)
    lines = sum(sum(manifest["counts"][s].values()) for s in manifest["counts"])  # binarized pairs
    result = dict(
        pairs=total, directions=len(manifest["stored_pairs"]), binarized_pairs=lines,
        train_pairs=sum(manifest["counts"]["train"].values()), workers=workers,
        prepare_data=dict(pipeline, lines_per_s=round(total / pipeline["wall_s"])),
        fairseq_preprocess=dict(preprocess, lines_per_s=round(total / preprocess["wall_s"])),
        ratio_wall=round(pipeline["wall_s"] / preprocess["wall_s"], 3),
        ratio_cpu=round(pipeline["cpu_s"] / preprocess["cpu_s"], 3),
        same_binarized_data=same, load_average=load,
        input_mib=round(sum(os.path.getsize(p) for p in inputs) / 2 ** 20, 1))
    shutil.rmtree(fp_dir)
    return result


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, nargs="+", default=[1_000_000, 5_000_000])
    p.add_argument("--work", required=True, help="scratch directory (several GB at 5M pairs)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--out", default=os.path.join(REPO_ROOT, "benchmarks", "results", "prepare_data.json"))
    args = p.parse_args(argv)
    results = dict(date=time.strftime("%Y-%m-%d"), cpu=_cpu(), nice=os.nice(0), sizes=[])
    for total in args.pairs:
        results["sizes"].append(bench_size(args.work, total, args.workers))
        write_json_atomic(args.out, results)
    sizes = results["sizes"]
    if len(sizes) > 1:
        results["rss_growth"] = round(sizes[-1]["prepare_data"]["peak_rss_mib"] / sizes[0]["prepare_data"]["peak_rss_mib"], 3)
    write_json_atomic(args.out, results)
    print(json.dumps(results, indent=1))


def _cpu():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
