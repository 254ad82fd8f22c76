"""Distributed data-parallel training (docs/scale.md): where each process finds its rank, and 2 gloo
ranks with batch B reaching what one process reaches with --update-freq 2 on the same batches, for
every method, both DDP backends, across the phase switches, with activation checkpointing, and
resumed from the other world size (benchmarks/data_parallel_steps.py builds fairseq's trainer
in-process on a fixed plan of batches)."""

import contextlib
import os
import subprocess
import sys

import pytest
import torch

from test_hydra_and_distributed import free_port, outputs_of
from tiny_corpus import build_task_and_model

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:  # benchmarks/ is a top-level directory of the repository, not installed
    sys.path.insert(0, REPO)

from benchmarks import data_parallel_steps as steps  # noqa: E402
from fairseq_langshare import distributed_launch  # noqa: E402

LAUNCH_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK")
PAIRS = "en-xx,en-yy,xx-yy"  # xx-yy (valid only): a source language only one rank has in some updates
# float tolerance of "the same parameters": 2 ranks are bit-identical to one process here (gloo sums two
# halves exactly, (g0/2 + g1/2) * 2 = g0 + g1); the tolerance leaves room for another reduction order.
# Unsynchronised gradients move parameters by ~3e-2 in the same 6 updates.
TOLERANCE = dict(atol=1e-6, rtol=1e-5)


# --- where a process finds its place -------------------------------------------------------

def test_torchrun_variables_give_rank_world_size_and_local_device():
    env = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "16", "RANK": "9", "LOCAL_RANK": "1"}
    assert distributed_launch.launcher_placement(env, gpus=8, port=0) == {
        "launcher": "torchrun", "init_method": "env://", "world_size": 16, "rank": 9, "device_id": 1}
    assert distributed_launch.launcher_placement(env, gpus=1, port=0)["device_id"] == 0  # one visible GPU each
    assert distributed_launch.launcher_placement({**env, "WORLD_SIZE": "1", "RANK": "0"}, gpus=0, port=0) is None


def test_srun_variables_give_rank_world_size_first_node_and_a_port_from_the_job():
    env = {"SLURM_JOB_ID": "4242", "SLURM_STEP_NODELIST": "gpu[07-08],cpu3", "SLURM_NNODES": "2",
           "SLURM_NTASKS": "16", "SLURM_PROCID": "11", "SLURM_LOCALID": "3", "SLURM_NODEID": "1"}
    placement = distributed_launch.launcher_placement(env, gpus=8, port=0)
    port = distributed_launch.slurm_port("4242")
    assert placement == {"launcher": "srun", "init_method": f"tcp://gpu07:{port}", "world_size": 16, "rank": 11,
                         "device_id": 3}
    assert 10000 <= port <= 60000 and port == distributed_launch.slurm_port("4242")  # every task draws it alike
    assert distributed_launch.launcher_placement(env, gpus=8, port=12345)["init_method"] == "tcp://gpu07:12345"
    # one task per GPU node: fairseq spawns one process per GPU (its own path); on CPU nodes a task is a rank
    per_node = {**env, "SLURM_NTASKS": "2", "SLURM_PROCID": "1"}
    assert distributed_launch.launcher_placement(per_node, gpus=8, port=0) is None
    assert distributed_launch.launcher_placement(per_node, gpus=0, port=0)["world_size"] == 2
    assert distributed_launch.first_slurm_host("rack[1-2]-n[01-04],x") == "rack1-n01"
    assert distributed_launch.first_slurm_host("solo") == "solo"


