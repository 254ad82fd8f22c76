"""A plain resume (checkpoint_last.pt of --save-dir) with a changed flag that defines what the weights mean: was
trained on with the weights reinterpreted (the flag's tensors keep their shapes: latent depth's language, an LSL
spec, CLSR's indexing language, an adapter placement, a sparse budget, a logit learning-rate scale), or refused
naming an --arch that did not change (the shapes did). Now refused in one line, before the state dict is loaded,
naming each changed flag with both values; what is meant to change on resume still does."""

import shutil

import pytest
import torch

from cli_checks import TRAIN, fairseq_error, snapshot
from method_configs import METHODS
from tiny_corpus import build_task_and_model, task_args, train

BASE = {
    "latent": ["--arch", "latent_depth_transformer_tiny"],
    "lsl": ["--arch", "lsl_transformer_tiny", "--lsl-encoder-layers", "TGT={1,3,4}"],
    "clsr": ["--arch", "clsr_transformer_tiny", "--clsr-encoder-lang", "tgt"],
    "adapter": ["--arch", "langshare_adapter_transformer_tiny"],
    "pair_adapter": ["--arch", "langshare_adapter_transformer_tiny", "--adapter-placement", "pair"],
    "sparse": ["--arch", "adaptive_sparse_transformer_tiny", "--sparse-t-bar", "1"],
}


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def runs(corpus, tmp_path_factory):
    """A 2-update run of each method (read only: a test that resumes one works on a copy)."""
    root = tmp_path_factory.mktemp("resume_flags")
    for method, flags in BASE.items():
        train(task_args(corpus) + TRAIN[2:] + flags + ["--max-update", "2", "--save-dir", str(root / method)])
    return root


def resume(corpus, runs, tmp_path, method, change, max_update=4, extra=()):
    save = tmp_path / method
    shutil.copytree(runs / method, save)
    argv = task_args(corpus) + TRAIN[2:] + BASE[method] + ["--max-update", str(max_update), "--save-dir", str(save)]
    for flag in change[::2]:  # replace the flag's value
        if flag in argv:
            del argv[argv.index(flag): argv.index(flag) + 2]
    return save, argv + list(change) + list(extra)


@pytest.mark.parametrize("method,change,was,now", [
    ("latent", ["--latent-decoder-lang", "src"], "--latent-decoder-lang tgt", "--latent-decoder-lang src"),
    ("lsl", ["--lsl-encoder-layers", "SRC={1} & TGT={3,4}"], "--lsl-encoder-layers 'TGT={1,3,4}'",
     "--lsl-encoder-layers 'SRC={1} & TGT={3,4}'"),
    ("clsr", ["--clsr-encoder-lang", "src"], "--clsr-encoder-lang tgt", "--clsr-encoder-lang src"),
    ("adapter", ["--adapter-placement", "enc-src-tgt"], "--adapter-placement enc-src",
     "--adapter-placement enc-src-tgt"),
    ("sparse", ["--sparse-decoder-keep-heads", "2"], "--sparse-decoder-keep-heads 0",
     "--sparse-decoder-keep-heads 2"),
    ("sparse", ["--sparse-logit-lr-scale", "1"], "--sparse-logit-lr-scale 30.0", "--sparse-logit-lr-scale 1.0"),
    # the checkpoint's slot map (pair_table.lookup) kept en-yy in xx-en's slot: xx-en had no adapter, the saved
    # config said it had
    ("pair_adapter", ["--lang-pairs", "en-xx", "--adapter-pairs", "en-xx,xx-en"], "--adapter-pairs en-xx,en-yy",
     "--adapter-pairs en-xx,xx-en"),
    # one more pair: was fairseq's 'Cannot load model parameters ... ensure that the architectures match'
    ("pair_adapter", ["--adapter-pairs", "en-xx,en-yy,xx-en"], "--adapter-pairs en-xx,en-yy",
     "--adapter-pairs en-xx,en-yy,xx-en"),
    # the shapes change too: was "holds a clsr_transformer_tiny model but this run builds clsr_transformer_tiny"
    ("clsr", ["--clsr-variant", "shared"], "--clsr-variant clsr", "--clsr-variant shared"),
    ("clsr", ["--clsr-lang-proj", "sublayer"], "--clsr-lang-proj stack", "--clsr-lang-proj sublayer"),
    ("sparse", ["--sparse-types", "attn"], "--sparse-types attn,ffn,layer", "--sparse-types attn"),
    ("latent", ["--latent-layers", "both"], "--latent-layers decoder", "--latent-layers both"),
    ("lsl", ["--lsl-component", "ffn"], "--lsl-component layer", "--lsl-component ffn"),
    ("lsl", ["--lsl-search", "--lsl-encoder-layers", ""], "--lsl-encoder-layers 'TGT={1,3,4}', no --lsl-search",
     "--lsl-encoder-layers '', --lsl-search"),
])
def test_a_resume_with_a_flag_that_defines_the_weights_changed_is_refused(corpus, runs, tmp_path, method, change,
                                                                           was, now):
    save, argv = resume(corpus, runs, tmp_path, method, change)
    before = snapshot(save)
    line = fairseq_error(train, argv)
    fix = "with " + was.replace(", no --lsl-search", " and without --lsl-search").replace(", ", " ")
    assert line == (f"fairseq-train: error: {save / 'checkpoint_last.pt'} was trained with {was}, this run has {now}: "
                    f"resume {fix}, as it was trained, or start a new run in another --save-dir"), line
    assert snapshot(save) == before


