"""Statistics, ratios B/A, the JSON result (one run, or several runs of a comparison in one file) and
the markdown table of one comparison."""

import datetime
import json
import os
import platform
import shlex
import sys

import numpy as np

TIMED_METRICS = ("train_updates_per_s", "train_wps", "decode_single_tokens_per_s", "decode_batched_tokens_per_s")

# key: (label, unit, kind); for "throughput" higher is better, for "memory"/"params" lower is
METRICS = {
    "train_updates_per_s": ("training updates/s", "updates/s", "throughput"),
    "train_wps": ("training target tokens/s (fairseq wps)", "tokens/s", "throughput"),
    "decode_single_tokens_per_s": ("decoding tokens/s, batch 1", "tokens/s", "throughput"),
    "decode_batched_tokens_per_s": ("decoding tokens/s, batch {bs}", "tokens/s", "throughput"),
    "mem_train_peak_mib": ("peak RSS of training steps over the process at rest", "MiB", "memory"),
    "mem_decode_peak_mib": ("peak RSS of decoding, batch {bs}, over the process at rest", "MiB", "memory"),
    "mem_loaded_rss_mib": ("RSS at rest of the training process (weights, Adam state, interpreter)", "MiB",
                           "memory"),
    "params_total": ("parameters, total", "params", "params"),
    "params_effective": ("parameters, effective per language pair", "params", "params"),
}


def stats(values) -> dict:
    v = np.asarray(values, dtype=float)
    q1, med, q3 = np.percentile(v, [25, 50, 75])
    return {"median": float(med), "q1": float(q1), "q3": float(q3), "min": float(v.min()),
            "max": float(v.max()), "n": int(v.size), "values": [float(x) for x in v]}


def compare(a_values, b_values) -> dict:
    a, b = stats(a_values), stats(b_values)
    out = {"A": a, "B": b, "ratio": b["median"] / a["median"] if a["median"] else float("nan")}
    if len(a_values) == len(b_values):
        out["paired_ratio"] = stats([y / x for x, y in zip(a_values, b_values)])
    return out


def machine(threads) -> dict:
    import fairseq
    import torch

    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpus_available": len(os.sched_getaffinity(0)), "cpu": cpu,
            "torch": torch.__version__, "fairseq": fairseq.__version__, "python": platform.python_version(),
            "platform": platform.platform(), "torch_threads": threads}


def _display_path(path):
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.abspath(path)
    return os.path.relpath(path, repo) if path.startswith(repo + os.sep) else path


def build_result(bench, samples, params, losses, load_before, elapsed) -> dict:
    s = bench.settings
    metrics = {}
    for key, (label, unit, kind) in METRICS.items():
        if key in samples:
            metrics[key] = {"label": label.format(bs=s.decode_batch_size), "unit": unit,
                            "higher_is_better": kind == "throughput", **compare(samples[key]["A"], samples[key]["B"])}
            if "cpu:" + key in samples:  # the same, timed by this process's CPU time instead of wall time
                metrics[key]["cpu_time"] = compare(samples["cpu:" + key]["A"], samples["cpu:" + key]["B"])
    mach = machine(s.threads)
    mach["loadavg_before"], mach["loadavg_after"] = list(load_before), list(os.getloadavg())
    return {
        "name": s.name,
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "elapsed_s": round(elapsed, 1),
        "machine": mach,
        "configs": {k: {"label": getattr(s, f"{k.lower()}_label"), "args": list(getattr(s, k.lower())),
                        "arch": bench.args[k].arch}
                    for k in ("A", "B")},
        "common_args": s.task_args + s.train_args + ["--max-tokens", str(s.max_tokens), "--seed", str(s.seed)],
        "data": {
            "path": _display_path(s.data), "langs": s.langs, "lang_pairs": s.lang_pairs,
            "train_split": s.train_split, "train_batches": len(bench.train_batches),
            "train_sentences": sum(int(b["nsentences"]) for b in bench.train_batches),
            "train_target_tokens": sum(int(b["ntokens"]) for b in bench.train_batches),
            "max_tokens": s.max_tokens, "decode_split": s.decode_split, "decode_direction": s.decode_direction,
            "decode_sentences": sum(int(b["nsentences"]) for b in bench.batched),
            "decode_single_sentences": len(bench.single), "decode_batch_size": s.decode_batch_size,
            "decode_batches": len(bench.batched), "beam": s.beam,
            "decode_len": bench.decode_len if bench.decode_len is not None else "free",
            "mean_reference_length": float(np.mean(bench.ref_lengths)),
            "mean_source_length": float(np.mean(bench.src_lengths)),
        },
        "protocol": {"reps": s.reps, "warmup": s.warmup, "threads": s.threads, "seed": s.seed,
                     "memory_reps": s.memory_reps, "memory_method": getattr(bench, "memory_method", None),
                     "order": "per repetition: training, decoding batch 1, decoding batch N; within each, "
                              "per batch A then B, B then A, alternately"},
        "metrics": metrics,
        "params": params,
        "train_loss_per_rep": losses,
    }


def _atomic_write(path, text):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def write_json(result, path):
    _atomic_write(path, json.dumps(result, indent=1) + "\n")


# A comparison's results file holds one run (the result itself, as ``build_result`` makes it) or
# several: {"comparison": NAME, "runs": [result, ...]}, each run with its "tag" ("" untagged; e.g.
# "amd3" for the third run of a series, "d512" for the same comparison at another width,
# recorded in its configs' args). Readers take either form through ``runs``.

def runs(data) -> list:
    """The runs of a results file's content, each with its "tag"."""
    if isinstance(data, dict) and isinstance(data.get("runs"), list):
        return data["runs"]
    if isinstance(data, dict) and "metrics" in data:
        return [dict(data, tag=data.get("tag", ""))]
    raise ValueError("not a benchmark result (neither a result with 'metrics' nor a list of 'runs')")


