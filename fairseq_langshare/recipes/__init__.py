"""The papers' recipes: data (``corpora``: ``langshare prepare-corpus``) and training and
evaluation (``experiments``: ``langshare recipe``)."""
