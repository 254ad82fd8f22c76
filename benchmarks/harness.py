"""Two model configurations, one task, one run: training and decoding throughput, peak memory
and parameter counts, measured in repetitions after warm-up, A and B alternating batch by batch.

``Benchmark(settings)`` parses both configurations with fairseq's training parser, sets the
task up once, builds both models (same seed) with a fairseq ``Trainer`` each, and fixes the
batches: ``--max-tokens`` training batches from the training split and a set of sentences of
the decode split, decoded one at a time and in large batches. ``Benchmark.run()`` measures and
returns the JSON-able result (see ``benchmarks.report``). Peak memory is measured in fresh
subprocesses (``benchmarks.memory``).

Models that take no language ids (fairseq's own ``transformer``) run as they are: the
``multilingual_langshare`` task keeps ``src_lang_id``/``tgt_lang_id`` out of their batches.
"""

import dataclasses
import gc
import itertools
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
import torch
from tqdm import tqdm

import fairseq_langshare

from .fairseq_steps import build_generator, build_model, build_trainer, decode_batch, parse_args, train_step

logger = logging.getLogger(__name__)

PKG_DIR = os.path.dirname(os.path.abspath(fairseq_langshare.__file__))
CONFIGS = ("A", "B")

DEFAULT_TASK_ARGS = ("--encoder-langtok", "tgt")
DEFAULT_TRAIN_ARGS = (
    "--criterion", "langshare_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
    "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "5e-4",
    "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4000", "--clip-norm", "0.0",
)


@dataclass
class Settings:
    """What to compare and how. ``a``/``b`` are plain fairseq-train argument lists."""

    name: str
    data: str
    langs: List[str]
    lang_pairs: List[str]
    a: List[str]
    b: List[str]
    a_label: str = "A"
    b_label: str = "B"
    task_args: List[str] = field(default_factory=lambda: list(DEFAULT_TASK_ARGS))
    train_args: List[str] = field(default_factory=lambda: list(DEFAULT_TRAIN_ARGS))
    reps: int = 20
    warmup: int = 1
    max_tokens: int = 2048
    train_batches: int = 10             # fixed training batches, all run once per repetition
    train_split: str = "train"
    decode_split: str = "valid"
    decode_sentences: int = 256         # decoded in batches of decode_batch_size
    decode_single_sentences: int = 64   # of those, decoded one at a time
    decode_batch_size: int = 64
    beam: int = 4
    decode_len: Union[str, int] = "auto"  # "auto": median reference length; an int; "free"
    decode_direction: Optional[str] = None  # "SRC-TGT": decode only that direction (fairseq-generate -s -t); None: all
    threads: int = 1
    seed: int = 1
    memory_reps: int = 2                # fresh-process peak-RSS probes per config and phase; 0: skip
    b_langs: Optional[List[str]] = None  # B's inventory: A's languages first, in order, then more (absent from the data)
    b_init: Optional[str] = None        # name in benchmarks.model_inits.INITS: sets B's weights after building

    def argv(self, config: Sequence[str], save_dir: str, langs: Optional[Sequence[str]] = None) -> List[str]:
        """The full fairseq-train argument list of one configuration (``langs``: its inventory,
        default ``self.langs``)."""
        return [self.data, "--task", "multilingual_langshare", "--user-dir", PKG_DIR,
                "--langs", ",".join(langs or self.langs), "--lang-pairs", ",".join(self.lang_pairs),
                *self.task_args, *self.train_args, "--max-tokens", str(self.max_tokens),
                "--seed", str(self.seed), "--cpu", "--save-dir", save_dir, *config]


# ------------------------------------------------------------------ building blocks


def check_same_task(args_a, args_b, larger_inventory=False):
    """Both configurations must describe the same task: it is set up once, from A. With
    ``larger_inventory``, B's ``--langs`` may extend A's (A's languages first, in order): the
    language ids and language tokens of A's batches mean the same in B."""
    from fairseq.tasks import TASK_DATACLASS_REGISTRY

    if args_a.task != args_b.task:
        raise ValueError(f"configurations use different tasks ({args_a.task} vs {args_b.task})")
    names = [f.name for f in dataclasses.fields(TASK_DATACLASS_REGISTRY[args_a.task])]
    if larger_inventory:
        langs_a, langs_b = list(args_a.langs), list(args_b.langs)
        if langs_b[:len(langs_a)] != langs_a:
            raise ValueError(f"B's --langs must start with A's ({','.join(langs_a)}) in the same order")
        names = [n for n in names if n != "langs"]
    for name in names + ["max_tokens", "required_batch_size_multiple"]:
        if getattr(args_a, name, None) != getattr(args_b, name, None):
            raise ValueError(f"configuration B changes the task/data option --{name.replace('_', '-')} "
                             f"({getattr(args_a, name, None)!r} vs {getattr(args_b, name, None)!r}): "
                             f"both configurations must run on the same data; pass it in the task args")


