"""Serving one language pair outside fairseq: ``langshare export --format ctranslate2|transformers``.

``export_command``: the ``langshare export`` subcommand (every format). ``pair_export``: the pair's
plain fairseq network and what a serving format needs beside it; ``export_dir``: the ``--out``
directory, built beside and renamed, never over the user's files. ``ctranslate2_export`` and
``transformers_export``: the two formats (optional extras ``deploy`` and ``transformers``).
``translate``: ``langshare translate DIR``, raw text through an exported CTranslate2 model.
``ctranslate2`` and ``transformers`` are imported only when one of them runs.
"""

from . import ctranslate2_export, export_command, export_dir, pair_export, transformers_export, translate  # noqa: F401
