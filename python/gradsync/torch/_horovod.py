"""The rest of Horovod's top-level API: where this process is among the hosts (cross_rank,
cross_size, is_homogeneous), what was built (mpi_built, nccl_built ...) and join, each with
Horovod's signature (the timeline: _timeline.py). Names that cannot mean what they mean in
Horovod raise an error that says what to use instead (docs/python.md's compatibility table).
"""

from __future__ import annotations

import socket

from . import _job
from ._collectives import allgather_object
from ._errors import ConfigError

_hosts: list[str] | None = None  # every rank's host name, by rank (gathered once)


def _host_names() -> list[str]:
    """Every rank's host, gathered at gs.init (collective there, so that no rank asks alone)."""
    global _hosts
    if _hosts is None:
        _hosts = allgather_object(socket.gethostname())
    return _hosts


def _distinct_hosts() -> list[str]:
    return list(dict.fromkeys(_host_names()))


def cross_size() -> int:
    """The number of hosts in the job."""
    return len(_distinct_hosts())


def cross_rank() -> int:
    """This process's host's index among the job's hosts (in order of their lowest rank)."""
    return _distinct_hosts().index(_host_names()[_job.rank()])


def is_homogeneous() -> bool:
    """Whether every host runs the same number of the job's processes."""
    names = _host_names()
    return len({names.count(h) for h in set(names)}) == 1


def mpi_built() -> bool:
    """False: gradsync.torch communicates over gradsync's own transports (shared memory, TCP,
    TLS), whichever launcher started it (mpirun included)."""
    return False


def mpi_enabled() -> bool:
    return False


def mpi_threads_supported() -> bool:
    return False


def gloo_built() -> bool:
    return False


def gloo_enabled() -> bool:
    return False


def nccl_built() -> int:
    """0: gradsync reduces CPU tensors."""
    return 0


def ddl_built() -> bool:
    return False


def ccl_built() -> bool:
    return False


def cuda_built() -> bool:
    return False


def rocm_built() -> bool:
    return False


def join(device: int = -1) -> int:
    """Horovod's hvd.join(): this rank is out of data; returns the rank that joined last (the one
    that took the most steps). With a gs.DistributedOptimizer built with join=True it takes part
    in the other ranks' remaining steps with zero gradients until every rank has joined. Without
    it (what a Horovod program passes: Horovod's coordinator counts the ranks with data for free,
    gradsync only with join=True, one small allreduce per step), no rank can step on after
    another joined, so it is the barrier that equal data needs: a rank still stepping waits for
    the joined one and fails after the timeout, naming it."""
    from ._optimizer import DistributedOptimizer

    live = [c for c in list(_job._closables) if isinstance(c, DistributedOptimizer)]
    if len(live) > 1:
        raise ConfigError(f"gs.join() needs at most one live gs.DistributedOptimizer (there are "
                          f"{len(live)}): it takes part in that one's steps")
    optimizer = live[0] if live else None
    if optimizer is not None and optimizer._arguments[1].join:
        optimizer.join()
    steps = allgather_object(optimizer._steps if optimizer is not None else 0)
    return max(range(len(steps)), key=lambda r: (steps[r], r))