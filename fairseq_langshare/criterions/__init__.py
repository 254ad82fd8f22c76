from . import langshare_label_smoothed_cross_entropy  # noqa: F401
