"""``langshare_label_smoothed_cross_entropy``: label-smoothed cross entropy plus every
auxiliary loss the model reports, in one backward pass.

The model reports ``{name: (value, weight)}`` for the batch (``model.auxiliary_outputs()``).
Cross entropy is summed over the ``sample_size`` target tokens (fairseq divides gradients by
``sample_size``), so each auxiliary term is added as ``weight * value * sample_size``: its
weight is relative to the per-token cross entropy, independent of the batch size. Each term
is logged unweighted as ``aux_<name>`` and each statistic as ``stat_<name>`` (sample-weighted
means over the batches and workers of an update).
"""

from dataclasses import dataclass, field

from fairseq import metrics, utils
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)

from ..modules.auxiliary import read_floats
from ..option_ranges import Range, check_ranges

AUX_PREFIX, STAT_PREFIX = "aux_", "stat_"


@dataclass
class LangshareCriterionConfig(LabelSmoothedCrossEntropyCriterionConfig):
    """fairseq's options, with their valid ranges."""

    label_smoothing: float = field(default=0.0, metadata={
        "help": "epsilon for label smoothing, 0 means no label smoothing",
        "range": Range(0, 1, high_open=True, why="the probability mass moved off the reference token")})
    ignore_prefix_size: int = field(default=0, metadata={
        "help": "Ignore first N tokens", "range": Range(0, why="target tokens left out of the loss")})


@register_criterion("langshare_label_smoothed_cross_entropy", dataclass=LangshareCriterionConfig)
class LangshareLabelSmoothedCrossEntropy(LabelSmoothedCrossEntropyCriterion):
    @classmethod
    def build_criterion(cls, cfg, task):
        check_ranges(cfg, LangshareCriterionConfig, "criterion")
        return super().build_criterion(cfg, task)

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        loss, nll_loss = self.compute_loss(model, net_output, sample, reduce=reduce)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll_loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        aux_losses, stats = model.auxiliary_outputs() if hasattr(model, "auxiliary_outputs") else ({}, {})
        logged = read_floats({name: value for name, (value, _) in aux_losses.items()})  # one device read
        for name, (value, weight) in aux_losses.items():
            if weight != 0:
                loss = loss + weight * value * sample_size
            logging_output[AUX_PREFIX + name] = logged[name] * sample_size
        for name, value in stats.items():
            logging_output[STAT_PREFIX + name] = float(value) * sample_size
        logging_output["loss"] = loss.data
        if self.report_accuracy:
            n_correct, total = self.compute_accuracy(model, net_output, sample)
            logging_output["n_correct"] = utils.item(n_correct.data)
            logging_output["total"] = utils.item(total.data)
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        keys = sorted({k for log in logging_outputs for k in log if k.startswith((AUX_PREFIX, STAT_PREFIX))})
        for key in keys:
            total = sum(log.get(key, 0) for log in logging_outputs)
            metrics.log_scalar(key, total / max(sample_size, 1), sample_size, round=4)