def test_a_batch_script_run_without_srun_is_left_to_fairseq(monkeypatch):
    """Was: the sbatch script itself (Slurm's batch step: SLURM_PROCID 0 and the job's SLURM_NTASKS, no
    step node list) read as rank 0 of the job's tasks, so ``fairseq-train`` typed in it without srun waited
    for ranks that never start (a hang until the rendezvous times out) where fairseq trains alone on a CPU
    node or spawns one process per GPU; fairseq-hydra-train was refused as "rank 0 of N"."""
    batch_step = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_NODELIST": "gpu[07-08]",
                  "SLURM_NNODES": "1", "SLURM_NTASKS": "8", "SLURM_NTASKS_PER_NODE": "8", "SLURM_PROCID": "0",
                  "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}
    for gpus in (0, 8):
        assert distributed_launch.launcher_placement(batch_step, gpus=gpus, port=0) is None
    for key in [k for k in os.environ if k.startswith("SLURM_")] + list(LAUNCH_VARIABLES):
        monkeypatch.delenv(key, raising=False)
    for key, value in batch_step.items():
        monkeypatch.setenv(key, value)
    distributed_launch.check_training_is_distributed()  # no refusal: nothing started other ranks


def test_a_world_size_that_contradicts_the_launcher_is_refused_in_one_line(monkeypatch):
    from fairseq.dataclass.configs import FairseqConfig
    from omegaconf import OmegaConf

    def config(world_size):  # fairseq-train's cfg.distributed_training
        cfg = OmegaConf.structured(FairseqConfig)
        cfg.distributed_training.distributed_world_size = world_size
        return cfg.distributed_training

    for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", "WORLD_SIZE": "2", "RANK": "1",
                       "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(key, value)
    cfg = config(1)  # fairseq's default without GPUs
    distributed_launch.infer_init_method(cfg)
    assert (cfg.distributed_init_method, cfg.distributed_world_size, cfg.distributed_rank, cfg.device_id,
            cfg.distributed_no_spawn) == ("env://", 2, 1, 1, True)
    with pytest.raises(ValueError, match=r"^--distributed-world-size 4 but torchrun started 2 processes; drop"):
        distributed_launch.infer_init_method(config(4))


def test_ranks_a_launcher_started_without_gpus_meet_over_gloo_not_fairseq_s_default_nccl(monkeypatch):
    """Was: ``torchrun ... fairseq-train --cpu`` without ``--distributed-backend gloo`` stopped in every
    rank with torch's "Distributed package doesn't have NCCL built in", which names neither the flag nor
    the CPU. Without GPUs the ranks now meet over gloo, with a notice; another backend asked for stays."""
    from fairseq.dataclass.configs import FairseqConfig
    from omegaconf import OmegaConf

    for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", "WORLD_SIZE": "2", "RANK": "1",
                       "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(key, value)
    backends = {}
    for gpus, asked in ((0, "nccl"), (0, "mpi"), (2, "nccl")):
        monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
        monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
        cfg = OmegaConf.structured(FairseqConfig).distributed_training
        cfg.distributed_world_size = max(1, gpus)
        cfg.distributed_backend = asked
        distributed_launch.infer_init_method(cfg)
        backends[gpus, asked] = cfg.distributed_backend
    assert backends == {(0, "nccl"): "gloo", (0, "mpi"): "mpi", (2, "nccl"): "nccl"}


