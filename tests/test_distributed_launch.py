"""The launches users type (docs/scale.md), on 2 ranks on the CPU with fairseq's default
``--ddp-backend pytorch_ddp`` and no distributed flag (the ranks meet over gloo without being told): ``torchrun --nproc-per-node 2
fairseq-train`` for every method, ``torchrun --nnodes 2`` as two launches on one host, and
``scripts/slurm_train.sbatch`` (its ``srun`` played by a script setting Slurm's variables); resumed on
the other world size (2 -> 1, 1 -> 2)."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_langshare import distributed_launch
from method_configs import METHODS, TRAIN
from test_hydra_and_distributed import free_port, outputs_of, updates_logged
from tiny_corpus import PKG_DIR, task_args, train

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]
LAUNCH_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK")
NOTICE = "find_unused_parameters on"


def clean_env(**extra):
    """This process's environment without a launcher's variables (the tests may run under one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in LAUNCH_VARIABLES}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def fairseq_train(corpus, method, save_dir, *extra):
    """fairseq-train of a method's tiny model for 4 updates (TRAIN), on the CPU: the flag a user adds to
    run on the CPU, nothing about DDP or the backend."""
    return [str(BIN / "fairseq-train"), *task_args(corpus), *TRAIN, *METHODS[method], "--cpu",
            "--save-dir", str(save_dir), "--disable-validation", *extra]


def launch(commands, tmp_path, envs=None):
    """Start the commands at once; every one must succeed. Returns their outputs."""
    envs = envs or [clean_env()] * len(commands)
    procs = [subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for cmd, env in zip(commands, envs)]
    outs = outputs_of(procs, timeout=600)
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-4000:]
    return outs


def records(output, key):
    """Values of ``key`` in the json log lines, in order."""
    found = []
    for line in output.splitlines():
        if "{" in line and f'"{key}"' in line:
            try:
                found.append(json.loads(line[line.index("{"):])[key])
            except ValueError:
                continue
    return found


def assert_two_ranks_trained(output, method, updates=4):
    """One training on two ranks (not two independent ones: fairseq logs its updates once, on rank 0)."""
    assert "distributed init (rank 1)" in output and "'distributed_world_size': 2" in output
    logged = updates_logged(output)
    assert max(logged) == updates and logged.count(updates) <= 2  # the update's line and the epoch's
    assert (NOTICE in output) == (method != "baseline")  # logged once, by rank 0
    assert output.count(NOTICE) <= 1


@pytest.mark.parametrize("method", ["baseline", "clsr", "lsl", "adapter", "multistack"])
def test_torchrun_one_node_trains_every_method_with_default_flags(corpus, tmp_path, method):
    out, = launch([[str(BIN / "torchrun"), "--nproc-per-node", "2", "--master-port", str(free_port()),
                    *fairseq_train(corpus, method, tmp_path / "ckpt")]], tmp_path)
    assert "torchrun: rank 1 of 2, device 1, env://" in out
    assert out.count("torchrun: no GPU, so the ranks meet over gloo") == 2  # each rank, before logging is split
    assert_two_ranks_trained(out, method)
    # a warning about the run, not the process, comes once (src-lang encoders of en, xx, yy; en-xx, en-yy trained)
    assert out.count("so 2 of the 3 encoders never train") == (method == "multistack")
    assert (tmp_path / "ckpt" / "checkpoint_last.pt").exists()


def test_torchrun_fairseq_hydra_train_with_the_launcher_overrides(corpus, tmp_path):
    """fairseq-hydra-train loads the plugin after fairseq read the launcher's variables: the overrides
    of distributed_launch.HYDRA_OVERRIDES say what torchrun knows."""
    out, = launch([[str(BIN / "torchrun"), "--nproc-per-node", "2", "--master-port", str(free_port()),
                    str(BIN / "fairseq-hydra-train"), "--config-dir", str(REPO / "configs"), "--config-name", "demo",
                    f"common.user_dir={PKG_DIR}", "common.log_format=json", "common.log_interval=1",
                    f"task.data={corpus['bin']}", "task.langs='en,xx,yy'", "task.lang_pairs='en-xx,en-yy'",
                    "model._name=lsl_transformer_tiny", "optimization.max_update=3", "dataset.max_tokens=500",
                    f"checkpoint.save_dir={tmp_path / 'ckpt'}", "common.cpu=true",
                    "distributed_training.distributed_backend=gloo",
                    *shlex.split(distributed_launch.HYDRA_OVERRIDES["torchrun"])]], tmp_path)
    assert_two_ranks_trained(out, "lsl", updates=3)


