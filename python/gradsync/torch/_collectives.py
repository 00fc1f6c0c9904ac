"""Collectives over tensors and Python objects with Horovod's names, signatures and semantics:
allreduce (Average, Sum, Min, Max, Product, Adasum), allgather, broadcast, alltoall,
reducescatter, their grouped, in-place and asynchronous forms, barrier, and the broadcasts that
make every rank start alike (parameters, optimizer state, any picklable object). Each takes a
process_set= (gs.add_process_set) and Horovod's name= (accepted; collectives match by order).

Every collective must be called by every rank (of its process set) in the same order. They run
one after another on the job's own thread (asynchronous ones too), in the order this process
called them (_ops.py), with the GIL released while they wait.
"""

from __future__ import annotations

import enum
import io
import pickle
from typing import Any, Iterable, Mapping

import torch

from . import _compression, _job, _ops
from ._errors import ConfigError
from ._ops import Handle
from ._process_sets import global_process_set


class ReduceOp(enum.Enum):
    """What allreduce and reducescatter compute over the ranks (Horovod's hvd.Average ...)."""

    AVERAGE = "average"
    SUM = "sum"
    MIN = "min"
    MAX = "max"
    PRODUCT = "product"
    ADASUM = "adasum"


Average, Sum, Min, Max, Product, Adasum = (ReduceOp.AVERAGE, ReduceOp.SUM, ReduceOp.MIN,
                                           ReduceOp.MAX, ReduceOp.PRODUCT, ReduceOp.ADASUM)


def _op(op, average=None) -> str:
    """The reduction's name, from Horovod's op= (or its older average=); ConfigError listing
    the choices otherwise."""
    if isinstance(average, (ReduceOp, str)):  # gs.allreduce(t, gs.Sum): op in average's place
        op, average = average, None
    if average is not None:
        if op is not None:
            raise ConfigError("pass op= or average=, not both (average= is Horovod's older form)")
        return "average" if average else "sum"
    if op is None:
        return "average"
    if isinstance(op, ReduceOp):
        return op.value
    if op in [o.value for o in ReduceOp]:
        return op
    raise ConfigError(f"op {op!r} is not one of gs.Average, gs.Sum, gs.Min, gs.Max, gs.Product, "
                      "gs.Adasum")


def _set(process_set, what: str) -> _ops.Group:
    return (process_set or global_process_set).group(what)


def synchronize(handle: Handle):
    """Waits for an asynchronous collective (Horovod's hvd.synchronize); returns its result."""
    return handle.wait()


def poll(handle: Handle) -> bool:
    """Whether an asynchronous collective completed (Horovod's hvd.poll)."""
    return handle.done()


def _scaled(tensor: torch.Tensor, factor: float) -> torch.Tensor:
    if factor == 1.0:
        return tensor
    if not tensor.dtype.is_floating_point:
        raise ConfigError(f"a scale factor ({factor}) needs a floating-point tensor, not "
                          f"{tensor.dtype}")
    return tensor.mul_(factor)


def allreduce_async_(tensor: torch.Tensor, average=None, name: str | None = None, op=None,
                     prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                     process_set=None) -> Handle:
    """Starts reducing `tensor` over the ranks (of `process_set`) in place; returns a Handle.
    op: gs.Average (default), gs.Sum, gs.Min, gs.Max, gs.Product, gs.Adasum. Any dtype, reduced
    in that dtype exactly (float32 sums and averages take the ring); an average needs a
    floating-point tensor. `name` names it in the timeline (gs.start_timeline); collectives match
    by order, not by name."""
    reduction = _op(op, average)
    group = _set(process_set, "allreduce")
    _ops.cpu(tensor, "allreduce")
    if prescale_factor != 1.0:
        with torch.no_grad():
            _scaled(tensor, prescale_factor)
    if reduction == "adasum":
        return _adasum_(tensor, group, postscale_factor)
    handle = _ops.allreduce_(tensor, reduction, group, name=name)
    if postscale_factor == 1.0:
        return handle

    def scale():
        with torch.no_grad():
            _scaled(tensor, postscale_factor)

    return Handle(handle, tensor, scale)


