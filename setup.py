from setuptools import find_packages, setup

setup(
    name="fairseq_langshare",
    version="0.1.0",
    description=(
        "fairseq plugin for multilingual NMT: learn per language what to share "
        "(CLSR, latent depth, adaptive sparse, language-specific layers)"
    ),
    packages=find_packages(include=["fairseq_langshare", "fairseq_langshare.*"]),
    python_requires=">=3.11,<3.12",
    install_requires=[
        # the CPU wheel on this machine kind; a bare `torch` pulls a multi-GB CUDA build
        "torch==2.13.0",
        # fairseq 0.12.x built for cp311 (the official 0.12.2 does not import on 3.11)
        "ve-fairseq==0.12.3",
        "numpy",
        "sentencepiece",
        "sacrebleu>=2.0",
        "hydra-core>=1.0.7",
        "omegaconf",
        "matplotlib",
        "tqdm",
    ],
    extras_require={"test": ["pytest"], "deploy": ["ctranslate2>=4"]},
    entry_points={"console_scripts": ["langshare = fairseq_langshare.cli:main"]},
)
