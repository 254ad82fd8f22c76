"""fairseq_langshare: learn, per language, what to share in multilingual NMT.

Importing the package (or ``--user-dir fairseq_langshare``) registers the task
``multilingual_langshare``, the models and ``langshare_label_smoothed_cross_entropy``, and
allow-lists the classes fairseq checkpoints hold so they load with ``weights_only=True``; in
fairseq's console scripts the plugin's errors are then printed as one line (``user_errors``); a gloo
process group is destroyed before the interpreter exits (``distributed_exit``).
"""

from .interrupts import interrupted_while_starting

with interrupted_while_starting():  # the `langshare` command: a Ctrl-C while torch and fairseq load is one line
    from . import checkpoint_safety, distributed_exit, user_errors

    checkpoint_safety.install()
    user_errors.install()
    distributed_exit.install()

    from . import criterions, models, tasks  # noqa: E402,F401

__version__ = "0.1.0"
