"""The collectives that Horovod's API (_collectives.py) and the torch.distributed backend
(_backend.py) share: any dtype, any reduction, on the whole job or a group of its ranks,
asynchronous. Each queues one operation on the job's thread (gradsync/_C, python/csrc/
collectives.cc) and returns a Handle; operations run in the order this process queued them.

float32 sums and averages take gradsync's ring; every other dtype and reduction moves the
tensors' bytes and reduces in the tensor's own dtype, exactly (no float32 detour). Tensors must
be on the CPU; a non-contiguous one is worked on as a contiguous copy, written back by wait().
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from gradsync import _C

from . import _job, _timeline
from ._errors import ConfigError

REDUCTIONS = ("sum", "average", "min", "max", "product", "band", "bor", "bxor")


class Group:
    """Some of the job's ranks, as the collectives see them: `ranks` (job ranks, in the group's
    rank order; empty for the whole job) and the tag that keeps its messages apart from every
    other group's."""

    def __init__(self, ranks: Sequence[int] = (), tag: int = 0):
        self.ranks = list(ranks)
        self.native = _C.Group(self.ranks, tag)

    def size(self) -> int:
        return len(self.ranks) if self.ranks else _job.size()

    def rank(self) -> int:
        """This process's rank in the group (ValueError if it is not a member)."""
        return self.ranks.index(_job.rank()) if self.ranks else _job.rank()

    def includes(self, job_rank: int) -> bool:
        return not self.ranks or job_rank in self.ranks


WHOLE_JOB = Group()


class Handle:
    """An asynchronous collective in flight: wait() returns its result (re-raising its error)."""

    def __init__(self, handle, result, finish: Callable[[], None] | None = None):
        self._handle, self._result, self._finish = handle, result, finish
        self._waited = False

    def done(self) -> bool:
        """Whether it completed (never blocks)."""
        return self._handle.done()

    def wait(self):
        """Blocks until it completed; returns the result."""
        if not self._waited:
            self._handle.wait()
            self._waited = True
            if self._finish is not None:
                self._finish()
        return self._result

    def then(self, transform: Callable) -> "Handle":
        """A Handle whose wait() returns transform(this handle's result)."""
        outer = Handle(self, None)

        def finish():
            outer._result = transform(self.wait())

        outer._finish = finish
        return outer


class Completed:
    """The native handle of an operation that completed before returning."""

    def wait(self) -> None:
        pass

    def done(self) -> bool:
        return True


