from . import gettext_corpus, language_families  # noqa: F401
