"""Each process's place in a distributed job, read from what ``torchrun`` and Slurm's ``srun`` set.

fairseq 0.12 infers it in ``fairseq.distributed.utils.infer_init_method``, written for one GPU per
process with the GPU count standing in for the number of processes per node:

* ``torchrun --nproc-per-node 2 fairseq-train ... --cpu`` ran two independent single-process
  trainings writing one save directory: ``--distributed-world-size`` defaults to the GPU count (1
  without GPUs, or with one GPU per node) and a world size of 1 returns before torchrun's variables
  are read. With ``--distributed-world-size 2`` it divided by the GPU count (``ZeroDivisionError``
  on the CPU), and on GPUs it takes ``RANK % GPUs`` for the device instead of ``LOCAL_RANK``.
* Under ``srun`` with one task per GPU it asserts ``--distributed-world-size`` equals tasks per node
  times nodes (the user repeats what Slurm knows), needs ``--distributed-port``, and with one task
  per node counts GPUs (world size 0 on CPU nodes).

``install()`` puts ``infer_init_method`` below in fairseq's place, where ``call_main`` looks it up.
``fairseq-train`` loads the plugin (``--user-dir``) while parsing its arguments, before that;
``fairseq-hydra-train`` loads it inside its training function, after, so under a launcher it needs
the overrides of ``HYDRA_OVERRIDES``, and a training run that would go on alone in a process a
launcher started as one of several ranks is refused (``check_training_is_distributed``). With torchrun's variables (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``) and a world of more than one
process, each process is rank ``RANK`` of ``WORLD_SIZE`` on device ``LOCAL_RANK``, initialised from
the environment (``env://``), on any number of nodes, GPUs or CPUs. Under ``srun`` with one task per
process (more than one task, and either more than one per node or no GPU), it is rank
``SLURM_PROCID`` of ``SLURM_NTASKS`` on device ``SLURM_LOCALID`` (modulo the GPUs it sees, as for
``LOCAL_RANK``: a task that sees one GPU uses it), meeting at the first node of the
step on ``--distributed-port``, or without one on a port drawn from ``SLURM_JOB_ID`` (the same in
every task of a job). Everything else (an explicit ``--distributed-init-method``, one task per GPU
node that spawns a process per GPU, a single process, and the batch script itself, which Slurm runs with
``SLURM_PROCID`` 0 and the job's ``SLURM_NTASKS`` but without the step's node list that srun sets) is left to
fairseq. Ranks on machines without GPUs meet over gloo where fairseq's default backend, NCCL, would stop
each of them ("Distributed package doesn't have NCCL built in").
"""

import logging
import os
import random
import re
from typing import Dict, Mapping, Optional

import torch

from .fairseq_replacements import replace

__all__ = ["infer_init_method", "launcher_placement", "first_slurm_host", "check_training_is_distributed", "install"]

logger = logging.getLogger(__name__)

TORCHRUN_KEYS = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")


def first_slurm_host(nodelist: str) -> str:
    """The first host of a Slurm host list: ``node[03-05,09],gpu7`` -> ``node03``,
    ``rack[1-2]-n[01-04]`` -> ``rack1-n01`` (what ``scontrol show hostnames`` prints first)."""
    depth, end = 0, len(nodelist)
    for i, char in enumerate(nodelist):  # the first entry ends at a comma outside brackets
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            end = i
            break
    return re.sub(r"\[([^\]]*)\]", lambda m: re.split(r"[,-]", m.group(1))[0], nodelist[:end]).strip()


def slurm_port(job_id: Optional[str]) -> int:
    """A port every task of a job draws alike: fairseq's own rule for a single node (``SLURM_JOB_ID``
    seeds the draw), used when ``--distributed-port`` is not given."""
    return random.Random(int(job_id)).randint(10000, 60000) if job_id and job_id.isdigit() else 29500


def local_device(local_rank: int, gpus: int) -> int:
    """The GPU of the process with this local rank among the ``gpus`` it sees: a node's processes
    see all of its GPUs (device = local rank), or one each (``CUDA_VISIBLE_DEVICES`` per task:
    device 0)."""
    return local_rank % gpus if gpus > 0 else local_rank


def launcher_placement(env: Mapping[str, str], gpus: int, port: int) -> Optional[Dict]:
    """``{launcher, init_method, world_size, rank, device_id}`` of this process when a launcher
    started one process per rank (torchrun, or srun with one task per rank), else None."""
    if all(key in env for key in TORCHRUN_KEYS) and int(env["WORLD_SIZE"]) > 1:
        local = int(env.get("LOCAL_RANK", env["RANK"]))
        return {"launcher": "torchrun", "init_method": "env://", "world_size": int(env["WORLD_SIZE"]),
                "rank": int(env["RANK"]), "device_id": local_device(local, gpus)}
    # srun sets the step's node list in each task it starts; the batch script itself (sbatch's batch step, where
    # SLURM_PROCID is 0 and SLURM_NTASKS the job's) has only the job's: a process started there is no rank
    nodelist = env.get("SLURM_STEP_NODELIST")
    ntasks, nnodes = int(env.get("SLURM_NTASKS", "1") or 1), int(env.get("SLURM_NNODES", "1") or 1)
    if nodelist is None or "SLURM_PROCID" not in env or ntasks <= 1 or (ntasks <= nnodes and gpus > 0):
        return None  # one task per GPU node: fairseq spawns a process per GPU
    port = port if port > 0 else slurm_port(env.get("SLURM_JOB_ID"))
    return {"launcher": "srun", "init_method": f"tcp://{first_slurm_host(nodelist)}:{port}", "world_size": ntasks,
            "rank": int(env["SLURM_PROCID"]), "device_id": local_device(int(env.get("SLURM_LOCALID", "0") or 0), gpus)}