def cpu(tensor, what: str) -> torch.Tensor:
    """`tensor`, checked to be a CPU tensor (ConfigError naming `what` otherwise)."""
    if not isinstance(tensor, torch.Tensor):
        raise ConfigError(f"{what}: expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise ConfigError(f"{what}: the tensor is on {tensor.device}; gradsync moves CPU tensors")
    return tensor.detach()


def _contiguous(tensor: torch.Tensor, what: str):
    """A contiguous tensor to work on and what copies it back into `tensor` (None if it is)."""
    t = cpu(tensor, what)
    if t.is_contiguous():
        return t, None
    work = t.contiguous()

    def write_back():
        with torch.no_grad():
            tensor.copy_(work)

    return work, write_back


def reduction(op: str, what: str = "allreduce") -> str:
    if op not in REDUCTIONS:
        raise ConfigError(f"{what}: unknown reduction {op!r} (one of {', '.join(REDUCTIONS)})")
    return op


def allreduce_(tensor: torch.Tensor, op: str = "average", group: Group = WHOLE_JOB,
               name: str | None = None) -> Handle:
    """Reduces `tensor` over the group's ranks, in place (op: one of REDUCTIONS). Every
    function here takes a `name` for the timeline (gs.start_timeline)."""
    reduction(op)
    work, write_back = _contiguous(tensor, "allreduce")
    if work.dtype == torch.float32 and op in ("sum", "average"):
        native = _C.allreduce_async(_job.job(), work, op == "average", group.native)
    else:
        native = _C.allreduce_any_async(_job.job(), work, op, group.native)
    return Handle(_timeline.record("allreduce", name, work, native), tensor, write_back)


def split_counts(count: int, size: int) -> list[int]:
    """`count` elements split over `size` ranks as evenly as possible, the first ranks taking
    one more where it does not divide (Horovod's reducescatter and alltoall split so)."""
    return [count // size + (1 if r < count % size else 0) for r in range(size)]


def _output(out: torch.Tensor | None, count: int, dtype: torch.dtype) -> torch.Tensor:
    """`out` (a contiguous tensor of `count` elements of `dtype`) flattened, or a new one."""
    if out is None:
        return torch.empty(count, dtype=dtype)
    if out.numel() != count or out.dtype != dtype or not out.is_contiguous():
        raise ConfigError(f"the output holds {out.numel()} {out.dtype} elements; the operation "
                          f"gives {count} {dtype} elements (contiguous)")
    return cpu(out, "output").view(-1)


def reducescatter(tensor: torch.Tensor, counts: Sequence[int], op: str = "average",
                  group: Group = WHOLE_JOB, out: torch.Tensor | None = None,
                  name: str | None = None) -> Handle:
    """Reduces every rank's `tensor` (flattened: block r of counts[r] elements for rank r) and
    returns this rank's block, in the dtype of `tensor`, as a flat tensor (or into `out`)."""
    reduction(op, "reducescatter")
    flat = cpu(tensor, "reducescatter").contiguous().view(-1)
    out = _output(out, counts[group.rank()], flat.dtype)
    native = _C.reducescatter_async(_job.job(), flat, out, list(counts), op, group.native)
    return Handle(_timeline.record("reducescatter", name, flat, native), out)


def allgatherv(tensor: torch.Tensor, counts: Sequence[int], group: Group = WHOLE_JOB,
               out: torch.Tensor | None = None, name: str | None = None) -> Handle:
    """Every rank's `tensor` (counts[r] elements from rank r, flattened), back to back in rank
    order, as one flat tensor (or into `out`)."""
    flat = cpu(tensor, "allgather").contiguous().view(-1)
    out = _output(out, sum(counts), flat.dtype)
    native = _C.allgatherv_async(_job.job(), flat, out, list(counts), group.native)
    return Handle(_timeline.record("allgather", name, out, native), out)


def alltoallv(tensor: torch.Tensor, send_counts: Sequence[int], recv_counts: Sequence[int],
              group: Group = WHOLE_JOB, out: torch.Tensor | None = None,
              name: str | None = None) -> Handle:
    """Block j of `tensor` (flattened, send_counts[j] elements) to rank j; returns the blocks
    received (recv_counts[i] elements from rank i), back to back as one flat tensor (or in
    `out`)."""
    flat = cpu(tensor, "alltoall").contiguous().view(-1)
    out = _output(out, sum(recv_counts), flat.dtype)
    native = _C.alltoallv_async(_job.job(), flat, list(send_counts), out, list(recv_counts),
                                group.native)
    return Handle(_timeline.record("alltoall", name, flat, native), out)


def broadcast_(tensor: torch.Tensor, root: int, group: Group = WHOLE_JOB,
               name: str | None = None) -> Handle:
    """Makes every rank's `tensor` the group rank `root`'s, in place (any dtype)."""
    if not 0 <= root < group.size():
        raise ConfigError(f"broadcast: root rank {root} is not in a group of {group.size()}")
    work, write_back = _contiguous(tensor, "broadcast")
    native = _C.broadcast_async(_job.job(), work, root, group.native)
    return Handle(_timeline.record("broadcast", name, work, native), tensor, write_back)


def barrier(group: Group = WHOLE_JOB) -> Handle:
    native = _C.barrier_async(_job.job(), group.native)
    return Handle(_timeline.record("barrier", None, None, native), None)


def allgather_object_bytes(data: bytes, group: Group = WHOLE_JOB) -> list[bytes]:
    """Every rank's `data`, in rank order (blocking)."""
    return _C.allgather_bytes(_job.job(), data, group.native)


def broadcast_object_bytes(data: bytes, root: int, group: Group = WHOLE_JOB) -> bytes:
    """The group rank `root`'s `data` (blocking)."""
    return _C.broadcast_bytes(_job.job(), data, root, group.native)
