"""fairseq-train --tensorboard-logdir writes the criterion's auxiliary-loss and statistic curves
(``aux_*``, ``stat_*``) next to the loss, readable by TensorBoard."""

import pytest

from method_configs import METHODS, TRAIN
from tiny_corpus import task_args, train

pytestmark = pytest.mark.slow


def test_aux_and_stat_curves_reach_tensorboard(corpus, tmp_path, one_thread):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logdir = tmp_path / "tb"
    train(task_args(corpus) + TRAIN + METHODS["clsr"] + ["--cpu", "--save-dir", str(tmp_path / "ckpt"),
                                                         "--tensorboard-logdir", str(logdir)])
    events = EventAccumulator(str(logdir / "train_inner")).Reload()  # one point per --log-interval 1
    tags = set(events.Tags()["scalars"])
    assert {"loss", "aux_budget", "stat_gate_open", "stat_noise_alpha"} <= tags, tags
    budget = events.Scalars("aux_budget")
    assert [e.step for e in budget] == [1, 2, 3, 4] and all(0.0 <= e.value <= 1.0 for e in budget)
