"""``langshare translate DIR``: raw sentences in, detokenised translations out, with CTranslate2.

Each line is encoded with the export's SentencePiece model, given the language token(s) that
``langshare.json`` names (e.g. ``__fr__`` before the source for ``--encoder-langtok tgt``), decoded
in batches of similar length, and written back in input order; an empty line gives an empty line.

Decoding follows ``fairseq-generate``'s defaults so that both give the same translations
(docs/deploy.md): a hypothesis' score is its summed log-probability over its tokens *including*
EOS divided by that length to the power ``length_penalty`` (fairseq ``--lenpen``, score
normalised by ``(step + 1) ** len_penalty``; CTranslate2 divides by the hypothesis length, which
counts EOS only with ``return_end_token=True``), at most ``max_len_a * S + max_len_b`` tokens before
EOS with ``S`` the longest source of the batch including its language token and EOS (fairseq's
``max_len``, capped at ``max_target_positions - 1``), and at least one token before EOS
(``--min-len 1``).
"""

import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from tqdm import tqdm

from .ctranslate2_export import SPM_NAME, DeployError, read_manifest, require_ctranslate2
from .export_dir import changed_files, reexport_fix
from ..option_ranges import Range
from ..tasks.interactive_input import check_input_file, decodable
from ..user_errors import message

__all__ = ["PairTranslator", "check_export", "add_subcommand"]

EOS = "</s>"
PROGRESS_MIN_LINES = 1000  # a progress bar on stderr from this many input lines on


def detokenize(pieces: Iterable[str]) -> str:
    """fairseq's ``--post-process sentencepiece`` (what fairseq-generate prints and BLEU is scored on)."""
    from fairseq.data.data_utils import post_process

    return post_process(" ".join(pieces), "sentencepiece")


def check_export(model_dir) -> Dict:
    """The manifest of the CTranslate2 export ``model_dir``; a file it lists (or, in an export written before
    manifests listed files, ``model.bin`` or the SentencePiece model) that is missing is refused in one line."""
    manifest = read_manifest(model_dir)
    files = manifest.get("files") if isinstance(manifest.get("files"), list) else ["model.bin"]
    for name in [*files, manifest.get("spm_model", SPM_NAME)]:
        if not (Path(model_dir) / name).exists():
            raise DeployError(f"{Path(model_dir) / name} is missing: "
                              f"{reexport_fix(model_dir, 'ctranslate2', manifest)}")
    return manifest


class PairTranslator:
    """An exported pair loaded for decoding (``device`` cpu|cuda, ``threads`` per translation)."""

    def __init__(self, model_dir, device: str = "cpu", threads: int = 1, compute_type: str = "default"):
        import sentencepiece

        ctranslate2 = require_ctranslate2()
        self.model_dir = Path(model_dir)
        self.manifest = check_export(self.model_dir)
        self.source_prefix = list(self.manifest["source_prefix"])
        self.target_prefix = list(self.manifest["target_prefix"])
        self.max_positions = int(self.manifest.get("max_target_positions", 1024))
        spm = self.model_dir / self.manifest.get("spm_model", SPM_NAME)
        try:
            self.spm = sentencepiece.SentencePieceProcessor(model_file=str(spm))
        except (OSError, RuntimeError) as error:
            self._refuse_damaged(error)
            raise DeployError(f"{spm} is not a SentencePiece model ({message(error)}): "
                              f"{reexport_fix(self.model_dir, 'ctranslate2', self.manifest)}") from None
        if device == "cuda" and ctranslate2.get_cuda_device_count() == 0:
            raise DeployError("CTranslate2 sees no CUDA device here: use --device cpu")
        try:
            self.translator = ctranslate2.Translator(str(self.model_dir), device=device, compute_type=compute_type,
                                                     inter_threads=1, intra_threads=threads)
        except (ValueError, RuntimeError, IndexError) as error:  # e.g. a compute type this device cannot run;
            # IndexError: a variable the model lacks ("variable encoder/layer_0/... not found": a stack without layers)
            self._refuse_damaged(error)
            fix = ("re-export it with langshare export, which refuses what CTranslate2 cannot run and names what to "
                   "do instead" if isinstance(error, IndexError) else
                   "re-export it with another --quantization or use another --device")
            raise DeployError(f"CTranslate2 cannot load {self.model_dir} on {device} ({message(error)}): "
                              f"{fix}") from None

    def _refuse_damaged(self, error: Exception) -> None:
        """A file that failed to load and is not what the export wrote (its sha256 in the manifest) is damaged:
        say so, with the fix, rather than blame the settings."""
        damaged = changed_files(self.model_dir, self.manifest)
        if damaged:
            raise DeployError(f"{self.model_dir / damaged[0]} is damaged ({message(error)}; not the file langshare "
                              f"export wrote): delete it and "
                              f"{reexport_fix(self.model_dir, 'ctranslate2', self.manifest)}") from None

    def encode(self, line: str) -> List[str]:
        """Source tokens as the model reads them (CTranslate2 appends EOS itself), as fairseq-interactive
        makes them: the line stripped, SentencePiece's pieces split on whitespace (``Dictionary.encode_line``
        drops U+0085, which SentencePiece's NFKC keeps as a piece)."""
        return self.source_prefix + " ".join(self.spm.encode(line.strip(), out_type=str)).split()

    def max_decoding_length(self, batch: List[List[str]], max_len_a: float, max_len_b: int) -> int:
        longest = max(len(tokens) for tokens in batch) + 1  # + EOS, as fairseq's src_tokens hold it
        return min(int(max_len_a * longest + max_len_b), self.max_positions - 1)

    def decode(self, batch: List[List[str]], beam: int = 4, max_len_a: float = 0.0, max_len_b: int = 200,
               lenpen: float = 1.0) -> List[List[str]]:
        """Best hypothesis of each source (token lists) with EOS, without the target prefix."""
        prefix = self.target_prefix
        results = self.translator.translate_batch(
            batch, target_prefix=[prefix] * len(batch) if prefix else None, beam_size=beam,
            length_penalty=lenpen, return_end_token=True, min_decoding_length=1,
            max_decoding_length=self.max_decoding_length(batch, max_len_a, max_len_b),
            max_input_length=self.max_positions)
        return [r.hypotheses[0][len(prefix):] for r in results]

    def translate(self, lines: List[str], beam: int = 4, batch_size: int = 32, max_len_a: float = 0.0,
                  max_len_b: int = 200, lenpen: float = 1.0, progress: Optional[tqdm] = None) -> List[str]:
        """Translations of ``lines`` in their order: batches of similar source length."""
        out = [""] * len(lines)
        encoded = {i: self.encode(line) for i, line in enumerate(lines) if line.strip()}
        order = sorted(encoded, key=lambda i: (len(encoded[i]), i))
        for start in range(0, len(order), batch_size):
            ids = order[start:start + batch_size]
            for i, tokens in zip(ids, self.decode([encoded[i] for i in ids], beam, max_len_a, max_len_b, lenpen)):
                out[i] = detokenize(t for t in tokens if t != EOS)
            if progress is not None:
                progress.update(len(ids))
        if progress is not None:
            progress.update(len(lines) - len(encoded))
        return out


