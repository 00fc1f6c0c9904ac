"""Separate parameter-server ranks (servers=K: the job's last K ranks serve, the others train).

Every rank runs the same program; a server rank calls gs.serve(...) where the workers build their
gs.DistributedOptimizer, with the same model, optimizer settings and options: it serves the
parameters (rank 0 sends their values) with the optimizer's SGD learning rate and momentum until
every worker has stopped. Co-located servers (sync="asgd" ..., or parameter_servers=True, with
servers=0) need none of this: every rank trains and runs one server thread.
"""

from __future__ import annotations

from typing import Iterable

import torch

from gradsync import _C

from . import _job
from ._optimizer import _kind, _named, _sync_options


def is_server(servers: int) -> bool:
    """Whether this rank is one of the job's last `servers` ranks (a parameter server)."""
    options = _C.SyncOptions()
    options.servers = int(servers)
    return _C.is_server(_job.rank(), _job.size(), options)


def serve(optimizer: torch.optim.Optimizer,
          named_parameters: Iterable[tuple[str, torch.Tensor]] | None = None,
          schedule: str = "wfbp", compression: str = "none", sync: str = "ssgd",
          **options) -> None:
    """A server rank's life: serves until every worker stopped; re-raises a failure (a lost
    worker, named). Takes gs.DistributedOptimizer's arguments (servers=K among them)."""
    named = _named(optimizer, named_parameters)
    groups = [(list(g["params"]), {k: v for k, v in g.items() if k != "params"})
              for g in optimizer.param_groups]
    _C.serve(_job.job(), optimizer, _kind(optimizer), groups, named,
             _sync_options(schedule, compression, sync, 1, options))
