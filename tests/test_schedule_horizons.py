"""A resumed run keeps its schedules' horizons (T-bar, the commit point, anneal lengths, CLSR's noise
ramp): their defaults derive from --max-update, and fairseq-train rebuilds the model from the command
line, so a resume with another --max-update must take them from the checkpoint (DESIGN.md: resuming
continues every schedule where it stopped)."""

import logging

import pytest

from fairseq_langshare.modules.clsr import ClsrUnit
from tiny_corpus import build_task_and_model


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    yield


def sparse_horizons(model):
    return {(s.t_bar, s.layer_t_bar) for s in model.scorers().values()}


def latent_horizons(model):
    return {(s.commit_updates, s.tau_anneal_updates, s.kl_anneal_updates) for s in model.selectors().values()}


def clsr_horizons(model):
    return {m.noise_ramp_updates for m in model.modules() if isinstance(m, ClsrUnit)}


METHODS = {
    "adaptive_sparse_transformer_tiny": (sparse_horizons, ["--sparse-types", "attn,ffn,layer"]),
    "latent_depth_transformer_tiny": (latent_horizons, ["--latent-layers", "both"]),
    "clsr_transformer_tiny": (clsr_horizons, []),
}


def build(corpus, arch, max_update, *flags):
    read, extra = METHODS[arch]
    _, model, args = build_task_and_model(corpus, arch=arch, extra=[*extra, "--max-update", str(max_update), *flags])
    return model, args


def resume(model, args, state):
    """What fairseq-train's trainer does with checkpoint_last.pt (``Trainer.load_checkpoint``)."""
    model.load_state_dict(state, strict=True, model_cfg=args)


@pytest.mark.parametrize("arch", sorted(METHODS))
def test_a_resume_with_another_max_update_keeps_the_runs_schedule(corpus, arch):
    read = METHODS[arch][0]
    first, _ = build(corpus, arch, 320)
    resumed, args = build(corpus, arch, 3200)
    assert read(resumed) != read(first)  # the defaults follow --max-update ...
    resume(resumed, args, first.state_dict())
    assert read(resumed) == read(first)  # ... but the run keeps the ones it started with
    again, args = build(corpus, arch, 6400)  # and saves them for the next resume
    resume(again, args, resumed.state_dict())
    assert read(again) == read(first)
    # a checkpoint saved before the horizons were: the command line's, as before
    old = {k: v for k, v in first.state_dict().items() if not k.endswith("schedule_horizons")}
    assert len(old) < len(first.state_dict())
    fresh, args = build(corpus, arch, 3200)
    resume(fresh, args, old)
    assert read(fresh) == read(build(corpus, arch, 3200)[0])


def test_an_option_given_on_resume_wins_with_a_warning_and_moves_only_its_own_horizon(corpus, caplog):
    arch = "adaptive_sparse_transformer_tiny"
    first, _ = build(corpus, arch, 320)
    assert sparse_horizons(first) == {(10, 40)}
    # --sparse-t-bar as the first run had it: the layers keep their own (derived) T-bar, no jump to 10
    resumed, args = build(corpus, arch, 640, "--sparse-t-bar", "10")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        resume(resumed, args, first.state_dict())
    assert sparse_horizons(resumed) == {(10, 40)} and not warnings_in(caplog)
    # another value: the command line's, and a warning that names the change and how to keep the run's
    resumed, args = build(corpus, arch, 640, "--sparse-t-bar", "20")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        resume(resumed, args, first.state_dict())
    assert sparse_horizons(resumed) == {(20, 40)}
    assert warnings_in(caplog) == ["--sparse-t-bar 20 replaces the checkpoint's 10: the schedule changes mid-run "
                                   "(drop --sparse-t-bar to continue the run's)"]  # once, not once per scorer


def warnings_in(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_run_option_reads_other_config_groups_under_every_omegaconf():
    """Was: OmegaConf.select(..., default=None), an argument omegaconf 2.0 (fairseq's pin, omegaconf<2.1) does not
    take: every model reading its run length under fairseq-hydra-train stopped with a TypeError."""
    from omegaconf import OmegaConf

    from fairseq_langshare.run_options import run_option

    cfg = OmegaConf.create({"model": {"dropout": 0.1}, "optimization": {"max_update": 400}})
    assert run_option(cfg.model, "max_update", "optimization") == 400
    assert run_option(cfg.model, "save_dir", "checkpoint", "checkpoints") == "checkpoints"
    assert run_option(cfg.model, "dropout", "model") == 0.1
