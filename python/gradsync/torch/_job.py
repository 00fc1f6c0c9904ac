"""Joining the job: gs.init, the process's place in it, gs.shutdown.

One job per process (as Horovod's hvd.init): init() reads the launcher's environment (`gradsync
launch`, torchrun, mpirun) through gradsync's C++ bootstrap, connects every rank to every other
and returns once all have called it.
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import socket
import sys
import threading
import weakref

import torch

from gradsync import _C

from ._errors import ConfigError, GradsyncError

_job = None  # the _C.Job of gs.init(), until gs.shutdown()
_session = None  # the _C.ElasticSession of an elastic job (its rounds give _job)
_watch = False  # whether the jobs are watched for Ctrl-C
_closables: "weakref.WeakSet" = weakref.WeakSet()  # what shutdown() closes before the job


def _parse_rate(rate) -> float:
    """Bytes per second of a link rate: a number (bytes/s) or "100mbit", "1gbit", "500kbit"."""
    if rate is None:
        return 0.0
    if isinstance(rate, (int, float)):
        return float(rate)
    match = re.fullmatch(r"\s*([0-9.]+)\s*([kmg]?)bit\s*", str(rate).lower())
    if not match:
        raise ConfigError(f"bandwidth {rate!r}: give bytes per second or e.g. '100mbit', '1gbit'")
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[match.group(2)]
    return float(match.group(1)) * scale / 8


def _parse_seconds(duration, what: str) -> float | None:
    """Seconds of a duration: a number (seconds) or "500ms", "2s", "1.5min"; None stays None."""
    if duration is None or isinstance(duration, (int, float)):
        seconds = duration
    else:
        match = re.fullmatch(r"\s*([0-9.]+)\s*(ms|s|min)?\s*", str(duration))
        if not match:
            raise ConfigError(f"{what} {duration!r}: give seconds or e.g. '500ms', '2s', '1min'")
        seconds = float(match.group(1)) * {"ms": 1e-3, "s": 1, None: 1, "min": 60}[match.group(2)]
    if seconds is not None and seconds < 0:
        raise ConfigError(f"{what} {duration!r} is negative (0 turns it off)")
    return seconds


def _port_beside_torch() -> int | None:
    """A port for gradsync's store when torch.distributed's holds MASTER_PORT already (its
    init_process_group came first): rank 0 picks a free one and tells the others through
    torch.distributed itself. None when gradsync's bootstrap decides (GRADSYNC_MASTER_PORT set,
    torch.distributed not initialized, or torchrun's agent store: MASTER_PORT + 1)."""
    dist = torch.distributed
    if "GRADSYNC_MASTER_PORT" in os.environ or not (dist.is_available() and dist.is_initialized()):
        return None
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") in ("True", "1"):
        return None
    chosen = [0]
    if dist.get_rank() == 0:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            chosen[0] = s.getsockname()[1]
    dist.broadcast_object_list(chosen, src=0)
    return chosen[0]