def allreduce_async(tensor: torch.Tensor, average=None, name: str | None = None, op=None,
                    prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                    process_set=None) -> Handle:
    """As allreduce_async_, into a new tensor (the input is left alone)."""
    return allreduce_async_(tensor.detach().clone(), average, name, op, prescale_factor,
                            postscale_factor, process_set)


def allreduce_(tensor: torch.Tensor, average=None, name: str | None = None, op=None,
               prescale_factor: float = 1.0, postscale_factor: float = 1.0,
               process_set=None) -> torch.Tensor:
    """Reduces `tensor` over the ranks in place (see allreduce_async_); returns it."""
    return allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor,
                            process_set).wait()


def allreduce(tensor: torch.Tensor, average=None, name: str | None = None,
              compression=None, op=None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0, process_set=None) -> torch.Tensor:
    """The reduction of `tensor` over the ranks, as a new tensor. `compression`:
    gs.Compression.none or .fp16 (the tensor travels and is summed as float16, as Horovod's)."""
    codec = _compression.of(compression)
    sent, context = codec.compress(tensor.detach().clone())
    out = allreduce_async_(sent, average, name, op, prescale_factor, postscale_factor,
                           process_set).wait()
    return codec.decompress(out, context)


def grouped_allreduce_async_(tensors, average=None, name: str | None = None, op=None,
                             prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                             process_set=None) -> Handle:
    """Starts reducing every tensor of `tensors` in place, as one operation: one Handle, whose
    wait() returns the list."""
    handles = [allreduce_async_(t, average, name, op, prescale_factor, postscale_factor,
                                process_set) for t in tensors]
    return Handle(_ops.Completed(), list(tensors), lambda: [h.wait() for h in handles])


def grouped_allreduce_async(tensors, average=None, name: str | None = None, op=None,
                            prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            process_set=None) -> Handle:
    return grouped_allreduce_async_([t.detach().clone() for t in tensors], average, name, op,
                                    prescale_factor, postscale_factor, process_set)


def grouped_allreduce_(tensors, average=None, name: str | None = None, op=None,
                       prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                       process_set=None) -> list:
    return grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                    postscale_factor, process_set).wait()


def grouped_allreduce(tensors, average=None, name: str | None = None, compression=None,
                      op=None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set=None) -> list:
    """The reductions of every tensor of `tensors`, as new tensors (one list)."""
    return [allreduce(t, average, name, compression, op, prescale_factor, postscale_factor,
                      process_set) for t in tensors]


def _adasum_(tensor: torch.Tensor, group: _ops.Group, postscale: float) -> Handle:
    """Adasum (Maleki et al., 2021): the ranks' tensors combined pairwise in a binary tree,
    a + b scaled down along the direction they share: (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b.
    Gathers every rank's tensor and combines them here in one fixed order, so every rank gets
    the same bits (P x the tensor on the wire, not Horovod's 2x: docs/python.md)."""
    if not tensor.dtype.is_floating_point:
        raise ConfigError(f"Adasum needs a floating-point tensor, not {tensor.dtype}")
    size = group.size()
    gathered = _ops.allgatherv(tensor, [tensor.numel()] * size, group)

    def combine():
        parts = list(gathered.wait().double().view(size, -1))
        while len(parts) > 1:
            parts = [_adasum_pair(parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i]
                     for i in range(0, len(parts), 2)]
        with torch.no_grad():
            tensor.copy_(parts[0].view(tensor.shape) * postscale)

    return Handle(gathered, tensor, combine)