def test_a_training_run_a_launcher_started_as_one_of_several_ranks_is_never_trained_alone(corpus, monkeypatch):
    """fairseq-hydra-train loads the plugin after fairseq read the launcher's variables: a run about
    to train alone in rank 1 of 2 is refused in one line naming the overrides (a decoding is not)."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    build_task_and_model(corpus, extra=["--max-update", "1"])  # no launcher: trains alone
    for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", "WORLD_SIZE": "2", "RANK": "1",
                       "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValueError, match=r"^this process is rank 1 of the 2 torchrun started, but fairseq is training "
                                         r"it alone .*: add distributed_training.distributed_init_method=env:// "
                                         r"[^\n]*\(docs/scale.md\)$"):
        build_task_and_model(corpus, extra=["--max-update", "1"])


# --- 2 ranks = 1 process with --update-freq 2 ----------------------------------------------

METHODS_BACKENDS = [(m, b) for m in steps.METHODS for b in steps.BACKENDS]
PHASED = ("latent_depth/pytorch_ddp", "adaptive_sparse/legacy_ddp")  # saved after their switch, resumed
ACCUMULATED = ("latent_depth/pytorch_ddp", "multistack/pytorch_ddp")  # DDP without their idle parameters
SINGLE_RUNS = [f"{m}/{b}" for m, b in METHODS_BACKENDS] + [f"{r}/first" for r in PHASED] + [
    f"{r}/accumulate" for r in ACCUMULATED]
RANK_RUNS = SINGLE_RUNS + [f"{r}/resume" for r in PHASED] + [
    "latent_depth/pytorch_ddp/checkpoint", "lsl_separate_decoder/pytorch_ddp/checkpoint",
    "multistack/legacy_ddp/checkpoint", "clsr/pytorch_ddp/checkpoint", "adapters/pytorch_ddp/checkpoint",
    "adaptive_sparse/legacy_ddp/checkpoint", "baseline/pytorch_ddp/broken", "lsl_separate_decoder/legacy_ddp/broken"]


def harness_args(corpus, runs, out, checkpoint_dir):
    return ["--data", str(corpus["bin"]), "--langs", ",".join(corpus["langs"]), "--lang-pairs", PAIRS,
            "--runs", ",".join(runs), "--checkpoint-dir", str(checkpoint_dir), "--out", str(out)]


def run_two_ranks(args):
    """Two processes with the variables torchrun sets."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "WORLD_SIZE": "2", "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.data_parallel_steps", *args], cwd=REPO,
                              env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for rank in (0, 1)]
    outs = outputs_of(procs, timeout=900)
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-4000:]


@pytest.fixture(scope="module")
def harness(corpus, tmp_path_factory):
    """The plan run by one process (micro-batches), then by 2 ranks (resuming the process's
    checkpoints), then the process resuming the ranks' checkpoints."""
    tmp = tmp_path_factory.mktemp("ddp")
    threads = torch.get_num_threads()
    launcher = {k: os.environ.pop(k) for k in LAUNCH_VARIABLES if k in os.environ}  # this process: 1 rank
    try:
        single = steps.main(harness_args(corpus, SINGLE_RUNS, tmp / "single.pt", tmp))
        run_two_ranks(harness_args(corpus, RANK_RUNS, tmp / "ranks.pt", tmp))
        single.update(steps.main(harness_args(corpus, [f"{r}/resume" for r in PHASED], tmp / "resumed.pt", tmp)))
    finally:
        torch.set_num_threads(threads)
        os.environ.update(launcher)
    return single, torch.load(tmp / "ranks.pt", weights_only=False)


@pytest.mark.slow
@pytest.mark.parametrize("run", ACCUMULATED)
def test_two_ranks_with_update_freq_2_reach_one_process_with_update_freq_4(harness, run):
    """Each rank accumulates its batch in 2 micro-batches under ``no_sync()``; latent depth commits in
    the first micro-batch of an update, and DDP is built again without the layers it leaves. The 2
    ranks reach the parameters one process reaches with their 4 micro-batches."""
    single, ranks = harness
    method, backend = run.split("/")
    one, two = single[(method, backend, "accumulate")], ranks[(method, backend, "accumulate")]
    assert one["num_updates"] == two["num_updates"] == 6
    assert two["wrapper"] == "IdleExcludingDDP"
    assert one["losses"] == pytest.approx(two["losses"], rel=1e-5)
    # Not bit for bit, as with one micro-batch per rank: the gradients are summed in another order,
    # (a+b)+(c+d) on 2 ranks against ((a+b)+c)+d in one process, and Adam carries the rounding on. The
    # attention key biases most: their gradient is zero in exact arithmetic (softmax ignores a constant
    # added to every score of a query), so Adam scales rounding noise. Unsynchronised gradients put the
    # parameters 3e-2 apart (test_the_comparison_catches_unsynchronised_gradients).
    for name, value in one["params"].items():
        if value.is_floating_point():
            atol = 1e-3 if name.endswith("k_proj.bias") else 1e-4
            torch.testing.assert_close(value, two["params"][name], atol=atol, rtol=0, msg=lambda m: f"{name}: {m}")
        else:
            assert torch.equal(value, two["params"][name]), name
    if method == "latent_depth":
        assert bool(two["params"]["decoder.layer_select.committed"])


