"""The fairseq calls a benchmark is made of: parse a configuration, build its model, trainer and
generator, run one training step, decode one batch. ``benchmarks.harness`` times them in one
process; ``benchmarks.memory`` runs them in fresh processes to read peak memory.
"""

from typing import Optional


def parse_args(argv):
    """fairseq-train's parser over one configuration's full argument list."""
    from fairseq import options

    return options.parse_args_and_arch(options.get_training_parser(), list(argv))


def build_model(task, args, seed):
    """Model (same seed for every configuration) and its criterion."""
    from fairseq import utils

    utils.set_torch_seed(seed)
    model = task.build_model(args)
    return model, task.build_criterion(args)


def build_trainer(args, task, model, criterion):
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    return Trainer(convert_namespace_to_omegaconf(args), task, model, criterion)


def build_generator(task, model, beam, decode_len: Optional[int]):
    """fairseq's ``SequenceGenerator`` through the task. ``decode_len`` (tokens incl. EOS)
    forces every hypothesis to that length (min_len = max_len); None lets the model stop."""
    from fairseq.dataclass.configs import GenerationConfig

    if decode_len is None:
        cfg = GenerationConfig(beam=beam, max_len_a=1.2, max_len_b=10)
    else:
        steps = max(int(decode_len) - 1, 1)
        cfg = GenerationConfig(beam=beam, max_len_a=0, max_len_b=steps, min_len=steps)
    return task.build_generator([model], cfg)


def train_step(trainer, batch) -> float:
    """One real fairseq update (forward, backward, optimizer step); returns its loss."""
    out = trainer.train_step([batch])
    return float(out["loss"]) if out and "loss" in out else float("nan")


def decode_batch(task, generator, model, batch) -> int:
    """Beam search through ``task.inference_step``; returns the generated tokens (best
    hypothesis of each sentence, EOS included, as fairseq-generate counts them)."""
    hypos = task.inference_step(generator, [model], batch)
    return sum(len(h[0]["tokens"]) for h in hypos)
