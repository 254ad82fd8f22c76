"""Serving one language pair with CTranslate2 (the optional ``deploy`` extra).

``ctranslate2_export``: ``langshare export --format ctranslate2``, the pair's sub-network converted
by CTranslate2's own fairseq converter, with its SentencePiece model and ``langshare.json``.
``translate``: ``langshare translate DIR``, raw text in, detokenised translations out.
``ctranslate2`` is imported only when one of them runs.
"""

from . import ctranslate2_export, translate  # noqa: F401
