"""Decoding options of multilingual_langshare: --keep-inference-langtok, --decoder-langtok on a split
that mixes directions, and --lang-pairs read from a file."""

import io
from contextlib import redirect_stdout

import pytest
from fairseq import options, tasks
from fairseq_cli import generate as generate_cli

from tiny_corpus import build_task_and_model, task_args, train

TRAIN = ["--arch", "langshare_transformer_tiny", "--criterion", "langshare_label_smoothed_cross_entropy",
         "--optimizer", "adam", "--lr", "0.005", "--max-tokens", "1000", "--cpu", "--num-workers", "0", "--seed", "1",
         "--disable-validation", "--no-epoch-checkpoints", "--log-format", "json", "--max-update", "2"]
GEN = ["--gen-subset", "valid", "--beam", "2", "--max-len-b", "3", "--cpu", "--num-workers", "0",
       "--batch-size", "16"]


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def decoder_langtok_checkpoint(corpus, tmp_path_factory):
    """A 2-update model trained with --encoder-langtok tgt --decoder-langtok."""
    save = tmp_path_factory.mktemp("decoder-langtok")
    train(task_args(corpus) + ["--decoder-langtok", "--save-dir", str(save)] + TRAIN)
    return save / "checkpoint_last.pt"


def generate(corpus, checkpoint, *extra):
    """fairseq-generate in process: (T- line text, H- line text) of every sentence (sample ids repeat
    across the directions of a mixed split)."""
    argv = task_args(corpus) + ["--decoder-langtok", "--path", str(checkpoint), *GEN, *extra]
    out = io.StringIO()
    with redirect_stdout(out):
        generate_cli.main(options.parse_args_and_arch(options.get_generation_parser(), argv))
    lines = [line.split("\t")[-1] for line in out.getvalue().splitlines() if line.startswith(("T-", "H-"))]
    return list(zip(lines[::2], lines[1::2]))  # fairseq prints each sentence's T- line, then its H- line


def test_keep_inference_langtok_keeps_the_target_language_token(corpus, decoder_langtok_checkpoint):
    kept = generate(corpus, decoder_langtok_checkpoint, "-s", "en", "-t", "xx", "--keep-inference-langtok")
    stripped = generate(corpus, decoder_langtok_checkpoint, "-s", "en", "-t", "xx")
    assert len(kept) == len(stripped) == 20
    assert all(hyp.startswith("__xx__") for _, hyp in kept), kept
    assert not any("__xx__" in hyp for _, hyp in stripped)


@pytest.mark.parametrize("keep", [True, False], ids=["kept", "stripped"])
def test_mixed_split_with_decoder_langtok_decodes_every_sentence_into_its_language(corpus, decoder_langtok_checkpoint,
                                                                                   keep):
    """No -s/-t: the valid split holds en-xx and en-yy; each sentence is decoded with its own target
    language's token, which the H- line shows only with --keep-inference-langtok."""
    lines = generate(corpus, decoder_langtok_checkpoint, *(["--keep-inference-langtok"] if keep else []))
    assert len(lines) == 40
    langs = set()
    for ref, hyp in lines:
        lang = ref.split()[-1][-2:]  # reference words end in their language's code
        langs.add(lang)
        if keep:
            assert hyp.startswith(f"__{lang}__"), (ref, hyp)
        else:
            assert "__xx__" not in hyp and "__yy__" not in hyp, (ref, hyp)
    assert langs == {"xx", "yy"}


def test_mixed_batch_with_langtok_replacing_bos_eos_is_a_one_line_error(corpus):
    """fairseq's generator takes one bos token per batch: a batch with two target languages cannot
    start each sentence with its own."""
    task, model, _ = build_task_and_model(corpus, extra=["--decoder-langtok", "--lang-tok-replacing-bos-eos"])
    task.load_dataset("valid")
    ds = task.dataset("valid")
    batch = ds.collater([ds[i] for i in range(len(ds))])
    assert len(set(batch["tgt_lang_id"].tolist())) == 2
    gen = task.build_generator([model], options.parse_args_and_arch(options.get_generation_parser(), task_args(corpus)))
    with pytest.raises(ValueError, match=r"--lang-tok-replacing-bos-eos .* -s SRC -t TGT") as err:
        task.inference_step(gen, [model], batch)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("text", ["en-xx\nen-yy\n", "en-xx\n\nen-yy", "en-xx,\nen-yy\n", "en-xx,en-yy\n"],
                         ids=["lines", "blank-line", "commas-and-lines", "commas"])
def test_lang_pairs_file_gives_the_pairs_of_the_comma_form(corpus, tmp_path, text):
    path = tmp_path / "pairs.txt"
    path.write_text(text)

    def pairs(value):
        argv = task_args(corpus) + ["--arch", "langshare_transformer_tiny"]
        argv[argv.index("--lang-pairs") + 1] = value
        return tasks.setup_task(options.parse_args_and_arch(options.get_training_parser(), argv)).lang_pairs

    assert pairs(str(path)) == pairs("en-xx,en-yy") == ["en-xx", "en-yy"]