def test_a_resume_with_another_arch_names_the_arch(corpus, runs, tmp_path):
    save, argv = resume(corpus, runs, tmp_path, "adapter", ["--arch", "latent_depth_transformer_tiny"])
    line = fairseq_error(train, argv)
    assert line == (f"fairseq-train: error: {save / 'checkpoint_last.pt'} was trained with --arch "
                    "langshare_adapter_transformer_tiny, this run has --arch latent_depth_transformer_tiny: resume with "
                    "--arch langshare_adapter_transformer_tiny, as it was trained, or start a new run in another "
                    "--save-dir"), line


def test_what_may_change_on_resume_still_does(corpus, runs, tmp_path):
    """Regularizer weights and schedules (--clsr-budget-weight, --max-update); --restore-file of another run's
    checkpoint into a new --save-dir is fine-tuning, which may change the flags (the shapes must still fit)."""
    save, argv = resume(corpus, runs, tmp_path, "clsr", ["--clsr-budget-weight", "0.5"])
    train(argv)
    _, argv = resume(corpus, runs, tmp_path / "other", "latent", ["--latent-decoder-lang", "src"])
    new = tmp_path / "finetuned"
    argv[argv.index("--save-dir") + 1] = str(new)
    train(argv + ["--restore-file", str(runs / "latent" / "checkpoint_last.pt")])
    assert (new / "checkpoint_last.pt").is_file()


def test_restoring_another_runs_checkpoint_that_does_not_fit_still_names_both_archs(corpus, runs, tmp_path):
    """What remains for the shapes' check (``_misfit``): --restore-file of another run, which is not compared."""
    _, argv = resume(corpus, runs, tmp_path, "adapter", ["--arch", "latent_depth_transformer_tiny"])
    argv[argv.index("--save-dir") + 1] = str(tmp_path / "new")
    line = fairseq_error(train, argv + ["--restore-file", str(runs / "adapter" / "checkpoint_last.pt")])
    assert "the checkpoint holds a langshare_adapter_transformer_tiny model but this run builds " \
           "latent_depth_transformer_tiny (" in line, line


def test_every_listed_flag_is_an_option_of_its_model(runs):
    import dataclasses

    from fairseq.models import MODEL_REGISTRY

    from fairseq_langshare.resumed_flags import DEFINING_FLAGS, TRANSFORMER

    for name, flags in DEFINING_FLAGS.items():
        fields = {f.name for f in dataclasses.fields(MODEL_REGISTRY[name].config_class)}
        assert set(flags) <= fields, (name, set(flags) - fields)
    saved = vars(torch.load(runs / "adapter" / "checkpoint_last.pt", weights_only=True)["cfg"]["model"])
    assert set(TRANSFORMER) <= set(saved), set(TRANSFORMER) - set(saved)


def test_a_model_built_outside_fairseq_train_ignores_a_checkpoint_in_the_working_directory(corpus, runs, tmp_path,
                                                                                             monkeypatch):
    """A script, benchmark or notebook that builds a model (task.build_model, no --save-dir) in a directory holding
    fairseq's default checkpoints/checkpoint_last.pt of another run: was refused ('checkpoints/checkpoint_last.pt
    was trained with --arch ...'), although nothing resumes it."""
    from tiny_corpus import build_task_and_model

    shutil.copytree(runs / "adapter", tmp_path / "checkpoints")
    monkeypatch.chdir(tmp_path)
    _, model, _ = build_task_and_model(corpus, "latent_depth_transformer_tiny")
    assert type(model).__name__ == "LatentDepthTransformerModel"