def assert_same_state(a, b):
    assert a.keys() == b.keys()
    for name in a:
        if a[name].is_floating_point():
            torch.testing.assert_close(a[name], b[name], **TOLERANCE, msg=lambda m: f"{name}: {m}")
        else:
            assert torch.equal(a[name], b[name]), name  # committed decisions, language tables


@pytest.mark.parametrize("layerdrop", [[], ["--encoder-layerdrop", "0.2"], ["--decoder-layerdrop", "0.2"]])
def test_the_baseline_with_layerdrop_declares_steps_that_leave_layers_unused(corpus, layerdrop):
    """Was: the baseline declared every step to train every parameter, so with LayerDrop (every rank drops the
    same layers: fairseq seeds them alike) 2 ranks under the default pytorch_ddp stopped at the second update
    (``Expected to have finished reduction``), and legacy_ddp moved the dropped layers by Adam's moments."""
    from fairseq_langshare import data_parallel

    _, model, _ = build_task_and_model(corpus, extra=layerdrop)
    assert data_parallel.leaves_parameters_unused(model) == bool(layerdrop)


def test_the_plan_has_updates_where_a_language_trains_on_one_rank_only(corpus):
    task, _, _ = build_task_and_model(corpus, pairs=PAIRS.split(","))
    task.load_dataset("valid")
    plan = steps.equality_plan(task, "valid")
    langs = [[{tuple(ids) for ids in zip(*(steps.collate(task, "valid", rows)["net_input"][k].tolist()
                                          for k in ("src_lang_id", "tgt_lang_id")))} for rows in update]
             for update in plan]
    tgt = [[{t for _, t in rank} for rank in update] for update in langs]
    src = [[{s for s, _ in rank} for rank in update] for update in langs]
    every = set().union(*(a | b for a, b in tgt))
    assert any(a.isdisjoint(b) for a, b in tgt)  # each target language on one rank only
    assert any(a | b != every for a, b in tgt)  # a target language no rank has
    assert any(a != b for a, b in src)  # a source language one rank has
    assert len(plan) > steps.SWITCH  # the phase switches happen inside the plan


@pytest.mark.slow
@pytest.mark.parametrize("method,backend", METHODS_BACKENDS)
def test_two_ranks_reach_the_parameters_of_one_process_with_update_freq_2(harness, method, backend):
    single, ranks = harness
    one, two = single[(method, backend, "plain")], ranks[(method, backend, "plain")]
    assert one["num_updates"] == two["num_updates"] == 6
    unused = method != "baseline"
    idle = method in ("multistack", "latent_depth")  # DDP without what no step can use, rebuilt when it changes
    assert (two["wrapper"], two["find_unused"]) == (
        ("IdleExcludingDDP" if idle else "DistributedDataParallel", unused) if backend == "pytorch_ddp" else
        ("UnusedStayUnusedLegacyDDP" if unused else "LegacyDistributedDataParallel", None))
    assert one["losses"] == pytest.approx(two["losses"], rel=1e-5)
    assert_same_state(one["params"], two["params"])
    if method == "latent_depth":  # committed (update 3), with layers no language keeps, unused from then on
        state = two["params"]
        assert bool(state["decoder.layer_select.committed"]) and bool(state["encoder.layer_select.committed"])
        assert (~state["decoder.layer_select.committed_keep"].any(0)).any()


@pytest.mark.slow
@pytest.mark.parametrize("run", ["latent_depth/pytorch_ddp", "lsl_separate_decoder/pytorch_ddp",
                                 "multistack/legacy_ddp", "clsr/pytorch_ddp", "adapters/pytorch_ddp",
                                 "adaptive_sparse/legacy_ddp"])
