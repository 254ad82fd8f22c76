"""One way every analysis makes a figure: a matplotlib ``Figure`` on its own Agg canvas (no
pyplot state, no global backend switch, nothing to close), with matplotlib's font-search DEBUG
logging quieted. Save it with ``atomic_files.save_figure_atomic``."""

import logging

__all__ = ["new_figure"]


def new_figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    mpl_logger = logging.getLogger("matplotlib")
    if mpl_logger.getEffectiveLevel() < logging.INFO:  # its font search logs hundreds of DEBUG lines
        mpl_logger.setLevel(logging.INFO)
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig
