from . import gettext_corpus  # noqa: F401
