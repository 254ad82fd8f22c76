from . import multilingual_langshare  # noqa: F401
