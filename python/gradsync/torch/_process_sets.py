"""Horovod's process sets: collectives on some of the job's ranks.

``gs.add_process_set([0, 2])`` (called by every rank, in the same order on each, as Horovod
requires) returns a ProcessSet that any collective takes as ``process_set=``; its members run
the collective among themselves while the other ranks go on. Each set has an id of its own,
and its messages a tag of their own, so sets that share ranks never mix their messages.
``gs.init(process_sets=[...])`` adds sets at start-up, as Horovod's static process sets.
"""

from __future__ import annotations

from typing import Sequence

from . import _job, _ops
from ._errors import ConfigError

_SET_TAGS = 1 << 52  # Horovod's process sets; torch.distributed's groups have 2 << 52


class ProcessSet:
    """Some of the job's ranks (sorted), for collectives among them; global_process_set is the
    whole job."""

    def __init__(self, ranks: Sequence[int] = ()):
        self.ranks = sorted(int(r) for r in ranks)
        if len(set(self.ranks)) != len(self.ranks):
            raise ConfigError(f"a process set names a rank twice: {list(ranks)}")
        self.process_set_id: int | None = None
        self._group: _ops.Group | None = None

    def _register(self, set_id: int) -> None:
        self.process_set_id = set_id
        if set_id == 0:
            self._group = _ops.WHOLE_JOB
        else:
            if not self.ranks or self.ranks[0] < 0 or self.ranks[-1] >= _job.size():
                raise ConfigError(f"process set {self.ranks}: ranks must be 0 .. {_job.size() - 1}")
            self._group = _ops.Group(self.ranks, _SET_TAGS | set_id << 32)

    def group(self, what: str) -> _ops.Group:
        """The set's group for a collective `what`; ConfigError unless it was added and this
        rank is in it."""
        if self._group is None:
            raise ConfigError(f"{what}: process set {self.ranks} was not added: call "
                              "gs.add_process_set() on every rank first")
        if not self.included():
            raise ConfigError(f"{what}: rank {_job.rank()} is not in process set {self.ranks}")
        return self._group

    def included(self) -> bool:
        """Whether this rank belongs to the set."""
        return not self.ranks or _job.rank() in self.ranks

    def size(self) -> int:
        return len(self.ranks) if self.ranks else _job.size()

    def rank(self) -> int | None:
        """This rank's index in the set, None if it is not a member."""
        if not self.included():
            return None
        return self.ranks.index(_job.rank()) if self.ranks else _job.rank()

    def __repr__(self) -> str:
        ranks = "all" if not self.ranks else self.ranks
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={ranks})"


global_process_set = ProcessSet()
global_process_set._register(0)
_added: dict[int, ProcessSet] = {}
_next_id = 1


def add_process_set(process_set: ProcessSet | Sequence[int]) -> ProcessSet:
    """Adds a process set (a ProcessSet or a list of ranks) and returns it. Every rank must call
    it, in the same order as the others, members or not."""
    global _next_id
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ConfigError(f"{process_set} was added already")
    for existing in _added.values():
        if existing.ranks == process_set.ranks:
            raise ConfigError(f"a process set of ranks {process_set.ranks} exists already: "
                              f"{existing}")
    process_set._register(_next_id)
    _added[_next_id] = process_set
    _next_id += 1
    return process_set


def remove_process_set(process_set: ProcessSet) -> bool:
    """Removes a set added before (every rank, in the same order); False if it was not."""
    if process_set.process_set_id not in _added:
        return False
    del _added[process_set.process_set_id]
    process_set.process_set_id, process_set._group = None, None
    return True
