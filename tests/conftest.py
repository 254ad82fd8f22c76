import pytest

from tiny_corpus import make_corpus


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """Two O2M directions (en-xx, en-yy) plus an untrained xx-yy test direction (zero-shot)."""
    return make_corpus(tmp_path_factory.mktemp("corpus"), extra_test_pairs=("xx-yy",))