def test_activation_checkpointing_on_two_ranks_changes_no_parameter(harness, run):
    """Recomputed layers under DDP's search for unused parameters, latent depth across its commit,
    adaptive sparsity across T-bar; CLSR, adapters and adaptive sparsity recompute with the language
    ids the forward call had."""
    single, ranks = harness
    method, backend = run.split("/")
    assert_same_state(single[(method, backend, "plain")]["params"], ranks[(method, backend, "checkpoint")]["params"])


@pytest.mark.slow
@pytest.mark.parametrize("run", PHASED)
def test_resuming_on_another_world_size_reaches_the_uninterrupted_parameters(harness, run):
    """Saved at update 4 (after the commit / T-bar at 3) by 1 process and by 2 ranks, resumed by the
    other: schedules, learning rate, optimizer moments and committed state all carry over."""
    single, ranks = harness
    method, backend = run.split("/")
    uninterrupted = single[(method, backend, "plain")]["params"]
    for resumed in (ranks[(method, backend, "resume")], single[(method, backend, "resume")]):  # 1 -> 2, 2 -> 1
        assert resumed["num_updates"] == 6
        assert_same_state(uninterrupted, resumed["params"])


@pytest.mark.slow
@pytest.mark.parametrize("run", ["baseline/pytorch_ddp", "lsl_separate_decoder/legacy_ddp"])
def test_the_comparison_catches_unsynchronised_gradients(harness, run):
    single, ranks = harness
    method, backend = run.split("/")
    with pytest.raises(AssertionError):
        assert_same_state(single[(method, backend, "plain")]["params"], ranks[(method, backend, "broken")]["params"])


# --- what a step sends ------------------------------------------------------------------------

def float_all_reduces(monkeypatch):
    """The sizes of the floating-point tensors all-reduced through ``torch.distributed`` from now on."""
    import torch.distributed as dist

    sent, all_reduce = [], dist.all_reduce

    def recorded(tensor, *a, **k):
        if tensor.is_floating_point():
            sent.append(tensor.numel())
        return all_reduce(tensor, *a, **k)

    monkeypatch.setattr(dist, "all_reduce", recorded)
    return sent


def en_xx_sample_and_criterion(task, args):
    """The valid split loaded; a batch of its first 4 en -> xx sentences, and the run's criterion."""
    task.load_dataset("valid")
    return steps.collate(task, "valid", steps.direction_rows(task, "valid")["en-xx"][:4]), task.build_criterion(args)


@pytest.mark.parametrize("buffer_size", [None, 3000])  # fairseq's (every parameter fits), or in groups
def test_a_legacy_ddp_step_sends_only_the_gradients_of_parameters_some_rank_used(corpus, monkeypatch, buffer_size):
    """Was: ``legacy_ddp`` all-reduced fairseq's whole buffer every update, one slot per trainable parameter,
    the zeros of what no rank used included (multi-stacks: the other languages' stacks; 2.6 times what
    this step uses). Now only the gradients of the parameters some rank used travel, and they arrive as
    one process computes them."""
    import torch.distributed as dist
    from fairseq_langshare import data_parallel

    task, model, args = build_task_and_model(corpus, arch="langshare_multistack_transformer_tiny", extra=[
        "--multi-encoder", "src-lang", "--multi-decoder", "tgt-lang", "--ddp-backend", "legacy_ddp"])
    sample, criterion = en_xx_sample_and_criterion(task, args)  # en -> xx only
    torch.manual_seed(0)  # the same dropout masks in both backward passes
    criterion(model, sample)[0].backward()
    alone = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert 0 < sum(g.numel() for g in alone.values()) < trainable / 2

    sent = float_all_reduces(monkeypatch)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        wrapped = data_parallel.distributed_model(args, model, dist.group.WORLD, "cpu")
        if buffer_size:
            wrapped.module.buffer_size = buffer_size  # smaller than some parameters, too
        torch.manual_seed(0)
        criterion(wrapped, sample)[0].backward()
        wrapped.all_reduce_grads()
    finally:
        dist.destroy_process_group()
    assert sum(sent) == sum(g.numel() for g in alone.values())
    assert len(sent) == 1 if buffer_size is None else len(sent) > 2
    arrived = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    assert arrived.keys() == alone.keys()
    for name, grad in arrived.items():
        torch.testing.assert_close(grad, alone[name], **TOLERANCE)


