"""gradsync as a torch.distributed backend: ``import gradsync.torch`` registers "gradsync", and
``dist.init_process_group("gradsync")`` (env://, tcp://, torchrun, `gradsync launch`, mpirun)
runs every torch.distributed call, DistributedDataParallel's included, over gradsync's
transports: shared memory inside a host, TCP (or TLS) across, the emulated links.

The default group joins the gradsync job (gs.init) through torch's own store: rank 0 publishes
the address, port and secret that the others need. Every group (dist.new_group) is a group of
the job's ranks with a tag of its own. Collectives queue on the job's thread in the order this
process called them and complete futures in that order (one thread here sets them); send and
recv start at once, beside the queue. A lost rank fails every pending operation with a
PeerLostError naming it (a RuntimeError for torch's own C++ callers).
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import socket
import sys
import threading
import zlib

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup, Work, _create_work_from_future

from gradsync import _C

from . import _job, _ops
from ._errors import ConfigError

NAME = "gradsync"
_GROUP_TAGS = 2 << 52  # torch.distributed's groups; Horovod's process sets have 1 << 52
_P2P = 1 << 31  # point-to-point messages of a group: user tags below this

_REDUCTIONS = [(dist.ReduceOp.SUM, "sum"), (dist.ReduceOp.AVG, "average"),
               (dist.ReduceOp.MIN, "min"), (dist.ReduceOp.MAX, "max"),
               (dist.ReduceOp.PRODUCT, "product"), (dist.ReduceOp.BAND, "band"),
               (dist.ReduceOp.BOR, "bor"), (dist.ReduceOp.BXOR, "bxor")]


def _reduction(op) -> str:
    for torch_op, name in _REDUCTIONS:
        if op == torch_op:
            return name
    raise ConfigError(f"the gradsync backend has no {op} reduction (PREMUL_SUM: scale the "
                      "tensor first and use SUM)")


class _Completer:
    """Sets each queued operation's future once it ran: the operations run one after another on
    the job's thread, so waiting for them in the order they were queued never waits long.

    torch 1.13's C++ callers crash on a future that holds an error (DDP's reducer: a segfault),
    so a failed operation's future gets its result anyway, and the error is raised by the next
    call into the backend (_raise_if_failed): within the same backward pass when a later bucket
    follows, else at the next step."""

    def __init__(self):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, name="gradsync-futures", daemon=True).start()

    def future(self, handles: list, result, for_cpp: bool) -> torch.futures.Future:
        """A future completed with `result` once `handles` are done; with an error instead
        unless it is `for_cpp`."""
        future = torch.futures.Future()
        self._queue.put((handles, future, result, for_cpp))
        return future

    def _run(self) -> None:
        global _failure
        while True:
            handles, future, result, for_cpp = self._queue.get()
            try:
                for handle in handles:
                    handle.wait()
            except BaseException as error:  # noqa: BLE001 (raised again by the next call)
                _failure = _failure or error
                if not for_cpp:
                    future.set_exception(error)
                    continue
            future.set_result(result)


def _completed(handles: list, result, for_cpp: bool) -> torch.futures.Future:
    global _completer
    if _completer is None:
        _completer = _Completer()
    return _completer.future(handles, result, for_cpp)


_completer: _Completer | None = None
_failure: BaseException | None = None  # the first failure of an operation C++ waited for


def _raise_if_failed() -> None:
    if _failure is not None:
        raise _failure


class _PythonWork(Work):
    """The Work of a call from torch.distributed's Python functions: wait() re-raises the
    operation's error (torch's own future-wrapping Work would swallow it)."""

    def __init__(self, handles: list, result):
        super().__init__()
        self._handles, self._result, self._future = handles, result, None

    def wait(self, timeout=None) -> bool:
        for handle in self._handles:
            handle.wait()
        return True

    def is_completed(self) -> bool:
        return all(h.done() for h in self._handles)

    def is_success(self) -> bool:
        return self.is_completed()

    def result(self):
        return self._result

    def get_future(self):
        if self._future is None:
            self._future = _completed(self._handles, self._result, for_cpp=False)
        return self._future


def _work(handles: list, result) -> Work:
    """The Work of a queued operation: a Python one for torch.distributed's Python functions,
    which call its wait() from Python, else (DDP's reducer, parameter checks: C++, which could
    outlive a Python object) torch's own over a future."""
    _raise_if_failed()
    caller = sys._getframe(2).f_code.co_filename
    if caller.endswith(os.path.join("torch", "distributed", "distributed_c10d.py")):
        return _PythonWork(handles, result)
    return _create_work_from_future(_completed(handles, result, for_cpp=True))


class _PointToPoint(Work):
    """A send or receive in flight: wait() blocks until it is done."""

    def __init__(self, native, tensor: torch.Tensor, finish=None):
        super().__init__()
        self._native, self._tensor, self._finish = native, tensor, finish

    def wait(self, timeout=None) -> bool:
        self._native.wait()
        if self._finish is not None:
            self._finish()
            self._finish = None
        return True

    def is_completed(self) -> bool:
        return self._native.done()

    def is_success(self) -> bool:
        return self._native.done()


