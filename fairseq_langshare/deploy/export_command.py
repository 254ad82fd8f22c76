"""The ``langshare export`` subcommand: one language pair's sub-network in the format asked for.

``--format fairseq`` (default) is ``export.export_pair``; ``ctranslate2`` and ``transformers``
start from the same pair network (``pair_export``) and convert it. Imports run one way: this
module imports ``export`` and the format modules, none of them imports this one, and the
optional libraries (CTranslate2, transformers) load only when their format runs.
"""

from ..export import ExportError, check_pair, export_pair

__all__ = ["add_subcommand"]

FORMATS = ("fairseq", "ctranslate2", "transformers")
_OPTIONS = {"quantization": ("ctranslate2",), "data": ("ctranslate2", "transformers"),
            "spm": ("ctranslate2", "transformers")}


def _run(args) -> int:
    for option, formats in _OPTIONS.items():
        if getattr(args, option) is not None and args.format not in formats:
            raise ExportError(f"--{option} applies to --format {' and '.join(formats)} only")
    check_pair(args.src, args.tgt)
    if args.format == "ctranslate2":
        from .ctranslate2_export import export_ctranslate2

        export_ctranslate2(args.checkpoint, args.src, args.tgt, args.out,
                           "float32" if args.quantization is None else args.quantization,
                           data=args.data, spm=args.spm)
    elif args.format == "transformers":
        from .transformers_export import export_transformers

        export_transformers(args.checkpoint, args.src, args.tgt, args.out, data=args.data, spm=args.spm)
    else:
        export_pair(args.checkpoint, args.src, args.tgt, args.out)
    return 0


def add_subcommand(subparsers) -> None:
    parser = subparsers.add_parser(
        "export",
        help="write one language pair's sub-network as a plain fairseq checkpoint, a CTranslate2 model or a "
             "Hugging Face transformers model",
        description="Write the weights one language pair uses as a plain fairseq `transformer` checkpoint that "
                    "fairseq-generate --task translation_multi_simple_epoch loads without --user-dir "
                    "(pass the same --langs, --lang-pairs SRC-TGT and langtok flags as for the full model, and "
                    "--required-batch-size-multiple 1, or fairseq 0.12 drops the last batch unless its size is a "
                    "multiple of 8; export prints the whole command). An adapter "
                    "model's pair is a langshare_adapter_single checkpoint instead, an adaptive sparse model with head "
                    "sparsity an adaptive_sparse_single one: load those with --user-dir. --format ctranslate2 and "
                    "--format transformers write a model directory with the pair's SentencePiece model and language "
                    "tokens (docs/deploy.md).",
    )
    parser.add_argument("checkpoint", help="a fairseq_langshare checkpoint (e.g. checkpoints/checkpoint_best.pt)")
    parser.add_argument("--src", required=True, help="source language code (one of the checkpoint's --langs)")
    parser.add_argument("--tgt", required=True, help="target language code (one of the checkpoint's --langs)")
    parser.add_argument("--out", required=True, help="output .pt path, or directory for --format ctranslate2 and "
                        "transformers (built under a temporary name, then renamed; an earlier export there is "
                        "replaced, a directory holding anything else is refused)")
    parser.add_argument("--format", choices=FORMATS, default="fairseq",
                        help="fairseq: a plain fairseq checkpoint (default); ctranslate2: a CTranslate2 model directory "
                             "for `langshare translate` (pip install 'fairseq_langshare[deploy]'); transformers: a "
                             "directory AutoModelForSeq2SeqLM and AutoTokenizer load (pip install "
                             "'fairseq_langshare[transformers]'); docs/deploy.md")
    parser.add_argument("--quantization", help="CTranslate2 weight type: float32 (default), int16 or int8")
    parser.add_argument("--data", help="ctranslate2, transformers: the fairseq-preprocess directory with the "
                                       "dictionaries (default: the one the model was trained on)")
    parser.add_argument("--spm", help="ctranslate2, transformers: the SentencePiece model (default: the corpus' "
                                      "spm.model)")
    parser.set_defaults(func=_run)
