"""gradsync for PyTorch: ``import gradsync.torch as gs`` (docs/python.md documents every call).

Horovod's API over gradsync's engine, so that a Horovod script ports by renaming, and every
gradsync technique (P3, sharded updates, every compressor, parameter servers, the delayed and
local strategies) is one argument away::

    gs.init()
    model = Net()
    gs.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = gs.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                        named_parameters=model.named_parameters(),
                                        compression="powersgd:4")
    for x, y in batches:          # this rank's share of each batch
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

Or keep PyTorch's DistributedDataParallel and put gradsync underneath with gs.ddp_comm_hook.
"""

import torch  # noqa: F401  (loads LibTorch and its Python bindings before gradsync's extension)

from gradsync import _C

from ._errors import (ConfigError, DataError, GradsyncError, InternalError, PeerLostError,
                      ProtocolError, StateLostError, SystemCallError, TimeoutError)
from ._errors import CLASSES as _ERROR_CLASSES

_C._register_errors(_ERROR_CLASSES)

from ._job import (init, is_initialized, local_rank, local_size, rank, shrink,  # noqa: E402
                   shutdown, size)
from ._ops import Handle  # noqa: E402
from ._collectives import (Adasum, Average, Max, Min, Product, ReduceOp, Sum,  # noqa: E402
                           allgather, allgather_async, allgather_object, allreduce, allreduce_,
                           allreduce_async, allreduce_async_, alltoall, alltoall_async,
                           average_buffers, barrier, broadcast, broadcast_, broadcast_async,
                           broadcast_async_, broadcast_object, broadcast_optimizer_state,
                           broadcast_parameters, grouped_allgather, grouped_allreduce,
                           grouped_allreduce_, grouped_allreduce_async,
                           grouped_allreduce_async_, grouped_reducescatter, poll,
                           reducescatter, reducescatter_async, synchronize)
from ._compression import Compression, Compressor  # noqa: E402
from ._sync_batch_norm import SyncBatchNorm  # noqa: E402
from ._process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: E402
                            remove_process_set)
from ._horovod import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built,  # noqa: E402
                       gloo_built, gloo_enabled, is_homogeneous, join, mpi_built, mpi_enabled,
                       mpi_threads_supported, nccl_built, rocm_built)
from ._timeline import start_timeline, stop_timeline  # noqa: E402
from ._optimizer import DistributedOptimizer  # noqa: E402
from ._model import DistributedModel  # noqa: E402
from ._ddp import DdpHookState, ddp_comm_hook  # noqa: E402
from ._trace import Trace, metrics, trace  # noqa: E402
from ._server import serve, is_server  # noqa: E402
from . import _backend, elastic  # noqa: E402

_backend.register()  # torch.distributed.init_process_group("gradsync")

__all__ = [
    "init", "is_initialized", "shutdown", "shrink", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous",
    "DistributedOptimizer", "DistributedModel", "ddp_comm_hook", "DdpHookState",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce",
    "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_", "allgather",
    "allgather_async", "grouped_allgather", "broadcast", "broadcast_", "broadcast_async",
    "broadcast_async_", "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
    "grouped_reducescatter", "broadcast_object", "allgather_object", "barrier", "join",
    "synchronize", "poll", "Handle", "broadcast_parameters", "broadcast_optimizer_state",
    "average_buffers", "Average", "Sum", "Min", "Max", "Product", "Adasum", "ReduceOp",
    "Compression", "Compressor", "SyncBatchNorm", "ProcessSet", "add_process_set", "remove_process_set",
    "global_process_set", "mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built",
    "gloo_enabled", "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built",
    "start_timeline", "stop_timeline", "elastic", "metrics", "trace", "Trace", "serve", "is_server",
    "GradsyncError", "ConfigError", "PeerLostError", "TimeoutError", "StateLostError",
    "ProtocolError", "DataError", "SystemCallError", "InternalError",
]
