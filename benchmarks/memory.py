"""Peak memory of one configuration's training and decoding, each in a fresh process.

Protocol (one probe = one ``python -m benchmarks.memory SPEC.json`` subprocess):

1. set the task up and build the model exactly as the timing run does (same argv, same seed),
   plus its fairseq ``Trainer`` (phase ``train``) or ``SequenceGenerator`` (phase ``decode``);
   load the fixed batches of the timing run;
2. warm up: one training step on the first batch (this allocates the Adam state and pays the
   one-time costs of the first step: autograd and thread-pool set-up, lazy imports, ~75 MiB
   that do not depend on the model), then free the gradients; or decode the first batch;
3. collect garbage and hand freed heap back to the OS (``malloc_trim``), then read ``VmRSS``:
   the baseline at rest (interpreter, fairseq, dictionaries, weights, optimizer state, batches);
4. reset the kernel's RSS high-water mark (write ``5`` to ``/proc/self/clear_refs``);
5. run the phase: every fixed training batch once (forward, backward, Adam step), or beam
   search over every large decoding batch;
6. read ``VmHWM``. Peak = ``VmHWM - baseline``: the working memory of a step (activations,
   gradients, temporaries, beam buffers, allocator slack). Weights and optimizer state are in
   the baseline; they follow from the parameter counts (4 bytes per parameter for the weights,
   4 for the gradient, 8 for Adam's moments).

A fresh process per phase keeps one phase's allocator cache from hiding the next one's
growth. The probe runs with glibc's mmap threshold fixed at its initial 128 KiB
(``MALLOC_MMAP_THRESHOLD_``), which turns off glibc's dynamic threshold: every block of 128 KiB
or more (every sizeable tensor) is mmapped and returned to the OS when freed, so RSS follows
live memory. With the dynamic threshold the same probe of the same model varied by about +-10%
from run to run (freed tensors stay in the heap, depending on allocation history); fixed, it
repeats to a fraction of a MiB. The peak is therefore live memory plus small-block slack, a
little below what a default-configured process would hold. Where ``clear_refs`` is not
writable the probe falls back to ``ru_maxrss`` minus the baseline, which an earlier, higher
peak would mask (the method is recorded).
"""

import ctypes
import json
import os
import re
import resource
import subprocess
import sys

import torch
from tqdm import tqdm

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHASES = {"train": "mem_train_peak_mib", "decode": "mem_decode_peak_mib"}
LOADED_METRIC = "mem_loaded_rss_mib"
MMAP_THRESHOLD = 128 * 1024  # glibc's initial value; setting it fixes it (see above)


def _status_kib(field):
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+)\s+kB", f.read(), re.M).group(1))


def settle() -> float:
    """Garbage-collect, return free heap to the OS; current RSS in MiB."""
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    return _status_kib("VmRSS") / 1024


def reset_peak() -> str:
    """Reset the RSS high-water mark; returns the method ``read_peak`` must use."""
    malloc = "MALLOC_MMAP_THRESHOLD_=" + os.environ.get("MALLOC_MMAP_THRESHOLD_", "dynamic")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return "VmHWM after clear_refs reset, " + malloc
    except OSError:
        return "ru_maxrss (no clear_refs reset), " + malloc


def read_peak(method) -> float:
    if method.startswith("VmHWM"):
        return _status_kib("VmHWM") / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def probe(spec) -> dict:
    """Run in the subprocess: one configuration, one phase."""
    from fairseq import tasks

    from benchmarks import fairseq_steps as steps

    torch.set_num_threads(spec["threads"])
    args = steps.parse_args(spec["argv"])
    task = tasks.setup_task(args)
    model, criterion = steps.build_model(task, args, spec["seed"])
    batches = torch.load(spec["batches"], weights_only=False)[spec["phase"]]
    if spec["phase"] == "train":
        trainer = steps.build_trainer(args, task, model, criterion)

        def run(batches):
            for batch in batches:
                steps.train_step(trainer, batch)

        run(batches[:1])
        trainer.optimizer.zero_grad()  # gradients are None again, as at the start of every step
    else:
        generator = steps.build_generator(task, model, spec["beam"], spec["decode_len"])

        model.eval()

        def run(batches):
            for batch in batches:
                steps.decode_batch(task, generator, model, batch)

        run(batches[:1])
    baseline = settle()
    method = reset_peak()
    run(batches)
    peak = read_peak(method)
    return {"baseline_mib": baseline, "peak_rss_mib": peak, "delta_mib": peak - baseline, "method": method}


def run_probe(spec_path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH")) if p)
    env["MALLOC_MMAP_THRESHOLD_"] = str(MMAP_THRESHOLD)
    with open(spec_path) as f:
        env["OMP_NUM_THREADS"] = str(json.load(f)["threads"])
    proc = subprocess.run([sys.executable, "-m", "benchmarks.memory", spec_path], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"memory probe {spec_path} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(bench, progress=True) -> dict:
    """``memory_reps`` probes per configuration and phase, interleaved A, B, A, B."""
    s = bench.settings
    batches_path = os.path.join(bench.save_dir, "batches.pt")
    torch.save({"train": bench.train_batches, "decode": bench.batched}, batches_path)
    samples = {m: {"A": [], "B": []} for m in list(PHASES.values()) + [LOADED_METRIC]}
    bench.memory_method = None
    jobs = [(rep, phase, key) for rep in range(s.memory_reps) for phase in PHASES for key in ("A", "B")]
    for rep, phase, key in tqdm(jobs, desc=f"{s.name}: memory probes (fresh processes)", unit="probe",
                                disable=not progress):
        spec = {"argv": bench.argv[key], "seed": s.seed, "threads": s.threads, "batches": batches_path,
                "phase": phase, "beam": s.beam, "decode_len": bench.decode_len}
        spec_path = os.path.join(bench.save_dir, f"probe-{key}-{phase}-{rep}.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        out = run_probe(spec_path)
        samples[PHASES[phase]][key].append(out["delta_mib"])
        if phase == "train":
            samples[LOADED_METRIC][key].append(out["baseline_mib"])
        bench.memory_method = out["method"]
    return samples


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.WARNING)
    with open(sys.argv[1]) as f:
        result = probe(json.load(f))
    print(json.dumps(result))
