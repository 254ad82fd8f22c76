import os

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def requirements():
    """requirements.txt (ranges) plus the distribution that provides ``import fairseq``."""
    with open(os.path.join(HERE, "requirements.txt"), encoding="utf-8") as f:
        lines = [line.split("#")[0].strip() for line in f]
    return [line for line in lines if line] + [
        # fairseq 0.12.2 from a source checkout of main, installed first (kept); PyPI's 0.12.2 is refused at
        # import (fairseq_langshare/fairseq_build.py)
        'fairseq>=0.12.2; python_version < "3.11"',
        # fairseq 0.12 rebuilt for Python 3.11+ (0.12.2 does not import there); it installs the
        # same `fairseq` package: with fairseq from a source checkout, install with --no-deps
        've-fairseq>=0.12.3; python_version >= "3.11"',
    ]


setup(
    name="fairseq_langshare",
    version="0.1.0",
    description=(
        "fairseq plugin for multilingual NMT: learn per language what to share "
        "(CLSR, latent depth, adaptive sparse, language-specific layers)"
    ),
    packages=find_packages(include=["fairseq_langshare", "fairseq_langshare.*"]),
    python_requires=">=3.8",
    install_requires=requirements(),
    extras_require={
        "test": ["pytest", "pytest-xdist", "tensorboard"],  # tensorboard: the tests read the event files it writes
        "deploy": ["ctranslate2>=4"],
        # the off-target rate's language identifier, its model inside the wheel (docs/evaluation.md)
        "langid": ['py3langid>=0.4,<0.5; python_version >= "3.10"'],
        # langshare export --format transformers: MarianMTModel / M2M100 and a tokenizers tokenizer.json
        # (transformers 5 removed the translation pipeline; generate works in both)
        "transformers": ["transformers>=4.40,<6", "tokenizers>=0.19", "safetensors"],
    },
    entry_points={"console_scripts": ["langshare = fairseq_langshare.cli:main"]},
)