def infer_init_method(cfg, force_distributed=False):
    """fairseq's ``infer_init_method`` for ``cfg.distributed_training``, except that a process a
    launcher started as one rank of several takes its rank, world size and device from the launcher."""
    if cfg.distributed_init_method is not None or getattr(cfg, "tpu", False) \
            or getattr(cfg, "pipeline_model_parallel", False):
        return infer_init_method.fairseq(cfg, force_distributed)
    gpus = torch.cuda.device_count()
    found = launcher_placement(os.environ, gpus, int(cfg.distributed_port or 0))
    if found is None:
        return infer_init_method.fairseq(cfg, force_distributed)
    given = int(cfg.distributed_world_size)
    if given not in (max(1, gpus), found["world_size"]):  # not fairseq's default: the user asked for it
        raise ValueError(f"--distributed-world-size {given} but {found['launcher']} started {found['world_size']} "
                         "processes; drop --distributed-world-size (the launcher's count is used) or start as many "
                         "processes as it says")
    cfg.distributed_init_method = found["init_method"]
    cfg.distributed_world_size = found["world_size"]
    cfg.distributed_rank = found["rank"]
    cfg.device_id = found["device_id"]
    cfg.distributed_no_spawn = True  # the launcher started every process
    if gpus > 0:
        torch.cuda.set_device(found["device_id"])
    elif cfg.distributed_backend == "nccl":  # fairseq's default, and NCCL needs GPUs
        cfg.distributed_backend = "gloo"
        logger.info("%s: no GPU, so the ranks meet over gloo (--distributed-backend gloo)", found["launcher"])
    logger.info("%s: rank %d of %d, device %d, %s", found["launcher"], found["rank"], found["world_size"],
                found["device_id"], found["init_method"])


def _env(name: str) -> str:
    """An interpolation of environment variable ``name``: ``${oc.env:NAME}`` (omegaconf 2.1 on), ``${env:NAME}``
    under omegaconf 2.0, which fairseq's setup.py pins (``omegaconf<2.1``) and which knows no ``oc.env``."""
    import omegaconf

    from .torch_version import release

    return "${%s:%s}" % ("env" if release(omegaconf.__version__)[:2] < (2, 1) else "oc.env", name)


HYDRA_OVERRIDES = {
    "torchrun": ("distributed_training.distributed_init_method=env:// "
                 f"'distributed_training.distributed_world_size={_env('WORLD_SIZE')}' "
                 f"'distributed_training.distributed_rank={_env('RANK')}' "
                 f"'distributed_training.device_id={_env('LOCAL_RANK')}' distributed_training.distributed_no_spawn=true"),
    "srun": ("distributed_training.distributed_init_method=tcp://FIRST_NODE:PORT "
             f"'distributed_training.distributed_world_size={_env('SLURM_NTASKS')}' "
             f"'distributed_training.distributed_rank={_env('SLURM_PROCID')}' "
             f"'distributed_training.device_id={_env('SLURM_LOCALID')}' distributed_training.distributed_no_spawn=true"),
}


# without GPUs: the plugin, loaded after fairseq initialised the ranks, cannot replace NCCL by gloo as it does for fairseq-train
HYDRA_CPU_OVERRIDE = "distributed_training.distributed_backend=gloo"


def check_training_is_distributed() -> None:
    """A training run about to start in a process a launcher started as one rank of several must be
    distributed. It is not when the plugin loaded after fairseq decided (``fairseq-hydra-train``
    imports ``common.user_dir`` inside its training function): refuse in one line, with the hydra
    overrides that say what the launcher knows, rather than train alone into a shared save dir."""
    import torch.distributed as dist

    gpus = torch.cuda.device_count()
    found = launcher_placement(os.environ, gpus, 0)
    if found is None or (dist.is_available() and dist.is_initialized()):
        return
    overrides = HYDRA_OVERRIDES[found["launcher"]] + ("" if gpus else f" {HYDRA_CPU_OVERRIDE}")
    raise ValueError(f"this process is rank {found['rank']} of the {found['world_size']} {found['launcher']} started, "
                     "but fairseq is training it alone (fairseq-hydra-train reads the launcher's variables before it "
                     f"loads the plugin): add {overrides} (docs/scale.md)")


def install() -> None:
    """Put ``infer_init_method`` in fairseq's place."""
    from fairseq.distributed import utils as distributed_utils

    replace(distributed_utils, "infer_init_method", infer_init_method)