def interleaved(batches, step, keys=CONFIGS, orders=None):
    """Run ``step(key, batch)`` for every batch and both configurations, alternating the order
    per batch (A B, B A, A B, ...) so that drifts in machine load and cache state hit both
    alike; ``orders`` (lists of keys) replaces the alternation, batch i running in
    ``orders[i % len(orders)]`` (``williams_orders`` for more than two configurations).
    Returns per configuration: wall seconds, CPU seconds of this process, step results."""
    wall = {k: 0.0 for k in keys}
    cpu = {k: 0.0 for k in keys}
    results = {k: [] for k in keys}
    gc.collect()
    for i, batch in enumerate(batches):
        order = orders[i % len(orders)] if orders else (keys if i % 2 == 0 else keys[::-1])
        for key in order:
            w, c = time.perf_counter(), time.process_time()
            results[key].append(step(key, batch))
            cpu[key] += time.process_time() - c
            wall[key] += time.perf_counter() - w
    return wall, cpu, results


def williams_orders(keys):
    """A Williams design for an even number of configurations: every configuration runs once in
    every position and directly after every other configuration once, so that what a step
    leaves behind (cache contents, clock speed) falls on all configurations alike."""
    n = len(keys)
    if n % 2:
        raise ValueError("williams_orders needs an even number of configurations")
    first = [0] + [(j + 1) // 2 if j % 2 else n - j // 2 for j in range(1, n)]
    return [[keys[(r + c) % n] for c in first] for r in range(n)]


def fixed_train_batches(task, settings, args, models):
    from fairseq import utils

    task.load_dataset(settings.train_split, epoch=1)
    itr = task.get_batch_iterator(
        dataset=task.dataset(settings.train_split), max_tokens=settings.max_tokens,
        max_positions=utils.resolve_max_positions(task.max_positions(), *[m.max_positions() for m in models]),
        ignore_invalid_inputs=True, required_batch_size_multiple=args.required_batch_size_multiple,
        seed=settings.seed, epoch=1,
    ).next_epoch_itr(shuffle=True)
    batches = list(itertools.islice(itr, settings.train_batches))
    if len(batches) < settings.train_batches:
        logger.warning("only %d training batches available (asked for %d)", len(batches), settings.train_batches)
    return batches


def fixed_decode_sentences(task, settings):
    """A seeded random set of sentences: decoded in length-sorted batches (as fairseq-generate
    orders them) and, for the first ``decode_single_sentences`` in random order, one at a time."""
    task.load_dataset(settings.decode_split, epoch=1)
    ds = task.dataset(settings.decode_split)
    candidates = list(range(len(ds)))
    if settings.decode_direction:
        candidates = [i for i in candidates if f"{ds[i]['src_lang']}-{ds[i]['tgt_lang']}" == settings.decode_direction]
        if not candidates:
            raise ValueError(f"no {settings.decode_split} sentence of direction {settings.decode_direction}: "
                             f"pass one of the benchmark's --lang-pairs")
    rng = np.random.RandomState(settings.seed)
    picked = [candidates[int(i)] for i in rng.choice(len(candidates), min(settings.decode_sentences, len(candidates)),
                                                     replace=False)]
    single = [ds.collater([ds[i]]) for i in picked[:settings.decode_single_sentences]]
    ordered = sorted(picked, key=lambda i: (int(ds.num_tokens(i)), i))
    size = settings.decode_batch_size
    batched = [ds.collater([ds[i] for i in ordered[k:k + size]]) for k in range(0, len(ordered), size)]
    ref_lengths = [int(ds.size(i)[1]) for i in picked]
    src_lengths = [int(ds.size(i)[0]) for i in picked]
    return single, batched, ref_lengths, src_lengths


def resolve_decode_len(value, ref_lengths) -> Optional[int]:
    if value == "free":
        return None
    if value == "auto":
        return max(int(round(float(np.median(ref_lengths)))), 2)
    try:
        length = int(value)
    except ValueError:
        length = 0
    if length < 2:
        raise ValueError(f"--decode-len {value!r}: give 'auto', 'free' or a length >= 2 (tokens incl. EOS)")
    return length


def parameter_counts(model, task, lang_pairs) -> Dict[str, object]:
    """Total parameters, and effective parameters per language pair: what
    ``model.effective_parameters(src_lang_id, tgt_lang_id)`` reports, or the total if the
    model has no such method (everything is shared)."""
    total = sum(p.numel() for p in model.parameters())
    effective_fn = getattr(model, "effective_parameters", None)
    per_pair = {}
    for pair in lang_pairs:
        src, tgt = pair.split("-")
        per_pair[pair] = (int(effective_fn(task.inventory.id(src), task.inventory.id(tgt)))
                          if effective_fn is not None else total)
    return {"total": total, "effective": per_pair, "has_effective_parameters": effective_fn is not None}


# ------------------------------------------------------------------ the benchmark


class Benchmark:
    """Everything fixed before measuring: task, both models and trainers, batches, generators."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.save_dir = tempfile.mkdtemp(prefix="langshare-bench-")  # Trainer writes crash.pt here on failure
        self._threads_before = torch.get_num_threads()
        torch.set_num_threads(settings.threads)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self):
        from fairseq import tasks

        settings = self.settings
        self.argv = {"A": settings.argv(settings.a, self.save_dir),
                     "B": settings.argv(settings.b, self.save_dir, settings.b_langs)}
        self.args = {k: parse_args(v) for k, v in self.argv.items()}
        check_same_task(self.args["A"], self.args["B"], larger_inventory=settings.b_langs is not None)
        self.task = tasks.setup_task(self.args["A"])
        # B's own task when its inventory is larger (its model, generator and trainer use it);
        # the batches are A's, valid for B (A's ids and language tokens are a prefix of B's)
        self.tasks = {"A": self.task, "B": tasks.setup_task(self.args["B"]) if settings.b_langs else self.task}
        self.models, self.trainers, self.generators = {}, {}, {}
        for key in CONFIGS:
            model, criterion = build_model(self.tasks[key], self.args[key], settings.seed)
            if key == "B" and settings.b_init:
                from .model_inits import INITS

                INITS[settings.b_init](model, self.tasks[key])
            self.models[key] = model
            self.trainers[key] = build_trainer(self.args[key], self.tasks[key], model, criterion)
        self.train_batches = fixed_train_batches(self.task, settings, self.args["A"], list(self.models.values()))
        self.single, self.batched, self.ref_lengths, self.src_lengths = fixed_decode_sentences(self.task, settings)
        self.decode_len = resolve_decode_len(settings.decode_len, self.ref_lengths)
        for key in CONFIGS:
            self.generators[key] = build_generator(self.tasks[key], self.models[key], settings.beam, self.decode_len)

    def close(self):
        torch.set_num_threads(self._threads_before)
        shutil.rmtree(self.save_dir, ignore_errors=True)

    def _timed(self, samples, losses, record):
        """One repetition: training, then decoding one sentence at a time, then in large batches."""
        n_updates = len(self.train_batches)
        tokens = sum(int(b["ntokens"]) for b in self.train_batches)
        wall, cpu, loss = interleaved(self.train_batches, lambda k, b: train_step(self.trainers[k], b))
        for key in CONFIGS:
            losses[key].append(float(np.mean(loss[key])))
            if record:
                for clock, seconds in (("", wall[key]), ("cpu:", cpu[key])):
                    samples[clock + "train_updates_per_s"][key].append(n_updates / seconds)
                    samples[clock + "train_wps"][key].append(tokens / seconds)
        for model in self.models.values():
            model.eval()
        for metric, batches in (("decode_single_tokens_per_s", self.single),
                                ("decode_batched_tokens_per_s", self.batched)):
            wall, cpu, generated = interleaved(
                batches, lambda k, b: decode_batch(self.tasks[k], self.generators[k], self.models[k], b))
            if record:
                for key in CONFIGS:
                    samples[metric][key].append(sum(generated[key]) / wall[key])
                    samples["cpu:" + metric][key].append(sum(generated[key]) / cpu[key])

    def run(self, progress=True) -> dict:
        from . import memory, report

        s = self.settings
        samples = {p + m: {"A": [], "B": []} for m in report.TIMED_METRICS for p in ("", "cpu:")}
        losses = {"A": [], "B": []}
        load_before = os.getloadavg()
        started = time.time()
        for rep in tqdm(range(s.warmup + s.reps), desc=f"{s.name}: repetitions (A, B interleaved)",
                        unit="rep", disable=not progress):
            self._timed(samples, losses, record=rep >= s.warmup)
        if s.memory_reps > 0:
            samples.update(memory.measure(self, progress=progress))
        params = {k: parameter_counts(self.models[k], self.task, s.lang_pairs) for k in CONFIGS}
        samples["params_total"] = {k: [params[k]["total"]] for k in CONFIGS}
        samples["params_effective"] = {k: list(params[k]["effective"].values()) for k in CONFIGS}
        return report.build_result(self, samples, params, losses, load_before, time.time() - started)


def run_comparison(settings: Settings, out_json=None, markdown=None, progress=True, tag="") -> dict:
    """Measure, store the result in ``out_json`` as its run ``tag`` (``report.store_run``) and append
    the markdown table to ``markdown``."""
    from . import report

    if out_json:
        report.read_runs(out_json)  # a file that holds no result is refused now, not after the measurement
    bench = Benchmark(settings)
    try:
        result = bench.run(progress=progress)
    finally:
        bench.close()
    if out_json:
        report.store_run(result, out_json, tag)
    if markdown:
        report.append_markdown(result, markdown)
    return result