# --- CLI -------------------------------------------------------------------------------------

def split_lines(text: str) -> List[str]:
    """The lines of ``text`` ended by "\\n" only, a trailing "\\r" dropped: one translation per input line
    (``str.splitlines`` also splits on \\u2028, \\x0c, \\x1c-\\x1e, \\x85, shifting every later line)."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_input(path: Optional[str]) -> List[str]:
    """The lines to translate: an ``--input`` file that is not UTF-8 is refused (naming the line, the byte and the
    fix); on stdin, bytes that are not UTF-8 are replaced by U+FFFD with a warning naming the line, as
    ``fairseq-interactive`` does, so that every other line is still translated."""
    if path == "":  # --input "$FILE" with FILE unset: not stdin, where a terminal would wait
        raise ValueError("--input '' names no file: pass a text file, or - for stdin")
    if path and path != "-":
        check_input_file(path)
        with open(path, encoding="utf-8", newline="") as f:
            return split_lines(f.read())
    stdin = getattr(sys.stdin, "buffer", None)  # bytes: no newline translation of a lone "\r"
    text = stdin.read().decode(sys.stdin.encoding or "utf-8", "surrogateescape") if stdin is not None \
        else sys.stdin.read()
    return [decodable(line, number) for number, line in enumerate(split_lines(text), 1)]


def _run(args) -> int:
    if args.max_len_a == 0 and args.max_len_b == 0:
        raise ValueError("--max-len-a 0 with --max-len-b 0 leaves no target token: pass --max-len-b 1 or more "
                         "(fairseq-generate's default is 200)")
    require_ctranslate2()
    check_export(args.model_dir)  # before stdin is read: no CTranslate2 export, or an incomplete one, is refused
    lines = read_input(args.input)  # before the model loads: a bad --input file is refused at once
    translator = PairTranslator(args.model_dir, device=args.device, threads=args.threads)
    chunk = max(args.batch_size * 32, 1024)  # sorted by length within a chunk; output streams chunk by chunk
    bar = tqdm(total=len(lines), unit="sent", file=sys.stderr, desc="translating",
               disable=args.quiet or len(lines) < PROGRESS_MIN_LINES)
    with bar:
        for start in range(0, len(lines), chunk):
            for line in translator.translate(lines[start:start + chunk], beam=args.beam, batch_size=args.batch_size,
                                             max_len_a=args.max_len_a, max_len_b=args.max_len_b, lenpen=args.lenpen,
                                             progress=bar):
                sys.stdout.write(line + "\n")
            sys.stdout.flush()
    return 0


def add_subcommand(subparsers) -> None:
    parser = subparsers.add_parser(
        "translate",
        help="translate raw text with a pair exported by langshare export --format ctranslate2",
        description="Read raw sentences (one per line, from --input or stdin), apply the export's SentencePiece "
                    "model and language token, decode with CTranslate2 and write detokenised translations to stdout "
                    "in input order. Decoding settings follow fairseq-generate's (same flags, same defaults).",
    )
    parser.add_argument("model_dir", help="directory written by langshare export --format ctranslate2")
    parser.add_argument("--input", help="text file to translate (default, or -: stdin)")
    parser.add_argument("--beam", type=Range(1, why="hypotheses kept per step; 1 is greedy").of(int),
                        default=4, help="beam size; 1 is greedy (default %(default)s)")
    parser.add_argument("--batch-size", type=Range(1, why="sentences per batch").of(int),
                        default=32, help="sentences per batch (default %(default)s)")
    parser.add_argument("--threads", type=Range(1, why="CPU threads").of(int),
                        default=1, help="CPU threads per batch (default %(default)s)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="(default %(default)s)")
    parser.add_argument("--lenpen", type=Range(why="fairseq-generate's exponent").of(float), default=1.0,
                        help="length penalty as fairseq-generate's --lenpen (default %(default)s)")
    parser.add_argument("--max-len-a", type=Range(0, why="target tokens per source token").of(float), default=0.0,
                        help="at most a * source length + b target tokens, as fairseq-generate (default %(default)s)")
    parser.add_argument("--max-len-b", type=Range(0, why="target tokens").of(int),
                        default=200, help="see --max-len-a (default %(default)s)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    parser.set_defaults(func=_run)
