import json
import shutil

import pytest
import torch

from tiny_corpus import make_corpus, task_args, train


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """Two O2M directions (en-xx, en-yy) plus an untrained xx-yy test direction (zero-shot)."""
    return make_corpus(tmp_path_factory.mktemp("corpus"), extra_test_pairs=("xx-yy",))


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run fastest on one thread, and the machine is shared."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def run(corpus, tmp_path_factory):
    """A 4-update run with --encoder-langtok tgt: update checkpoints after 2 and 4 updates, checkpoint_last.pt
    (read only: a test that changes it works on a copy)."""
    from cli_checks import TRAIN

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    save = tmp_path_factory.mktemp("faults") / "ckpt"
    try:
        train(task_args(corpus) + TRAIN + ["--max-update", "4", "--save-interval-updates", "2",
                                           "--save-dir", str(save)])
    finally:
        torch.set_num_threads(threads)
    return save


@pytest.fixture
def eval_corpus(corpus, tmp_path):
    """The tiny corpus laid out as `langshare evaluate` reads it (manifest.json, raw/, bin/), a private copy."""
    root = tmp_path / "corpus"
    shutil.copytree(corpus["bin"], root / "bin")
    shutil.copytree(corpus["raw"], root / "raw")
    (root / "manifest.json").write_text(json.dumps({"pivot": "en", "data_bin": "bin", "langs": corpus["langs"],
                                                    "train_pairs_per_language": {"xx": 300, "yy": 300}}))
    return root
