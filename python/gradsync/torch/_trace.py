"""gs.trace and gs.metrics: where a step's time and bytes go, from Python.

A trace is gradsync's Chrome-trace timeline of a window of steps (docs/trace.md): on each rank
the engine's communication lane (each unit's queueing and operation: allreduce, a compressor's
exchange, p3's slices, pushes), the training lane's steps and waits for parameters; save() joins
every rank's into one file that ui.perfetto.dev and chrome://tracing open.
"""

from __future__ import annotations

import json
import os

from . import _job
from ._collectives import allgather_object
from ._optimizer import DistributedOptimizer


class Trace:
    """The timeline a gs.trace() call records; save() it after the window's steps."""

    def __init__(self, optimizer: DistributedOptimizer, steps: str):
        self._optimizer = optimizer
        self.steps = steps

    def save(self, path: str) -> None:
        """Gathers every rank's events; rank 0 writes them to `path` as one Chrome trace (ranks
        on one host share a clock; across hosts each rank's times are its own). Collective."""
        mine = json.loads(self._optimizer._impl.trace_json())
        per_rank = allgather_object(mine)
        if _job.rank() != 0:
            return
        events = [event for events in per_rank for event in events]
        trace = {"traceEvents": events, "displayTimeUnit": "ms",
                 "otherData": {"ranks": len(per_rank), "steps": self.steps}}
        temporary = f"{path}.tmp-{os.getpid()}"
        with open(temporary, "w", encoding="utf-8") as f:
            json.dump(trace, f)
        os.replace(temporary, path)


def trace(optimizer: DistributedOptimizer, steps: str = "10:19") -> Trace:
    """Records `optimizer`'s communication in the window of steps `steps` ("A:B", "A:" or "A",
    counted from 0 as its step() calls); set it before the window starts."""
    optimizer._impl.set_trace(steps)
    optimizer._impl.trace_step(optimizer._steps)
    return Trace(optimizer, steps)


def metrics(optimizer: DistributedOptimizer | None = None) -> dict:
    """This process's place in the job and, for `optimizer` (default: the only live
    gs.DistributedOptimizer, if exactly one), what synchronizing cost so far (see
    DistributedOptimizer.metrics)."""
    result = {"rank": _job.rank(), "size": _job.size(), "local_rank": _job.local_rank(),
              "local_size": _job.local_size()}
    if optimizer is None:
        live = [c for c in list(_job._closables) if isinstance(c, DistributedOptimizer)]
        optimizer = live[0] if len(live) == 1 else None
    if optimizer is not None:
        result.update(optimizer.metrics())
    return result
