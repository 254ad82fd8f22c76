"""Whether this process speaks for a distributed job: warnings about the run, not the process, come once."""

__all__ = ["first_rank"]


def first_rank() -> bool:
    """A single process, or rank 0 of a distributed one."""
    import torch.distributed as dist

    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0