def init(*, rank: int | None = None, size: int | None = None, master_addr: str | None = None,
         master_port: int | None = None, timeout: str | float | None = None,
         job_token: str | None = None, process_sets=None, tls: bool = False,
         bandwidth=None, handle_ctrl_c: bool = True, keep_freed_memory: bool = True,
         elastic: str | None = None, hang_timeout: str | float | None = None) -> None:
    """Joins this process to its job; blocks until every rank has called it.

    The job comes from the arguments, else the launcher's environment: `gradsync launch` and
    torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), mpirun
    (OMPI_COMM_WORLD_*), else one process alone. A job of several needs GRADSYNC_JOB_TOKEN, the
    same secret in every process (`gradsync launch` sets one). gradsync's store listens on
    MASTER_PORT, or GRADSYNC_MASTER_PORT; where torch.distributed's store holds MASTER_PORT
    already: under torchrun's static rendezvous (its agent's store) on MASTER_PORT + 1, after
    init_process_group on a free port rank 0 picks and broadcasts through torch.distributed.
    `timeout` bounds every wait ("30s", "500ms" or seconds; GRADSYNC_TIMEOUT; default 60 s).
    `job_token` is the job's secret (default: GRADSYNC_JOB_TOKEN). `process_sets`: Horovod's
    static process sets (lists of ranks or gs.ProcessSet), added as gs.add_process_set does.
    `tls` encrypts every link; `bandwidth` ("100mbit", or bytes/s) emulates a slower link.
    With `handle_ctrl_c` (and Python's default SIGINT handler), Ctrl-C aborts the job's
    connections at once, so that no rank stays blocked in a collective: this rank raises
    KeyboardInterrupt, the others a PeerLostError naming it. With `keep_freed_memory`, glibc
    keeps freed memory in the process's heap (mallopt M_MMAP_THRESHOLD 32 MiB, M_TRIM_THRESHOLD
    512 MiB), as `gradsync train` does: by default it unmaps LibTorch's multi-MB activations when
    freed and faults them back in at every step, which halved CPU training throughput here
    (docs/performance.md). `elastic` ("MIN:MAX"; GRADSYNC_ELASTIC; under `gradsync launch
    --elastic` by default 1:N) makes the job elastic: it runs in rounds that hvd.elastic.run
    re-forms when a rank is lost or a worker comes in (elastic.py); in it, a worker that is
    alive but silent (stopped, frozen) for `hang_timeout` ("10s" by default;
    GRADSYNC_HANG_TIMEOUT; 0: off) is found by heartbeats and the round re-forms without it,
    whatever `timeout` is (docs/cluster.md, "Elastic workers"). Calling init() again does
    nothing.
    """
    global _job, _session, _watch
    if _job is not None:
        return
    if master_port is None:
        master_port = _port_beside_torch()
    _watch = (handle_ctrl_c and threading.current_thread() is threading.main_thread()
              and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    arguments = dict(rank=rank, size=size, master_addr=master_addr, master_port=master_port,
                     timeout=None if timeout is None else str(timeout), job_token=job_token,
                     tls=tls, bandwidth=_parse_rate(bandwidth),
                     keep_freed_memory=keep_freed_memory)
    elastic = _elastic_range(elastic)
    if elastic is None:
        _job = _C.init(watch_ctrl_c=_watch, **arguments)
    else:
        if process_sets:
            raise ConfigError("process sets do not combine with an elastic job: its ranks "
                              "change from round to round")
        given = "hang_timeout"
        if hang_timeout is None:
            hang_timeout, given = os.environ.get("GRADSYNC_HANG_TIMEOUT"), "GRADSYNC_HANG_TIMEOUT"
        _session = _C.elastic_session(
            range=elastic, hang_timeout_seconds=_parse_seconds(hang_timeout, given), **arguments)
        _job = _session.join(progress=-1, watch_ctrl_c=_watch)
        if _job is None:  # nothing left for this worker to do: it ends as the job did
            print(f"gradsync: {_session.name}: the elastic job finished before this worker "
                  "could join it", file=sys.stderr)
            raise SystemExit(0)
    atexit.register(shutdown)
    _joined()
    from . import _process_sets

    for process_set in process_sets or []:
        _process_sets.add_process_set(process_set)


def _elastic_range(given: str | None) -> str | None:
    """The elastic range to join with ("" for the default 1:N), or None: a fixed job."""
    if given is not None:
        return str(given)
    if "GRADSYNC_ELASTIC" in os.environ:
        return os.environ["GRADSYNC_ELASTIC"]
    return "" if os.environ.get("GRADSYNC_EXTERNAL_STORE") == "1" else None


def _joined() -> None:
    """What every rank does once it is in a job (collective)."""
    from . import _horovod  # it uses this module

    _horovod._hosts = None
    _horovod._host_names()  # every rank's host, for cross_rank (collective: here, once)


def session():
    """The _C.ElasticSession of an elastic job; ConfigError in a fixed one."""
    job()
    if _session is None:
        raise ConfigError("hvd.elastic needs an elastic job: run under `gradsync launch "
                          "--elastic`, or give gs.init(elastic='MIN:MAX') / GRADSYNC_ELASTIC")
    return _session


def next_round(progress: int, failure: str | None) -> bool:
    """Leaves the current round of the elastic job (aborting its connections with `failure`'s
    reason after a failure, so that every member learns at once) and joins the next one, holding
    a state of `progress` commits; rebuilds every DistributedOptimizer on it. False when the job
    finished before this worker got in again."""
    global _job
    elastic = session()
    current, _job = _job, None
    if failure is not None:
        current.abort(failure)
    current.close()
    _job = elastic.join(progress=progress, watch_ctrl_c=_watch)
    if _job is None:
        return False
    _joined()
    from ._optimizer import DistributedOptimizer  # it uses this module

    for closable in list(_closables):
        if isinstance(closable, DistributedOptimizer):
            closable._rebind()
    return True


def shrink(window: float = 2.0, min_size: int = 1) -> None:
    """Goes on without the lost ranks (ULFM's revoke and shrink; C++ gradsync::shrink): after a
    collective raised PeerLostError or TimeoutError, every survivor calls it. The old
    connections are aborted (ranks still inside a collective fail at once), the survivors agree
    through the job's store on who is left, and connect a job of their own: rank() and size()
    are then this process's among them (ranks in the order of the old ones), and every
    DistributedOptimizer works on it. The model's state is the program's to make equal again
    (gs.broadcast_parameters from rank 0). The group closes `window` seconds after this rank
    arrived, or at once when every rank did: a survivor arriving later is left out with
    PeerLostError (gradsync is then shut down in it). Raises PeerLostError when the store is
    gone (rank 0 served it and was lost; `gradsync launch --elastic` serves one that outlives
    any rank), ConfigError when fewer than `min_size` are left, or in an elastic job (it
    re-forms through hvd.elastic) or with process sets added (their ranks would be stale)."""
    global _job
    current = job()
    if _session is not None:
        raise ConfigError("gs.shrink is for a fixed job: an elastic one re-forms through "
                          "hvd.elastic.run")
    from . import _process_sets

    if _process_sets._added:
        raise ConfigError("gs.shrink with process sets added: remove them first "
                          "(gs.remove_process_set), then add them again among the survivors")
    _job = None
    _job = _C.shrink(current, window=float(window), min_size=int(min_size), watch_ctrl_c=_watch)
    _joined()
    from ._optimizer import DistributedOptimizer  # it uses this module

    for closable in list(_closables):
        if isinstance(closable, DistributedOptimizer):
            closable._rebind()


def job():
    """The _C.Job of gs.init(); ConfigError if init() was not called."""
    if _job is None:
        raise ConfigError("gradsync is not initialized: call gs.init() first")
    return _job


def register(closable) -> None:
    """Something shutdown() must close (its _close()) before the job goes."""
    _closables.add(closable)


def is_initialized() -> bool:
    return _job is not None


def rank() -> int:
    """This process's rank in the job, 0 .. size() - 1."""
    return job().rank


def size() -> int:
    """The number of processes in the job."""
    return job().size


def local_rank() -> int:
    """This process's index among the job's processes on its host."""
    return job().local_rank


def local_size() -> int:
    """The number of the job's processes on this host."""
    return job().local_size


def shutdown() -> None:
    """Leaves the job: closes every DistributedOptimizer and DDP hook state, waits for the
    other ranks (so that rank 0's store outlives their use of it), then closes the connections.
    Collective; runs by itself at exit. Calling it again does nothing."""
    global _job, _session
    if _job is None:
        return
    for closable in list(_closables):
        closable._close()
    current, _job = _job, None
    try:
        if current.size > 1 and not current.aborted:
            _C.barrier(current)
        if _session is not None and current.rank == 0 and not current.aborted:
            _session.finish()  # workers still waiting to come in stop waiting
    except GradsyncError:
        pass  # a rank already gone: nothing left to wait for
    finally:
        current.close()
        _session = None
