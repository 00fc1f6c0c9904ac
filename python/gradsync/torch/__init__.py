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
                      ProtocolError, SystemCallError, TimeoutError)
from ._errors import CLASSES as _ERROR_CLASSES

_C._register_errors(_ERROR_CLASSES)

from ._job import (init, is_initialized, local_rank, local_size, rank, shutdown,  # noqa: E402
                   size)
from ._collectives import (Average, Handle, ReduceOp, Sum, allgather,  # noqa: E402
                           allgather_async, allgather_object, allreduce, allreduce_,
                           allreduce_async, allreduce_async_, average_buffers, barrier, broadcast,
                           broadcast_, broadcast_async, broadcast_async_, broadcast_object,
                           broadcast_optimizer_state, broadcast_parameters, poll, synchronize)
from ._optimizer import DistributedOptimizer  # noqa: E402
from ._model import DistributedModel  # noqa: E402
from ._ddp import DdpHookState, ddp_comm_hook  # noqa: E402
from ._trace import Trace, metrics, trace  # noqa: E402
from ._server import serve, is_server  # noqa: E402

__all__ = [
    "init", "is_initialized", "shutdown", "rank", "size", "local_rank", "local_size",
    "DistributedOptimizer", "DistributedModel", "ddp_comm_hook", "DdpHookState",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "allgather",
    "allgather_async", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "broadcast_object", "allgather_object", "barrier", "synchronize", "poll", "Handle",
    "broadcast_parameters", "broadcast_optimizer_state", "average_buffers",
    "Average", "Sum", "ReduceOp", "metrics", "trace", "Trace", "serve", "is_server",
    "GradsyncError", "ConfigError", "PeerLostError", "TimeoutError", "ProtocolError",
    "DataError", "SystemCallError", "InternalError",
]