def test_a_hydra_rank_training_alone_is_refused_in_one_line_with_the_overrides_it_needs(corpus, tmp_path):
    """Was: the refusal came inside hydra's traceback, and its overrides left fairseq's NCCL in place, so
    following it on a CPU machine stopped every rank ("Distributed package doesn't have NCCL built in")."""
    env = clean_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2", RANK="1", LOCAL_RANK="1")
    proc = subprocess.run([str(BIN / "fairseq-hydra-train"), "--config-dir", str(REPO / "configs"), "--config-name",
                           "demo", f"common.user_dir={PKG_DIR}", f"task.data={corpus['bin']}", "task.langs='en,xx,yy'",
                           "task.lang_pairs='en-xx,en-yy'", "model._name=langshare_transformer_tiny",
                           "optimization.max_update=3", f"checkpoint.save_dir={tmp_path / 'ckpt'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    line, = [line for line in proc.stderr.splitlines() if "error:" in line]
    expected = distributed_launch.HYDRA_OVERRIDES["torchrun"] + " distributed_training.distributed_backend=gloo"
    assert line == ("fairseq-hydra-train: error: this process is rank 1 of the 2 torchrun started, but fairseq is "
                    "training it alone (fairseq-hydra-train reads the launcher's variables before it loads the "
                    f"plugin): add {expected} (docs/scale.md)")
    assert not list((tmp_path / "ckpt").iterdir())  # fairseq made it at start, nothing was trained into it


def test_torchrun_two_nodes_train_latent_depth_across_its_commit_and_one_process_resumes(corpus, tmp_path, caplog):
    """Commit at update 1 (a 32nd of 4, at least 1): the layers no language keeps are named once;
    then one process with --update-freq 2 resumes the committed model (2 -> 1), with the batch per update it
    trained with, so nothing warns of another (was: 'pass --update-freq 2 to keep it', read as 1)."""
    port, ckpt = free_port(), tmp_path / "ckpt"
    outs = launch([[str(BIN / "torchrun"), "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
                    "--master-addr", "127.0.0.1", "--master-port", str(port),
                    *fairseq_train(corpus, "latent_depth", ckpt)] for node in (0, 1)], tmp_path)
    assert "torchrun: rank 1 of 2, device 0, env://" in outs[1]  # the second node's one process
    assert_two_ranks_trained("".join(outs), "latent_depth")
    # which layers each language keeps after one update follows the signs of its first gradient (torch's random
    # numbers): the line is printed where some layer is kept by no trained language, once, on rank 0
    from fairseq import checkpoint_utils

    model = checkpoint_utils.load_model_ensemble_and_task([str(ckpt / "checkpoint_last.pt")])[0][0]
    unkept = model.decoder.layer_select.unkept_layers()
    warning = re.compile(r"latent depth committed at update 1: dec layers? [\d, ]+ \(of 4\) (?:are|is) kept by no "
                         r"language, so (?:they train|it trains) no more")
    assert [len(warning.findall(out)) for out in outs] == [1 if unkept else 0, 0], unkept
    assert records(outs[0], "stat_dec_committed")[-1] == "1"
    resumed = train(task_args(corpus) + TRAIN + METHODS["latent_depth"] + [
        "--cpu", "--save-dir", str(ckpt), "--update-freq", "2", "--max-update", "6", "--disable-validation"])
    assert not [r.getMessage() for r in caplog.records if "per update (" in r.getMessage()]
    steps = [r for r in resumed if "stat_dec_committed" in r]
    assert [int(float(r["num_updates"])) for r in steps] == [5, 6]
    assert all(float(r["stat_dec_committed"]) == 1 and float(r["stat_dec_kept"]) == 2 for r in steps)


FAKE_SRUN = """#!/bin/bash
# srun as Slurm runs a job step on one node: SLURM_NTASKS tasks, each with its own variables
while [[ $1 == -* ]]; do shift; done
pids=()
for ((task = 0; task < SLURM_NTASKS; task++)); do
    SLURM_PROCID=$task SLURM_LOCALID=$task SLURM_NODEID=0 SLURM_STEP_NODELIST=$SLURM_JOB_NODELIST "$@" \
        > "task$task.log" 2>&1 &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
"""


def test_the_slurm_script_resumes_a_one_process_adaptive_sparse_run_from_the_middle_of_its_epoch(corpus, tmp_path):
    """One process with --update-freq 2 trains to T-bar (2), 4 batches into its epoch of 5;
    scripts/slurm_train.sbatch (its srun played by a script that sets each task's variables, as Slurm does)
    resumes it on 2 tasks (1 -> 2), each after 2 of its own batches (was: fairseq's "Cannot resume training
    due to dataloader mismatch", the position 4 being past the 3 batches of a rank's half of the epoch)."""
    ckpt = tmp_path / "ckpt"
    train(task_args(corpus) + TRAIN + METHODS["adaptive_sparse"] + [
        "--cpu", "--save-dir", str(ckpt), "--update-freq", "2", "--max-update", "2", "--disable-validation"])
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text(FAKE_SRUN)
    (fake / "srun").chmod(0o755)
    job = dict(SLURM_JOB_ID="4242", SLURM_JOB_NODELIST="localhost", SLURM_NNODES="1", SLURM_NTASKS="2",
               SLURM_NTASKS_PER_NODE="2", SLURM_CPUS_PER_TASK="1", FAIRSEQ_TRAIN=str(BIN / "fairseq-train"),
               PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    launch([["bash", str(REPO / "scripts" / "slurm_train.sbatch"),
             *fairseq_train(corpus, "adaptive_sparse", ckpt, "--max-update", "5", "--distributed-port",
                            str(free_port()))[1:]]], tmp_path, [clean_env(**job)])
    outs = [(tmp_path / f"task{task}.log").read_text() for task in (0, 1)]
    assert "srun: rank 1 of 2, device 1, tcp://localhost:" in outs[1]
    assert "epoch 1 stopped after 4 of its batches on 1 process: each of the 2 processes resumes after 2 of its own" \
        in outs[0]
    assert_two_ranks_trained("".join(outs), "adaptive_sparse", updates=5)
    phases = records(outs[0], "stat_sparse_phase")
    assert [int(float(u)) for u in records(outs[0], "num_updates")[:len(phases)]] == [3, 4, 5]
    assert [float(p) for p in phases] == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("launcher", ["torchrun", "srun"])
def test_the_printed_hydra_overrides_resolve_with_the_installed_omegaconf(launcher, monkeypatch):
    """Was: always ${oc.env:...}, which omegaconf 2.0 (fairseq's pin, omegaconf<2.1) does not know: following the
    refusal's advice there stopped every rank ("interpolation key 'oc.env:WORLD_SIZE' not found")."""
    from omegaconf import OmegaConf

    for name, value in {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "SLURM_NTASKS": "2", "SLURM_PROCID": "1",
                        "SLURM_LOCALID": "1"}.items():
        monkeypatch.setenv(name, value)
    overrides = dict(item.split("=", 1) for item in shlex.split(distributed_launch.HYDRA_OVERRIDES[launcher]))
    cfg = OmegaConf.create({})
    for key, value in overrides.items():
        OmegaConf.update(cfg, key, value)
    dt = OmegaConf.to_container(cfg, resolve=True)["distributed_training"]
    assert (str(dt["distributed_world_size"]), str(dt["distributed_rank"]), str(dt["device_id"])) == ("2", "1", "1")