def test_a_checkpoint_whose_saved_config_cannot_be_read_is_not_compared(corpus, runs, tmp_path, monkeypatch):
    """Was: every flag compared with its default, as if that were what the run was trained with ('was trained with
    --clsr-encoder-lang tgt'); fairseq's own load now says what is wrong with the file."""
    from tiny_corpus import build_task_and_model

    from fairseq_langshare import run_options

    save = tmp_path / "clsr"
    shutil.copytree(runs / "clsr", save)
    state = torch.load(save / "checkpoint_last.pt", weights_only=True)
    state["cfg"] = None
    torch.save(state, save / "checkpoint_last.pt")
    monkeypatch.setattr(run_options, "in_fairseq_training", lambda: True, raising=False)  # as under fairseq-train
    build_task_and_model(corpus, "clsr_transformer_tiny", extra=["--clsr-encoder-lang", "src", "--max-update", "4",
                                                                 "--save-dir", str(save)])


def _count_header_reads(monkeypatch):
    """The memory-mapped torch.loads (checkpoint_header) from now on, by path."""
    loads, real = [], torch.load

    def counting(f, *args, **kwargs):
        if kwargs.get("mmap"):
            loads.append(str(f))
        return real(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counting)
    return loads


def test_a_resumed_models_build_reads_the_checkpoint_header_once(corpus, runs, tmp_path, monkeypatch):
    """The checks as a resumed run builds its model (changed flags, the adapters' frozen base) each read the
    checkpoint's header: twice for an adapter model. Now once per
    process while the file stays the same (run_options.saved_checkpoint); a new save is read again."""
    from tiny_corpus import build_task_and_model

    from fairseq_langshare import run_options

    save = tmp_path / "adapter"
    shutil.copytree(runs / "adapter", save)
    monkeypatch.setattr(run_options, "in_fairseq_training", lambda: True)  # as under fairseq-train
    loads = _count_header_reads(monkeypatch)
    argv = BASE["adapter"][2:] + ["--max-update", "4", "--save-dir", str(save)]
    build_task_and_model(corpus, BASE["adapter"][1], extra=argv)
    assert loads == [str(save / "checkpoint_last.pt")]
    state = torch.load(save / "checkpoint_last.pt", weights_only=True)
    state["optimizer_history"][-1]["num_updates"] = 3
    torch.save(state, save / "checkpoint_last.pt")  # fairseq saved again
    build_task_and_model(corpus, BASE["adapter"][1], extra=argv)
    assert loads == [str(save / "checkpoint_last.pt")] * 2


def test_a_resume_reads_the_checkpoint_header_once(corpus, runs, tmp_path, monkeypatch):
    """A whole resume's start under fairseq-train: the header is read once (3 reads before)."""
    save, argv = resume(corpus, runs, tmp_path, "adapter", [])
    loads = _count_header_reads(monkeypatch)
    train(argv)
    assert loads == [str(save / "checkpoint_last.pt")]


@pytest.mark.parametrize("method", sorted(METHODS))
def test_the_saved_config_names_every_option_of_the_method(corpus, method):
    """fairseq-train saves the options the model was built from: each option the method adds to the
    Transformer is there, with its default where the command line did not give it, so a reader of the
    checkpoint (resume checks, export, analysis) sees the value it trained with. Was: an LSL checkpoint had no
    lsl_component, lsl_separate_decoder, lsl_search or lsl_dense_init (their flags have no default)."""
    import dataclasses

    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq_langshare.models.language_aware_transformer import TRANSFORMER_FIELDS

    flags, at = METHODS[method], METHODS[method].index("--arch")
    arch = flags[at + 1]
    _, _, args = build_task_and_model(corpus, arch=arch, extra=flags[:at] + flags[at + 2:] + ["--max-update", "4"])
    own = {f.name for f in dataclasses.fields(ARCH_MODEL_REGISTRY[arch].config_class)} - TRANSFORMER_FIELDS
    assert sorted(own - set(vars(args))) == []