IDLE_FLAGS = {"multistack": ["--arch", "langshare_multistack_transformer_tiny", "--multi-encoder", "src-lang",
                              "--multi-decoder", "tgt-lang"],
              "latent_depth": steps.method_argv("latent_depth", "tiny")[:-1] + ["1"]}  # commit at update 1


def build_for_idle_test(corpus, method, extra=()):
    """Task, model in training mode at update 1 (latent depth commits at its next training forward), args."""
    flags = IDLE_FLAGS[method] + ["--criterion", "langshare_label_smoothed_cross_entropy"]  # latent depth's KL
    task, model, args = build_task_and_model(corpus, arch=flags[1], extra=flags[2:] + list(extra))
    model.train()
    model.set_num_updates(1)
    return task, model, args


def reordered_groups(model):
    """``model``'s state with the encoder's group table of a checkpoint trained under --langs xx,en,yy:
    English's sentences run the copy of group 1, xx's that of group 0."""
    from fairseq_langshare.languages import encode_inventory

    state = model.state_dict()
    state["encoder.group_names"] = encode_inventory(["xx", "en", "yy"])
    group = {"xx": 0, "en": 1, "yy": 2}
    state["encoder.group_of_lang"] = torch.tensor([group[code] for code in model.inventory.langs])
    return state


