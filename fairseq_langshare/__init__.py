"""fairseq_langshare: learn, per language, what to share in multilingual NMT.

Importing the package (or ``--user-dir fairseq_langshare``) checks that torch is recent enough
(``torch_version``) and that fairseq is no build it cannot run on (``fairseq_build``), registers the task
``multilingual_langshare``, the models and ``langshare_label_smoothed_cross_entropy``, and
allow-lists the classes fairseq checkpoints hold so they load with ``weights_only=True``; in
fairseq's console scripts the plugin's errors are then printed as one line (``user_errors``); a gloo
process group is destroyed before the interpreter exits (``distributed_exit``); ``torchrun`` and ``srun``
ranks find their place in the job (``distributed_launch``), and fairseq's data-parallel wrappers cope with
parameters a step leaves unused, on GPUs and CPUs (``data_parallel``).
"""

from .interrupts import interrupted_while_starting

with interrupted_while_starting():  # the `langshare` command: a Ctrl-C while torch and fairseq load is one line
    from . import torch_version, user_errors

    try:
        torch_version.require_torch()
    except torch_version.TorchTooOldError as error:
        user_errors.refuse_at_start(error)
    from . import fairseq_build

    try:
        fairseq_build.require_fairseq()
    except fairseq_build.UnsupportedFairseqError as error:
        user_errors.refuse_at_start(error)

    from . import checkpoint_safety, data_parallel, distributed_exit, distributed_launch

    checkpoint_safety.install()
    user_errors.install()
    distributed_exit.install()
    distributed_launch.install()
    data_parallel.install()

    from . import criterions, models, tasks  # noqa: E402,F401

__version__ = "0.1.0"
