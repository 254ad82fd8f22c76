import pytest
import torch

from tiny_corpus import make_corpus


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
