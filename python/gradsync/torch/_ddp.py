"""gs.ddp_comm_hook: gradsync's compressors and ring under PyTorch's DistributedDataParallel.

    state = gs.DdpHookState(model)             # model: the DDP model (or the module it wraps)
    model.register_comm_hook(state, gs.ddp_comm_hook(compression="powersgd:4"))

DDP keeps doing what it does (bucketing, autograd hooks, the first-step broadcast through its own
process group, unused-parameter detection); each bucket, as backward fills it, goes to a
GradientAverager (gradsync/gradient_averager.h) on a thread of gradsync's, over gradsync's
transport (gs.init), and DDP receives the average through the returned future. Every tensor is
compressed exactly as gs.DistributedOptimizer's wfbp schedule compresses it (the same method,
state and seeds, by parameter name); the dense ones of a bucket travel in one allreduce.
"""

from __future__ import annotations

import torch

from gradsync import _C

from . import _job
from ._collectives import allgather_object
from ._errors import ConfigError, DataError

_STATE_FORMAT = 1


class DdpHookState:
    """What the hook needs of one DDP model: its parameters' names and shapes (names as the
    wrapped module's, without DDP's "module." prefix), the averager once the hook's options are
    known, and the step counter. Holds metrics() and a state_dict() for checkpoints."""

    def __init__(self, model: torch.nn.Module):
        module = getattr(model, "module", model)
        self._named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        self._index = {id(p): i for i, (_, p) in enumerate(self._named)}
        self._averager = None
        self._options = None
        self._pending = None  # a loaded state, for the averager the first bucket builds
        self.step = 0
        _job.register(self)

    def _averager_for(self, options: dict):
        if self._averager is None:
            shapes = [(n, list(p.shape)) for n, p in self._named]
            self._averager = _C.HookAverager(_job.job(), shapes, **options)
            self._options = options
        elif options != self._options:
            raise ConfigError("this DdpHookState serves a hook with other options already")
        return self._averager

    def _indices(self, bucket) -> list[int]:
        try:
            return [self._index[id(p)] for p in bucket.parameters()]
        except KeyError:
            raise ConfigError("a DDP bucket holds a parameter this state does not know: build "
                              "DdpHookState from the model registered with the hook") from None

    def metrics(self) -> dict:
        """What averaging cost this rank: bytes_sent, dense_bytes, comm_seconds, encode_seconds,
        decode_seconds (empty before the first bucket), and steps."""
        stats = self._averager.stats() if self._averager is not None else {}
        stats["steps"] = self.step
        return stats

    def state_dict(self) -> dict:
        """The step and every rank's compressor state (error feedback, PowerSGD's Q...).
        Collective, between steps: every rank gets the whole; rank 0 saves it."""
        mine = b""
        if self._averager is not None:
            self._averager.drain()
            mine = self._averager.save_state()
        states = allgather_object(torch.frombuffer(bytearray(mine), dtype=torch.uint8)
                                  if mine else torch.zeros(0, dtype=torch.uint8))
        return {"format": _STATE_FORMAT, "step": self.step, "states": states}

    def load_state_dict(self, state: dict) -> None:
        """Restores a state_dict() (every rank takes its own) before the first step: the
        averager is built by the first bucket, with the hook's options, and takes the state then
        (DataError there if it holds another model's or method's)."""
        if state.get("format") != _STATE_FORMAT or len(state["states"]) != _job.size():
            raise DataError("not a DdpHookState of this job (another format or world size)")
        self.step = int(state["step"])
        self._pending = bytes(state["states"][_job.rank()].numpy().tobytes())

    def _load_pending(self) -> None:
        if self._pending is not None:
            self._averager.load_state(self._pending)
            self._pending = None

    def _close(self) -> None:
        if self._averager is not None:
            self._averager.drain()
            self._averager = None


def ddp_comm_hook(compression: str = "none", *, compress_overrides=(), compress_min_elements=1024,
                  compress_warmup: int = 0, seed: int = 0, momentum: float = 0.0):
    """A DDP communication hook averaging each bucket with gradsync (register it with a
    gs.DdpHookState). `compression` and the compress_* options are gs.DistributedOptimizer's
    (a bad spec raises gs.ConfigError listing the choices); `momentum` is what dgc's momentum
    correction applies (the optimizer's, which must then use none). Needs gs.init()."""
    options = {"compress": str(compression), "overrides": list(compress_overrides),
               "min_elements": int(compress_min_elements), "warmup": int(compress_warmup),
               "seed": int(seed), "momentum": float(momentum)}
    # A bad spec fails here, on every rank, listing the choices (no tensors: no traffic).
    _C.HookAverager(_job.job(), [], **options)

    # A function, not a callable object: DDP reads the hook's __name__ and its signature (the
    # parameter named bucket; no annotations, which must otherwise be exactly DDP's own).
    def gradsync_hook(state, bucket):
        if not isinstance(state, DdpHookState):
            raise ConfigError("register the hook with a gs.DdpHookState: "
                              "model.register_comm_hook(gs.DdpHookState(model), hook)")
        averager = state._averager_for(options)
        state._load_pending()
        future = torch.futures.Future()
        averager.submit(state._indices(bucket), bucket.buffer(), state.step, future)
        if bucket.is_last():
            state.step += 1
        return future

    gradsync_hook.options = options
    return gradsync_hook
