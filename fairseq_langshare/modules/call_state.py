"""State of the forward call in progress kept on a module: CLSR's gates, adaptive sparsity's
sampled scores, the records of auxiliary losses. Its tensors belong to that call's autograd graph,
which ``copy.deepcopy`` refuses (they are not graph leaves), and no copy of the module needs them:
a ``CallState`` is deep-copied as ``fresh()``, the state of a module no call has run through (a
model copied for EMA, averaging or as a test's reference then starts as one freshly built)."""

__all__ = ["CallState"]


class CallState(dict):
    """A dict of one forward call's state; ``fresh()`` (every key None) is what a copy gets."""

    def fresh(self) -> "CallState":
        return type(self)(dict.fromkeys(self))

    def __deepcopy__(self, memo):
        return self.fresh()
