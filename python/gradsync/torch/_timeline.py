"""gs.start_timeline / gs.stop_timeline: Horovod's timeline of collectives, as a Chrome trace
(chrome://tracing, ui.perfetto.dev).

Between the two calls every collective this process queues (gs.*'s and the torch.distributed
backend's alike) is recorded with three times from the job's queue (python/csrc): when it was
queued, when the queue's thread started it and when it finished. Each becomes two events on its
operation's lane: QUEUE (waiting behind earlier collectives) and the operation itself, named by
Horovod's name= where the program gave one, with its dtype and element count. stop_timeline()
writes rank 0's events to file_path, as Horovod's coordinator does; the other ranks record and
write nothing (for every rank's engine lanes: gs.trace, docs/trace.md). Not collective.
"""

from __future__ import annotations

import json
import os
import threading

from . import _job
from ._errors import ConfigError

_lock = threading.Lock()
_path: str | None = None  # recording while set
_pending: list = []  # (kind, name, dtype, elements, native handle)


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Starts recording this process's collectives (a running timeline is written first).
    `mark_cycles` is Horovod's marking of its background loop's cycles: gradsync has no cycles
    (each collective runs as soon as the ones before it are done), so it marks nothing."""
    global _path
    if _path is not None:
        stop_timeline()
    directory = os.path.dirname(os.path.abspath(file_path))
    if not os.path.isdir(directory):
        raise ConfigError(f"start_timeline: {directory} is not a directory")
    with _lock:
        _pending.clear()
        _path = file_path


def stop_timeline() -> None:
    """Stops recording; rank 0 writes what finished since start_timeline() to its file."""
    global _path
    with _lock:
        path, records = _path, list(_pending)
        _path = None
        _pending.clear()
    if path is None or _job.rank() != 0:
        return
    events = []
    for kind, name, dtype, elements, native in records:
        queued, started, finished = native.times()
        if not finished:
            continue  # still running at stop: not in this timeline
        args = {"dtype": dtype, "elements": elements}
        events.append({"name": "QUEUE", "cat": kind, "ph": "X", "ts": queued,
                       "dur": started - queued, "pid": 0, "tid": kind, "args": args})
        events.append({"name": name or kind, "cat": kind, "ph": "X", "ts": started,
                       "dur": finished - started, "pid": 0, "tid": kind, "args": args})
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
    os.replace(temporary, path)


def record(kind: str, name: str | None, tensor, native):
    """Notes a queued collective while a timeline records; returns `native` (its handle)."""
    if _path is not None:
        dtype = str(tensor.dtype).replace("torch.", "") if tensor is not None else ""
        elements = tensor.numel() if tensor is not None else 0
        with _lock:
            if _path is not None:
                _pending.append((kind, name, dtype, elements, native))
    return native