_in_flight: list = []  # sends and receives whose tensors the transport still uses


class ProcessGroupGradsync(ProcessGroup):
    """A torch.distributed process group over a group of the gradsync job's ranks."""

    def __init__(self, rank: int, size: int, group: _ops.Group):
        super().__init__(rank, size)
        self._group = group

    def getBackendName(self) -> str:
        return NAME

    # --- reductions
    def allreduce(self, tensors, opts=None):
        op = _reduction(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        return _work([_ops.allreduce_(t, op, self._group) for t in tensors], tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def reduce(self, tensors, opts):
        op, root = _reduction(opts.reduceOp), opts.rootRank
        sums = [t.detach().clone() for t in tensors]
        handles = [_ops.allreduce_(s, op, self._group) for s in sums]
        return _work([_ops.Handle(_Waits(handles), None, self._copier(root, sums, tensors))],
                     tensors)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        op = _reduction(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        output, inputs = outputs[0], input_lists[0]
        flat = torch.cat([t.detach().reshape(-1) for t in inputs])
        handle = _ops.reducescatter(flat, [t.numel() for t in inputs], op, self._group)
        return _work([_ops.Handle(handle, None, _into(output, handle))], outputs)

    def _reduce_scatter_base(self, output, input, opts=None):
        op = _reduction(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        counts = [output.numel()] * self.size()
        handle = _ops.reducescatter(input, counts, op, self._group, out=_in_place(output, input))
        return _work([_ops.Handle(handle, None, _into(output, handle))], [output])

    # --- data movement
    def broadcast(self, tensors, opts):
        return _work([_ops.broadcast_(t, opts.rootRank, self._group) for t in tensors], tensors)

    def allgather(self, output_lists, inputs, opts=None):
        outputs, tensor = output_lists[0], inputs[0]
        handle = _ops.allgatherv(tensor, [t.numel() for t in outputs], self._group)
        return _work([_ops.Handle(handle, None, _split_into(outputs, handle))], output_lists)

    def _allgather_base(self, output, input, opts=None):
        counts = [input.numel()] * self.size()
        handle = _ops.allgatherv(input, counts, self._group, out=_in_place(output, input))
        return _work([_ops.Handle(handle, None, _into(output, handle))], [output])

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        send = _element_counts(input, input_split_sizes, self.size())
        recv = _element_counts(output, output_split_sizes, self.size())
        handle = _ops.alltoallv(input, send, recv, self._group, out=_in_place(output, input))
        return _work([_ops.Handle(handle, None, _into(output, handle))], [output])

    def alltoall(self, outputs, inputs, opts=None):
        flat = torch.cat([t.detach().reshape(-1) for t in inputs])
        handle = _ops.alltoallv(flat, [t.numel() for t in inputs], [t.numel() for t in outputs],
                                self._group)
        return _work([_ops.Handle(handle, None, _split_into(outputs, handle))], outputs)

    def gather(self, output_lists, inputs, opts):
        # An all-to-all where every rank sends its tensor to the root alone.
        root, tensor, me = opts.rootRank, inputs[0], self.rank()
        outputs = output_lists[0] if me == root else []
        send = [tensor.numel() if r == root else 0 for r in range(self.size())]
        recv = [t.numel() for t in outputs] if me == root else [0] * self.size()
        handle = _ops.alltoallv(tensor, send, recv, self._group)
        finish = _split_into(outputs, handle) if me == root else None
        return _work([_ops.Handle(handle, None, finish)], output_lists)

    def scatter(self, outputs, input_lists, opts):
        # An all-to-all where the root alone sends, block j to rank j.
        root, output, me = opts.rootRank, outputs[0], self.rank()
        inputs = input_lists[0] if me == root else []
        send = [t.numel() for t in inputs] if me == root else [0] * self.size()
        recv = [output.numel() if r == root else 0 for r in range(self.size())]
        flat = torch.cat([t.detach().reshape(-1) for t in inputs]) if inputs else \
            torch.empty(0, dtype=output.dtype)
        handle = _ops.alltoallv(flat, send, recv, self._group)
        return _work([_ops.Handle(handle, None, _into(output, handle))], outputs)

    def barrier(self, opts=None):
        return _work([_ops.barrier(self._group)], [])

    # --- point to point
    def send(self, tensors, dst, tag):
        tensor = _ops.cpu(tensors[0], "send").contiguous()
        return self._point_to_point(_C.send, tensor, dst, tag, None)

    def recv(self, tensors, src, tag):
        target = _ops.cpu(tensors[0], "recv")
        buffer = target if target.is_contiguous() else torch.empty_like(target).contiguous()
        finish = None if buffer is target else (lambda: target.copy_(buffer))
        return self._point_to_point(_C.recv, buffer, src, tag, finish)

    def recv_anysource(self, tensors, tag):
        raise ConfigError("the gradsync backend receives from a named rank only: pass src=")

    def _point_to_point(self, start, tensor, peer, tag, finish):
        _raise_if_failed()
        if not 0 <= tag < _P2P:
            raise ConfigError(f"tag {tag}: the gradsync backend takes tags 0 .. {_P2P - 1}")
        group = _C.Group(self._group.ranks, self._group.native.tag | _P2P | tag)
        work = _PointToPoint(start(_job.job(), tensor, peer, group), tensor, finish)
        _in_flight[:] = [w for w in _in_flight if not w.is_completed()] + [work]
        return work

    def _copier(self, root, sums, tensors):
        def copy():
            if self.rank() == root:
                with torch.no_grad():
                    for s, t in zip(sums, tensors):
                        t.copy_(s)
        return copy


class _Waits:
    """Several native handles as one."""

    def __init__(self, handles):
        self._handles = handles

    def wait(self):
        for h in self._handles:
            h.wait()

    def done(self):
        return all(h.done() for h in self._handles)


def _in_place(output: torch.Tensor, input: torch.Tensor) -> torch.Tensor | None:
    """`output` flattened, for an operation to write into directly, where it can (contiguous,
    of the input's dtype); else None (a new tensor, which _into copies over)."""
    if output.is_contiguous() and output.dtype == input.dtype and output.device.type == "cpu":
        return output.detach().view(-1)
    return None


def _into(output: torch.Tensor, handle: _ops.Handle):
    """Copies the handle's flat result into `output` (its shape), on completion, unless the
    operation wrote there itself."""
    def copy():
        result = handle.wait()
        if result.data_ptr() != output.data_ptr() or output.numel() == 0:
            with torch.no_grad():
                output.copy_(result.view(output.shape))
    return copy


def _split_into(outputs, handle: _ops.Handle):
    """Copies the handle's flat result, piece by piece, into `outputs`."""
    def copy():
        result, at = handle.wait(), 0
        with torch.no_grad():
            for t in outputs:
                t.copy_(result[at:at + t.numel()].view(t.shape))
                at += t.numel()
    return copy


def _element_counts(tensor: torch.Tensor, splits, size: int) -> list[int]:
    """all_to_all_single's split sizes (rows of the first dimension; none: equal) in elements."""
    rows = tensor.shape[0] if tensor.dim() else 1
    per_row = tensor.numel() // rows if rows else 0
    if not splits:
        if rows % size:
            raise ConfigError(f"all_to_all_single: {rows} rows do not split equally over {size} "
                              "ranks: pass the split sizes")
        splits = [rows // size] * size
    return [s * per_row for s in splits]


def _group_tag(group_id) -> int:
    """A tag of the group's own, from torch's group name (a counter every rank keeps alike)."""
    name = str(group_id)
    number = int(name) if name.isdigit() else zlib.crc32(name.encode()) & 0xFFFFF
    return _GROUP_TAGS | (number % (1 << 20)) << 32


def _join_job(store, rank: int, size: int, timeout) -> None:
    """gs.init for the default group: rank 0 publishes, through torch's store, where gradsync's
    store listens and the job's secret; the others read them."""
    if rank == 0:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            port = int(os.environ.get("GRADSYNC_MASTER_PORT", 0)) or s.getsockname()[1]
        address = os.environ.get("MASTER_ADDR") or socket.gethostbyname(socket.gethostname())
        token = os.environ.get("GRADSYNC_JOB_TOKEN") or secrets.token_hex(16)
        store.set("gradsync/job", json.dumps({"address": address, "port": port, "token": token}))
    job = json.loads(store.get("gradsync/job"))
    seconds = None if "GRADSYNC_TIMEOUT" in os.environ else timeout.total_seconds()
    _job.init(rank=rank, size=size, master_addr=job["address"], master_port=job["port"],
              job_token=job["token"], timeout=seconds)


def _create(options, pg_options=None) -> ProcessGroupGradsync:
    """torch.distributed's constructor of a "gradsync" process group (extended API)."""
    ranks = list(options.global_ranks_in_group)
    rank, size = options.group_rank, options.group_size
    if not ranks:  # the default group: the whole job
        if _job.is_initialized():
            if (_job.rank(), _job.size()) != (rank, size):
                raise ConfigError(f"gs.init() made this rank {_job.rank()} of {_job.size()}; "
                                  f"init_process_group says {rank} of {size}")
        else:
            _join_job(options.store, rank, size, options.timeout)
    return ProcessGroupGradsync(rank, size, _ops.Group(ranks, _group_tag(options.group_id)))


def register() -> None:
    """Registers the backend with torch.distributed (once; import gradsync.torch does)."""
    if dist.is_available() and NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(NAME, _create, extended_api=True)
