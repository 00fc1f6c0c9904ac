"""Collectives over tensors and Python objects, Horovod's way: allreduce, allgather, broadcast
(each also in place where Horovod has it, and asynchronous with a handle), barrier, and the
broadcasts that make every rank start alike (parameters, optimizer state, any picklable object).

Every collective must be called by every rank in the same order. They run one after another on
the job's own thread (asynchronous ones too), in the order this process called them, over
gradsync's ring (gradsync/collectives.h), with the GIL released while they wait.
"""

from __future__ import annotations

import enum
import io
import pickle
from typing import Any, Iterable, Mapping

import torch

from gradsync import _C

from . import _job
from ._errors import ConfigError


class ReduceOp(enum.Enum):
    """What allreduce computes: the mean over the ranks (Average) or the sum (Sum)."""

    AVERAGE = "average"
    SUM = "sum"


Average = ReduceOp.AVERAGE
Sum = ReduceOp.SUM

_EXACT_INTEGERS = 1 << 24  # float32 holds every integer up to this exactly


def _op(op) -> bool:
    """True for Average; ConfigError listing the choices otherwise."""
    if op in (Average, "average"):
        return True
    if op in (Sum, "sum"):
        return False
    raise ConfigError(f"op {op!r} is not one of gs.Average, gs.Sum")


class Handle:
    """An asynchronous collective in flight: wait() returns its result (re-raising its error)."""

    def __init__(self, handle, result: torch.Tensor, finish=None):
        self._handle, self._result, self._finish = handle, result, finish
        self._waited = False

    def done(self) -> bool:
        """Whether it completed (never blocks)."""
        return self._handle.done()

    def wait(self) -> torch.Tensor:
        """Blocks until it completed; returns the result tensor."""
        if not self._waited:
            self._handle.wait()
            self._waited = True
            if self._finish is not None:
                self._finish()
        return self._result


class _Completed:
    """The handle of an operation that completed before returning (allgather's bytes path)."""

    def wait(self) -> None:
        pass

    def done(self) -> bool:
        return True


def synchronize(handle: Handle) -> torch.Tensor:
    """Waits for an asynchronous collective (Horovod's hvd.synchronize); returns its result."""
    return handle.wait()


def poll(handle: Handle) -> bool:
    """Whether an asynchronous collective completed (Horovod's hvd.poll)."""
    return handle.done()