def ddp_buckets_sent(monkeypatch):
    """The parameters of every bucket a DDP the package builds all-reduces from now on (through
    torch's Python ``allreduce_hook``: the mean its built-in all-reduce takes)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from fairseq_langshare import data_parallel

    sent, build = [], data_parallel.torch_ddp

    def recorded(state, bucket):
        sent.extend(bucket.parameters())
        return default_hooks.allreduce_hook(state, bucket)

    def recording(module, fp16_hook, **kwargs):
        wrapped = build(module, fp16_hook, **kwargs)
        wrapped.register_comm_hook(kwargs.get("process_group"), recorded)
        return wrapped

    monkeypatch.setattr(data_parallel, "torch_ddp", recording)
    return sent


@pytest.mark.parametrize("case", ["multistack", "multistack, checkpoint loaded", "latent_depth"])
def test_a_pytorch_ddp_step_leaves_the_idle_parameters_out_of_ddp(corpus, monkeypatch, case):
    """Was: torch's DDP all-reduced every trainable parameter's gradient every update, zeros included for
    parameters no step can use: the stacks of groups no direction of --lang-pairs reaches (multi-stacks,
    here the xx and yy encoders and the en decoder of an O2M run) and, from latent depth's commit on, the
    layers no language keeps and the selection logits. Now DDP is built without them, and again whenever
    they change: fairseq wraps the model before it loads a checkpoint, whose group tables (here: trained
    under another --langs order) decide them, and latent depth commits during a step (that step still
    sends them; the next does not). What does travel arrives as one process computes it."""
    import torch.distributed as dist
    from fairseq_langshare import data_parallel

    method = case.split(",")[0]

    def build():
        return build_for_idle_test(corpus, method)

    def two_steps(model, raw, sent):
        """Each step's gradients and the names of the parameters all-reduced, for two steps on ``sample``
        (latent depth commits in the first)."""
        grads, sends = [], []
        for _ in range(2):
            del sent[:]
            torch.manual_seed(0)
            criterion(model, sample)[0].backward()
            grads.append({name: p.grad.clone() for name, p in raw.named_parameters() if p.grad is not None})
            sends.append({name for name, p in raw.named_parameters() if any(p is q for q in sent)})
            raw.zero_grad(set_to_none=True)
        return grads, sends

    task, model, args = build()
    assert args.ddp_backend == "pytorch_ddp"
    sample, criterion = en_xx_sample_and_criterion(task, args)
    loaded = reordered_groups(model) if case.endswith("loaded") else None
    if loaded:
        model.load_state_dict(loaded)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    alone, _ = two_steps(model, model, [])
    idle = model.idle_parameters()
    names = {name for name, p in model.named_parameters() if p in idle}

    def names_of(params):
        return {name for name, p in model.named_parameters() if p in params}

    if method == "multistack":  # groups en, xx, yy: no direction has xx or yy as its source, or en as its target
        encoders = {"0", "2"} if loaded else {"1", "2"}  # en's stack is the copy its group table names
        assert {(name.split(".")[0], name.split(".per_lang.")[1].split(".")[0]) for name in names} == {
            *(("encoder", copy) for copy in encoders), ("decoder", "0")}
    else:  # committed in the first step: decoder layers no language keeps, and the logits
        assert model.decoder.layer_select.unkept_layers()
        assert model.decoder.layer_select.logits in idle and model.encoder.layer_select.logits in idle
    assert not idle.intersection(p for name, p in model.named_parameters() if name in alone[1])

    sent = ddp_buckets_sent(monkeypatch)
    task, model, args = build()  # wrapped before the checkpoint is loaded and before the commit, as in a run
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        wrapped = data_parallel.distributed_model(args, model, dist.group.WORLD, "cpu")
        if loaded:
            model.load_state_dict(loaded)
        arrived, sends = two_steps(wrapped, model, sent)
    finally:
        dist.destroy_process_group()
    assert names_of(model.idle_parameters()) == names  # the wrapped model's, read after its load or commit
    assert sends == ([trainable, trainable - names] if method == "latent_depth" else [trainable - names] * 2)
    for mine, theirs in zip(arrived, alone):
        assert mine.keys() == theirs.keys()
        for name, grad in mine.items():
            torch.testing.assert_close(grad, theirs[name], **TOLERANCE)


def test_no_sync_holds_and_the_rebuild_waits_for_the_end_of_the_update(corpus, monkeypatch):
    """fairseq accumulates --update-freq micro-batches under ``no_sync()``; latent depth commits in the
    first micro-batch of an update. DDP is built again only at the next update (the first micro-batch
    of which runs under ``no_sync()`` too), nothing is all-reduced before an update's last micro-batch,
    and each update's sum arrives whole. (Why the rebuild waits, on 2 ranks:
    ``test_a_rebuild_waits_for_the_accumulated_micro_batches_to_be_all_reduced``.)"""
    import torch.distributed as dist
    from fairseq_langshare import data_parallel

    def build():
        return build_for_idle_test(corpus, "latent_depth")

    def two_updates(model, raw, sent, ddp=lambda: None):
        """Per update of three micro-batches: the names of the parameters all-reduced in each, the DDP
        each ran on, and the accumulated gradients."""
        updates = []
        for update in range(2):
            sends, built = [], []
            for i in range(3):
                del sent[:]
                torch.manual_seed(i)
                with model.no_sync() if i < 2 else contextlib.nullcontext():
                    criterion(model, sample)[0].backward()
                sends.append({name for name, p in raw.named_parameters() if any(p is q for q in sent)})
                built.append(ddp())
            updates.append((sends, built, {name: p.grad.clone() for name, p in raw.named_parameters()
                                           if p.grad is not None}))
            raw.zero_grad(set_to_none=True)
        return updates

    task, model, args = build()
    sample, criterion = en_xx_sample_and_criterion(task, args)
    model.no_sync = contextlib.nullcontext
    alone = two_updates(model, model, [])

    sent = ddp_buckets_sent(monkeypatch)
    task, model, args = build()
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        wrapped = data_parallel.distributed_model(args, model, dist.group.WORLD, "cpu")
        first = wrapped.module.ddp
        updates = two_updates(wrapped, model, sent, lambda: wrapped.module.ddp)
    finally:
        dist.destroy_process_group()
    idle = {name for name, p in model.named_parameters() if p in model.idle_parameters()}
    (commit_sends, commit_built, _), (next_sends, next_built, _) = updates
    assert commit_built == [first] * 3  # the update that commits ends on the DDP it began with
    assert next_built[0] is next_built[1] is next_built[2] is not first  # built again at the next one
    assert commit_sends == [set(), set(), trainable] and next_sends == [set(), set(), trainable - idle]
    for (_, _, arrived), (_, _, grads) in zip(updates, alone):
        assert arrived.keys() == grads.keys()
        for name, grad in arrived.items():
            torch.testing.assert_close(grad, grads[name], **TOLERANCE)


def test_the_fp16_communication_hook_survives_the_rebuild(corpus):
    """``--ddp-comm-hook fp16`` is registered on the DDP built again after latent depth's commit too."""
    import torch.distributed as dist
    from fairseq_langshare import data_parallel

    task, model, args = build_for_idle_test(corpus, "latent_depth", ["--ddp-comm-hook", "fp16"])
    sample, criterion = en_xx_sample_and_criterion(task, args)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        wrapped = data_parallel.distributed_model(args, model, dist.group.WORLD, "cpu")
        built = [wrapped.module.ddp]
        for _ in range(2):
            criterion(wrapped, sample)[0].backward()
            built.append(wrapped.module.ddp)
    finally:
        dist.destroy_process_group()
    assert built[0] is built[1] is not built[2]  # built again at the forward after the commit
    assert {ddp._get_ddp_logging_data().get("comm_hook") for ddp in built} == {"fp16_compress_hook"}