def read_runs(path) -> list:
    """The runs stored in ``path`` ([] if there is no such file)."""
    if not os.path.exists(path):
        return []
    try:
        with open(path, encoding="utf-8") as f:
            return runs(json.load(f))
    except ValueError as error:  # json.JSONDecodeError is a ValueError
        raise ValueError(f"{path}: {error}; move it away or write the result elsewhere (--results-dir, --out-json)")


def store_run(result, path, tag="", comparison=None):
    """Write ``result`` into ``path`` as the run tagged ``tag``, replacing a run of the same tag and
    keeping the others; the file stays a plain result while it holds one untagged run."""
    kept = [r for r in read_runs(path) if r.get("tag", "") != tag]
    if not kept and not tag:
        write_json(result, path)
        return
    comparison = comparison or os.path.splitext(os.path.basename(path))[0]
    run = {"tag": tag, **{k: v for k, v in result.items() if k != "tag"}}
    write_json({"comparison": comparison, "runs": kept + [run]}, path)


def _num(x, unit):
    if unit == "params":
        return f"{int(round(x)):,}"
    if unit == "MiB":
        return f"{x:.1f}"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def _cell(st, unit):
    if st["n"] == 1 or st["min"] == st["max"]:
        return _num(st["median"], unit)
    return f"{_num(st['median'], unit)} ({_num(st['q1'], unit)}–{_num(st['q3'], unit)})"


def markdown(result) -> str:
    c, d, p, m = result["configs"], result["data"], result["protocol"], result["machine"]
    lines = [f"## {result['name']} ({result['date']})", ""]
    for k in ("A", "B"):
        note = ""
        if c[k].get("lang_ids_dropped_from"):  # results of harness versions that wrapped forward
            note = (" (its forward takes no language ids: the harness drops `src_lang_id`/`tgt_lang_id` "
                    f"in {', '.join('`' + w + '`' for w in c[k]['lang_ids_dropped_from'])})")
        lines.append(f"- **{k}** = {c[k]['label']}: `{shlex.join(c[k]['args'])}`{note}")
    lines.append(f"- common flags: `{shlex.join(result['common_args'])}` (task `multilingual_langshare`, CPU)")
    decode_len = (f"every hypothesis forced to {d['decode_len']} tokens incl. EOS (median reference length)"
                  if d["decode_len"] != "free" else "hypotheses end where the model stops")
    lines.append(
        f"- data: `{d['path']}`, langs {','.join(d['langs'])}, pairs {','.join(d['lang_pairs'])}; training: "
        f"{d['train_batches']} fixed batches of `--max-tokens {d['max_tokens']}` from `{d['train_split']}` "
        f"({d['train_sentences']} sentences, {d['train_target_tokens']} target tokens) per repetition; decoding: "
        f"beam {d['beam']}, {d['decode_sentences']} `{d['decode_split']}` sentences"
        f"{' of ' + d['decode_direction'] + ' only' if d.get('decode_direction') else ''} in {d['decode_batches']} "
        f"length-sorted batches of {d['decode_batch_size']}, the first {d['decode_single_sentences']} of them "
        f"also one at a time; {decode_len}")
    mem = (f"; memory: {p['memory_reps']} fresh-process probe(s) per configuration and phase "
           f"({p['memory_method']})" if p["memory_reps"] else "; memory not measured")
    lines.append(f"- protocol: {p['warmup']} warm-up + {p['reps']} measured repetitions, A and B interleaved "
                 f"batch by batch (A B, B A, ...), seed {p['seed']}{mem}")
    lines.append(
        f"- machine: {m['nproc']} CPUs ({m['cpu'] or 'unknown'}), torch {m['torch']} with "
        f"{m['torch_threads']} thread(s), fairseq {m['fairseq']}, Python {m['python']}; load average "
        f"{m['loadavg_before'][0]:.2f} → {m['loadavg_after'][0]:.2f}; wall time {result['elapsed_s']:.0f} s")
    lines += ["", "| metric | A: median (IQR) | B: median (IQR) | B / A | B / A per repetition: median (min–max) "
                  "| B / A by CPU time |", "|---|---|---|---|---|---|"]
    for key, e in result["metrics"].items():
        unit = e["unit"]
        pr = e.get("paired_ratio")
        spread = f"{pr['median']:.3f} ({pr['min']:.3f}–{pr['max']:.3f})" if pr and pr["n"] > 1 else ""
        cpu = f"{e['cpu_time']['ratio']:.3f}" if "cpu_time" in e else ""
        lines.append(f"| {e['label']} [{unit}] | {_cell(e['A'], unit)} | {_cell(e['B'], unit)} | "
                     f"**{e['ratio']:.3f}** | {spread} | {cpu} |")
    lines.append("")
    lines.append("Throughput ratios are B's speed / A's speed (> 1: B is faster); memory and parameter ratios "
                 "are B / A (< 1: B is smaller). Speeds are timed by the wall clock; the last column times "
                 "the same steps by this process's CPU time, which other jobs on the machine disturb less.")
    return "\n".join(lines) + "\n"


def append_markdown(result, path):
    append_markdown_text(markdown(result), path)


def append_markdown_text(text, path):
    old = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            old = f.read()
    else:
        old = "# Benchmarks\n"
    _atomic_write(path, old.rstrip("\n") + "\n\n" + text)


if __name__ == "__main__":  # re-render a stored result, every run of it: python -m benchmarks.report RESULT.json
    sys.stdout.write("\n".join(markdown(run) for run in read_runs(sys.argv[1])))