def _float32_buffer(tensor: torch.Tensor, what: str) -> torch.Tensor:
    """A contiguous float32 CPU copy that a reduction can run on, exact for `tensor`'s values."""
    if not isinstance(tensor, torch.Tensor):
        raise ConfigError(f"{what}: expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise ConfigError(f"{what}: the tensor is on {tensor.device}; gradsync reduces CPU tensors")
    dtype = tensor.dtype
    if dtype == torch.float64 or dtype.is_complex:
        raise ConfigError(f"{what}: {dtype} would lose precision in gradsync's float32 reduction; "
                          "convert it with .float() first")
    if not dtype.is_floating_point and dtype != torch.bool:
        largest = tensor.abs().max().item() if tensor.numel() else 0
        if largest * _job.size() >= _EXACT_INTEGERS:
            raise ConfigError(f"{what}: integers up to {largest} summed over {_job.size()} ranks "
                              "may exceed float32's exact range (2^24)")
    return tensor.detach().to(torch.float32).contiguous().clone()


def allreduce_async_(tensor: torch.Tensor, op=Average) -> Handle:
    """Starts averaging (or summing) `tensor` over the ranks in place; returns a Handle."""
    average = _op(op)
    if tensor.dtype == torch.float32 and tensor.is_contiguous() and tensor.device.type == "cpu":
        return Handle(_C.allreduce_async(_job.job(), tensor.detach(), average), tensor)
    buffer = _float32_buffer(tensor, "allreduce")

    def finish():
        with torch.no_grad():
            values = buffer.round() if not tensor.dtype.is_floating_point else buffer
            tensor.copy_(values.to(tensor.dtype))

    return Handle(_C.allreduce_async(_job.job(), buffer, average), tensor, finish)


def allreduce_async(tensor: torch.Tensor, op=Average) -> Handle:
    """As allreduce_async_, into a new tensor (the input is left alone)."""
    return allreduce_async_(tensor.detach().clone(), op)


def allreduce_(tensor: torch.Tensor, op=Average) -> torch.Tensor:
    """Averages (or sums) `tensor` over the ranks, in place; returns it. float32 is reduced as it
    is; float16, bfloat16 and integers (up to 2^24 summed) through float32, exactly."""
    return allreduce_async_(tensor, op).wait()


def allreduce(tensor: torch.Tensor, op=Average) -> torch.Tensor:
    """The average (or sum) of `tensor` over the ranks, as a new tensor."""
    return allreduce_async(tensor, op).wait()


def _as_float_words(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """`tensor`'s bytes as a float32 vector (padded to 4 bytes): copies move them exactly."""
    raw = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
    padded = torch.zeros((raw.numel() + 3) // 4 * 4, dtype=torch.uint8)
    padded[: raw.numel()] = raw
    return padded.view(torch.float32), raw.numel()


def broadcast_async_(tensor: torch.Tensor, root_rank: int = 0) -> Handle:
    """Starts copying `root_rank`'s `tensor` into every rank's, in place (any dtype)."""
    if tensor.device.type != "cpu":
        raise ConfigError(f"broadcast: the tensor is on {tensor.device}; gradsync moves CPU tensors")
    if tensor.dtype == torch.float32 and tensor.is_contiguous():
        return Handle(_C.broadcast_async(_job.job(), tensor.detach(), root_rank), tensor)
    words, count = _as_float_words(tensor)

    def finish():
        with torch.no_grad():
            tensor.copy_(words.view(torch.uint8)[:count].view(tensor.dtype).view(tensor.shape))

    return Handle(_C.broadcast_async(_job.job(), words, root_rank), tensor, finish)


def broadcast_async(tensor: torch.Tensor, root_rank: int = 0) -> Handle:
    """As broadcast_async_, into a new tensor."""
    return broadcast_async_(tensor.detach().clone(), root_rank)


def broadcast_(tensor: torch.Tensor, root_rank: int = 0) -> torch.Tensor:
    """Makes every rank's `tensor` `root_rank`'s, in place; returns it."""
    return broadcast_async_(tensor, root_rank).wait()


def broadcast(tensor: torch.Tensor, root_rank: int = 0) -> torch.Tensor:
    """`root_rank`'s `tensor` on every rank, as a new tensor."""
    return broadcast_async(tensor, root_rank).wait()


def allgather_async(tensor: torch.Tensor) -> Handle:
    """Starts gathering every rank's `tensor`, concatenated along the first dimension in rank
    order (Horovod's allgather). float32 tensors of one shape on every rank go through the ring;
    any other dtype or first dimension works too (as bytes)."""
    t = tensor.detach()
    if t.dim() == 0:
        t = t.reshape(1)
    if t.dtype == torch.float32 and t.device.type == "cpu":
        # Ranks must agree on the shape for the ring: check it with the sizes' allgather.
        shapes = allgather_object(tuple(t.shape))
        if all(s == shapes[0] for s in shapes):
            out = torch.empty((_job.size(),) + tuple(t.shape), dtype=torch.float32)
            handle = _C.allgather_async(_job.job(), t.contiguous(), out)
            return Handle(handle, out.view((-1,) + tuple(t.shape[1:])))
    return Handle(_Completed(), torch.cat(allgather_object(t.cpu()), dim=0))


def allgather(tensor: torch.Tensor) -> torch.Tensor:
    """Every rank's `tensor`, concatenated along the first dimension in rank order."""
    return allgather_async(tensor).wait()


def barrier() -> None:
    """Returns on each rank once every rank has entered it."""
    _C.barrier(_job.job())


def _dumps(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer, pickle_protocol=pickle.HIGHEST_PROTOCOL)
    return buffer.getvalue()


def _loads(data: bytes) -> Any:
    return torch.load(io.BytesIO(data))


def broadcast_object(obj: Any = None, root_rank: int = 0) -> Any:
    """`root_rank`'s `obj` (anything torch.save can pickle) on every rank."""
    mine = _dumps(obj) if _job.rank() == root_rank else b""
    return _loads(_C.broadcast_bytes(_job.job(), mine, root_rank))


def allgather_object(obj: Any) -> list:
    """Every rank's `obj`, in rank order."""
    return [_loads(b) for b in _C.allgather_bytes(_job.job(), _dumps(obj))]


def _named_tensors(params) -> list[tuple[str, torch.Tensor]]:
    if isinstance(params, Mapping):
        return list(params.items())
    items = list(params)
    if items and isinstance(items[0], torch.Tensor):
        return [(str(i), t) for i, t in enumerate(items)]
    return [(str(name), t) for name, t in items]


def broadcast_parameters(params: Mapping[str, torch.Tensor] | Iterable, root_rank: int = 0) -> None:
    """Makes every rank's tensors `root_rank`'s, in place: a state_dict (parameters and buffers,
    e.g. BatchNorm's statistics), named_parameters() or a list of tensors. Call it once before
    training so that every rank starts from the same model."""
    handles = [broadcast_async_(t.data if isinstance(t, torch.nn.Parameter) else t, root_rank)
               for _, t in _named_tensors(params) if isinstance(t, torch.Tensor)]
    for handle in handles:
        handle.wait()


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int = 0) -> None:
    """Makes every rank's optimizer state (SGD's momentum, Adam's moments, the groups' options)
    `root_rank`'s, e.g. after loading a checkpoint on rank 0 only. A gs.DistributedOptimizer's
    state includes its synchronization state (its state_dict(); collective)."""
    state = optimizer.state_dict()
    state = broadcast_object(state if _job.rank() == root_rank else None, root_rank)
    if _job.rank() != root_rank or _is_distributed(optimizer):
        optimizer.load_state_dict(state)


def _is_distributed(optimizer) -> bool:
    from ._optimizer import DistributedOptimizer  # the optimizer module imports this one

    return isinstance(optimizer, DistributedOptimizer)


def average_buffers(model: torch.nn.Module) -> None:
    """Averages the model's floating-point buffers (BatchNorm's running statistics) over the
    ranks, so that evaluating or saving sees one model (each rank normalises with its own batch
    statistics while training, as DDP does without SyncBatchNorm)."""
    handles = [allreduce_async_(b) for b in model.buffers()
               if b.dtype == torch.float32 and b.is_contiguous()]
    for handle in handles:
        handle.wait()