def _adasum_pair(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    dot, aa, bb = torch.dot(a, b), torch.dot(a, a), torch.dot(b, b)
    ca = 1 - dot / (2 * aa) if aa > 0 else 1.0
    cb = 1 - dot / (2 * bb) if bb > 0 else 1.0
    return ca * a + cb * b


def broadcast_async_(tensor: torch.Tensor, root_rank: int = 0, name: str | None = None,
                     process_set=None) -> Handle:
    """Starts copying `root_rank`'s `tensor` into every rank's, in place (any dtype). With a
    process set, `root_rank` is a job rank, as in Horovod."""
    group = _set(process_set, "broadcast")
    return _ops.broadcast_(tensor, _group_rank(group, root_rank), group, name=name)


def _group_rank(group: _ops.Group, job_rank: int) -> int:
    if group.ranks and job_rank not in group.ranks:
        raise ConfigError(f"root rank {job_rank} is not in the process set {group.ranks}")
    return group.ranks.index(job_rank) if group.ranks else job_rank


def broadcast_async(tensor: torch.Tensor, root_rank: int = 0, name: str | None = None,
                    process_set=None) -> Handle:
    """As broadcast_async_, into a new tensor."""
    return broadcast_async_(tensor.detach().clone(), root_rank, name, process_set)


def broadcast_(tensor: torch.Tensor, root_rank: int = 0, name: str | None = None,
               process_set=None) -> torch.Tensor:
    """Makes every rank's `tensor` `root_rank`'s, in place; returns it."""
    return broadcast_async_(tensor, root_rank, name, process_set).wait()


def broadcast(tensor: torch.Tensor, root_rank: int = 0, name: str | None = None,
              process_set=None) -> torch.Tensor:
    """`root_rank`'s `tensor` on every rank, as a new tensor."""
    return broadcast_async(tensor, root_rank, name, process_set).wait()


def allgather_async(tensor: torch.Tensor, name: str | None = None, process_set=None) -> Handle:
    """Starts gathering every rank's `tensor`, concatenated along the first dimension in rank
    order (Horovod's allgather): any dtype; the first dimension may differ between ranks, the
    others must not."""
    group = _set(process_set, "allgather")
    t = _ops.cpu(tensor, "allgather")
    if t.dim() == 0:
        t = t.reshape(1)
    shapes = allgather_object(tuple(t.shape), process_set=process_set)
    if any(s[1:] != shapes[0][1:] for s in shapes):
        raise ConfigError(f"allgather: the ranks' shapes differ beyond the first dimension: "
                          f"{[list(s) for s in shapes]}")
    counts = [int(torch.Size(s).numel()) for s in shapes]
    handle = _ops.allgatherv(t, counts, group, name=name)
    rows = sum(s[0] for s in shapes)
    return handle.then(lambda out: out.view((rows,) + tuple(t.shape[1:])))


def allgather(tensor: torch.Tensor, name: str | None = None, process_set=None) -> torch.Tensor:
    """Every rank's `tensor`, concatenated along the first dimension in rank order."""
    return allgather_async(tensor, name, process_set).wait()


def grouped_allgather(tensors, name: str | None = None, process_set=None) -> list:
    return [allgather(t, name, process_set) for t in tensors]


def alltoall_async(tensor: torch.Tensor, splits=None, name: str | None = None,
                   process_set=None) -> Handle:
    """Starts Horovod's alltoall: the first dimension of `tensor` split into consecutive pieces
    of `splits[j]` rows (default: equal pieces) for rank j; wait() returns the pieces received,
    in rank order, concatenated, and with `splits` given also how many rows came from each rank
    (Horovod's (output, received_splits))."""
    group = _set(process_set, "alltoall")
    t = _ops.cpu(tensor, "alltoall")
    if t.dim() == 0:
        raise ConfigError("alltoall needs a tensor of at least one dimension")
    size, rows = group.size(), t.shape[0]
    if splits is None:
        if rows % size:
            raise ConfigError(f"alltoall: {rows} rows do not split equally over {size} ranks: "
                              "pass splits=")
        sent = [rows // size] * size
    else:
        sent = [int(s) for s in torch.as_tensor(splits).reshape(-1).tolist()]
        if len(sent) != size or sum(sent) != rows or min(sent) < 0:
            raise ConfigError(f"alltoall: splits {sent} must be {size} counts adding up to the "
                              f"first dimension ({rows})")
    per_row = t[0].numel() if rows else int(torch.Size(t.shape[1:]).numel())
    received = _ops.alltoallv(torch.tensor(sent, dtype=torch.int64), [1] * size, [1] * size,
                              group).wait().tolist()
    handle = _ops.alltoallv(t, [s * per_row for s in sent], [r * per_row for r in received],
                            group, name=name)

    def shaped(out):
        out = out.view((sum(received),) + tuple(t.shape[1:]))
        return out if splits is None else (out, torch.tensor(received, dtype=torch.int32))

    return handle.then(shaped)


def alltoall(tensor: torch.Tensor, splits=None, name: str | None = None, process_set=None):
    """Horovod's alltoall (see alltoall_async)."""
    return alltoall_async(tensor, splits, name, process_set).wait()


def reducescatter_async(tensor: torch.Tensor, name: str | None = None, op=Average,
                        process_set=None, prescale_factor: float = 1.0,
                        postscale_factor: float = 1.0) -> Handle:
    """Starts Horovod's reducescatter: the reduction (gs.Average or gs.Sum, Min, Max, Product)
    of every rank's `tensor`, split along the first dimension, rank r keeping piece r (the
    first ranks one row more where it does not divide)."""
    reduction = _op(op)
    if reduction == "adasum":
        raise ConfigError("reducescatter does not take Adasum: use gs.Average or gs.Sum")
    group = _set(process_set, "reducescatter")
    t = _ops.cpu(tensor, "reducescatter")
    if t.dim() == 0:
        raise ConfigError("reducescatter needs a tensor of at least one dimension")
    t = t.clone() if prescale_factor != 1.0 else t
    with torch.no_grad():
        _scaled(t, prescale_factor)
    rows = _ops.split_counts(t.shape[0], group.size())
    per_row = t[0].numel() if t.shape[0] else 0
    handle = _ops.reducescatter(t, [r * per_row for r in rows], reduction, group, name=name)

    def shaped(out):
        with torch.no_grad():
            return _scaled(out.view((rows[group.rank()],) + tuple(t.shape[1:])), postscale_factor)

    return handle.then(shaped)


def reducescatter(tensor: torch.Tensor, name: str | None = None, compression=None, op=Average,
                  process_set=None, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0) -> torch.Tensor:
    """Horovod's reducescatter (see reducescatter_async); `compression` as allreduce's."""
    codec = _compression.of(compression)
    sent, context = codec.compress(tensor.detach())
    out = reducescatter_async(sent, name, op, process_set, prescale_factor,
                              postscale_factor).wait()
    return codec.decompress(out, context)


def grouped_reducescatter(tensors, name: str | None = None, compression=None, op=Average,
                          process_set=None, prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> list:
    return [reducescatter(t, name, compression, op, process_set, prescale_factor,
                          postscale_factor) for t in tensors]


def barrier(process_set=None) -> None:
    """Returns on each rank once every rank (of `process_set`) has entered it."""
    _ops.barrier(_set(process_set, "barrier")).wait()


def _dumps(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer, pickle_protocol=pickle.HIGHEST_PROTOCOL)
    return buffer.getvalue()


def _loads(data: bytes) -> Any:
    return torch.load(io.BytesIO(data))


def broadcast_object(obj: Any = None, root_rank: int = 0, name: str | None = None,
                     process_set=None) -> Any:
    """`root_rank`'s `obj` (anything torch.save can pickle) on every rank."""
    group = _set(process_set, "broadcast_object")
    mine = _dumps(obj) if _job.rank() == root_rank else b""
    return _loads(_ops.broadcast_object_bytes(mine, _group_rank(group, root_rank), group))


def allgather_object(obj: Any, name: str | None = None, process_set=None) -> list:
    """Every rank's `obj`, in rank order."""
    group = _set(process_set, "allgather_object")
    return [_loads(b) for b in _ops.allgather_object_bytes(_dumps(obj), group)]


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