def test_the_scaling_benchmark_s_search_off_configurations_turn_only_the_search_off(corpus):
    """``benchmarks/ddp_scaling.py``'s ``METHOD_search_off``: the method's flags, and DDP built without
    the plugin's ``find_unused_parameters`` inside it only (what the search costs the method)."""
    import torch.distributed as dist
    from benchmarks import ddp_scaling
    from fairseq_langshare import data_parallel

    assert ddp_scaling.method_of("latent_depth_search_off") == "latent_depth"
    assert ddp_scaling.flags_of("latent_depth_search_off") == ddp_scaling.CONFIGS["latent_depth"]
    task, model, args = build_for_idle_test(corpus, "multistack")
    found = {}
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        for config in ("multistack_search_off", "multistack"):
            with ddp_scaling.search_off(config):
                found[config] = data_parallel.distributed_model(args, model, dist.group.WORLD, "cpu").find_unused_parameters
        found["after"] = data_parallel.distributed_model(args, model, dist.group.WORLD, "cpu").find_unused_parameters
    finally:
        dist.destroy_process_group()
    assert found == {"multistack_search_off": False, "multistack": True, "after": True}


def test_a_rebuild_waits_for_the_accumulated_micro_batches_to_be_all_reduced(tmp_path):
    """Was: with --update-freq 2, DDP was built again at the second micro-batch of the update in which
    latent depth commits. The new DDP knew nothing of the first micro-batch, accumulated under
    ``no_sync``, so a parameter only that micro-batch used kept each rank's own gradient: the ranks
    drifted apart (on a GPU fairseq stops at "gradients are inconsistent between workers"). Now the
    rebuild waits until the accumulated gradients have been all-reduced: b's gradient is the mean of
    the ranks' own on both ranks."""
    import torch.multiprocessing as mp
    from idle_set_change_ranks import accumulate_across_the_commit

    context = mp.get_context("spawn")
    results = context.Queue()
    ranks = [context.Process(target=accumulate_across_the_commit, args=(rank, str(tmp_path / "store"), results))
             for rank in (0, 1)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(120)
    assert [process.exitcode for process in ranks] == [0, 0]
    on_rank0, on_rank1, mean = (torch.tensor(g) for g in results.get(timeout=10))
    assert mean.abs().sum() > 0
    torch.testing.assert_close(on_rank0, mean, **TOLERANCE)
    torch.testing.assert_close(on_rank1, mean, **TOLERANCE)
