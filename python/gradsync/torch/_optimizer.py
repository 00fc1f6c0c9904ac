"""gs.DistributedOptimizer: Horovod's DistributedOptimizer over gradsync's engine.

It wraps the user's torch.optim optimizer (and is one: LR schedulers accept it) and builds the
public C++ DistributedOptimizer over the same tensors (gradsync/_C, python/csrc/optimizer.cc):
autograd hooks send each gradient as backward produces it, step() waits for the averages and
steps the optimizer (gradient mode: any optimizer), or, with p3, sharded and the parameter-server
strategies, the engine applies SGD's, Adam's or AdamW's rule as each slice's average arrives
(update mode: the optimizer itself never steps, and a changed learning rate is refused).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Iterable

import torch

from gradsync import _C

from . import _job
from ._collectives import allgather_object
from ._errors import ConfigError, DataError

_STATE_FORMAT = 1  # of the "gradsync" entry of state_dict()


def _kind(optimizer: torch.optim.Optimizer) -> str:
    """Which C++ optimizer mirrors it: the update modes apply SGD, Adam and AdamW only."""
    for cls, kind in ((torch.optim.AdamW, "adamw"), (torch.optim.Adam, "adam"),
                      (torch.optim.SGD, "sgd")):
        if type(optimizer) is cls:
            return kind
    return "foreign"


def _named(optimizer, named_parameters) -> list[tuple[str, torch.Tensor]]:
    """The synchronized tensors with their names: named_parameters (a model's, with dotted
    names), else the optimizer's own, named as Horovod does (group.index)."""
    if named_parameters is not None:
        named = [(str(n), p) for n, p in named_parameters]
        names = [n for n, _ in named]
        if len(set(names)) != len(names):
            raise ConfigError("named_parameters holds a name twice")
        return named
    return [(f"group{g}.param{i}", p) for g, group in enumerate(optimizer.param_groups)
            for i, p in enumerate(group["params"])]


def _horovod_options(extra: dict) -> dict:
    """Horovod's DistributedOptimizer arguments, taken where they mean what they mean there and
    refused with what to use instead where they cannot; the rest of `extra`, gradsync's."""
    extra = dict(extra)
    op = extra.pop("op", None)
    if op is not None and getattr(op, "value", op) != "average":
        raise ConfigError(f"op={op}: gs.DistributedOptimizer averages gradients (op=gs.Average); "
                          "for a sum, scale the loss by gs.size()")
    if float(extra.pop("gradient_predivide_factor", 1.0)) != 1.0:
        raise ConfigError("gradient_predivide_factor: gradsync averages in float32 without "
                          "overflow; scale the loss instead")
    process_set = extra.pop("process_set", None)
    if process_set is not None and process_set.ranks:
        raise ConfigError("process_set: gs.DistributedOptimizer averages over the whole job")
    extra.pop("groups", None)  # fusion is the schedule's (fusion:MB, p3), not the caller's
    extra.pop("num_groups", None)
    extra.pop("sparse_as_dense", None)  # gradients reach gradsync dense
    return extra


def _sync_options(schedule, compression, sync, passes, extra) -> "_C.SyncOptions":
    extra = _horovod_options(extra)
    options = _C.SyncOptions()
    options.schedule = str(schedule)
    options.compress = str(compression)
    options.sync = str(sync)
    options.backward_passes_per_step = int(passes)
    for key, value in extra.items():
        if not hasattr(options, key):
            raise ConfigError(f"unknown option {key!r}")
        setattr(options, key, list(value) if key == "compress_overrides" else value)
    return options


def _tunes_p3(schedule: str) -> bool:
    """schedule "auto" tunes p3's slices (update mode); "auto:tune=fusion" fusion's buckets."""
    return (schedule == "auto" or schedule.startswith("auto:")) and "tune=fusion" not in schedule


# Local steps, then an outer step every H: each rank's optimizer state stays its own.
_LOCAL_STRATEGIES = ("localsgd", "diloco")


def _update_mode(schedule: str, sync: str, options: dict) -> bool:
    """Whether the engine applies the optimizer's rule on a job of several (docs/api.md's table):
    p3, sharded and every strategy through parameter servers; checked on any world size, so that
    a program refused at scale is refused alone too."""
    ring = sync == "ssgd" or sync.startswith(_LOCAL_STRATEGIES)
    return (_tunes_p3(str(schedule)) or str(schedule).startswith("p3") or sync == "sharded"
            or not ring
            or bool(options.get("parameter_servers")) or int(options.get("servers", 0)) > 0)


def _check_update_mode(groups) -> None:
    """What torch.optim has and the engine's rules (src/optim/update_rule.h) do not."""
    for _, options in groups:
        for key in ("maximize", "capturable", "differentiable"):
            if options.get(key):
                raise ConfigError(f"{key}=True: with p3, sharded and parameter servers the "
                                  "engine applies SGD's, Adam's or AdamW's plain rule; use "
                                  "schedule wfbp (the optimizer then runs as given)")


class DistributedOptimizer(torch.optim.Optimizer):
    """Wraps `optimizer` so that every rank's gradients are averaged across the job.

    Arguments (spec strings as `gradsync train`'s flags, docs/cli.md; a bad one raises
    gs.ConfigError, a ValueError, listing the choices):
      named_parameters   model.named_parameters(): names for compression overrides and errors,
                         and the layers of gs.DistributedModel's waits (default: the
                         optimizer's parameters, named group0.param0 ...)
      schedule           fifo | wfbp | fusion[:MB] | p3[:slice=N,window=W]
      compression        none | fp16 | topk:D | mstopk:D | gtopk:D | randomk:D | dgc:D | qsgd:L |
                         terngrad | twobit:T | onebit | signsgd | powersgd:R | gradiveq:R
      sync               ssgd | sharded | localsgd:H | diloco:H[,outer_lr=X,outer_momentum=M,
                         nesterov=on|off,quantize=int8|none,fragments=P,delay=T,alpha=A,
                         eager=on|off,group=rank|host] | asgd |
                         ssp:S | odsgd | ssdsgd:K | cdsgd:K
      backward_passes_per_step  backward passes summed locally before communicating
    Horovod's op (gs.Average), gradient_predivide_factor (1.0), groups and sparse_as_dense
    (ignored: the schedule fuses, gradients are dense) and process_set (the whole job) are
    taken; other values are refused with what to use instead. `compression` may be a
    gs.Compression.
    Keyword-only, as SyncOptions (gradsync/sync_options.h): compress_overrides (GLOB=SPEC...),
    compress_min_elements, compress_warmup, compress_warmup_codec ("none", "fp16" or "int8":
    how the warm-up sends what is compressed after it), guard (the compression guardrail, default
    True), compress_momentum (1-bit Adam: with torch.optim.Adam or AdamW, a compressor and
    compress_warmup steps, after which the second moment is frozen and the ranks exchange
    their compressed momenta; docs/python.md), parameter_servers, servers, delay_warmup, local_lr,
    local_momentum, glu, cd_threshold, compensate (asgd, ssp: "sc", "lwp", "sc+lwp"), seed, join.

    Collective: every rank builds it with the same parameters and options (gs.ConfigError on
    every rank otherwise, naming the first difference and its rank).
    """

    def __init__(self, optimizer: torch.optim.Optimizer,
                 named_parameters: Iterable[tuple[str, torch.Tensor]] | None = None,
                 schedule: str = "wfbp", compression: str = "none", sync: str = "ssgd",
                 backward_passes_per_step: int = 1, **options):
        # torch.optim.Optimizer.__init__ is not called: param_groups, state and defaults are the
        # wrapped optimizer's own (properties below), so both see every change.
        if isinstance(optimizer, DistributedOptimizer):
            raise ConfigError("the optimizer is a gs.DistributedOptimizer already")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise ConfigError(f"expected a torch.optim.Optimizer, got {type(optimizer).__name__}")
        from ._model import model_of  # the model module refers back to optimizers

        self._inner = optimizer
        self._kind = _kind(optimizer)
        model = model_of([p for g in optimizer.param_groups for p in g["params"]])
        if named_parameters is None and model is not None:
            named_parameters = model.module.named_parameters()
        self._named = _named(optimizer, named_parameters)
        groups = [(list(g["params"]), {k: v for k, v in g.items() if k != "params"})
                  for g in optimizer.param_groups]
        self._impl = None
        self._update_mode = _update_mode(schedule, sync, options)  # on a job of several
        if self._update_mode:
            _check_update_mode(groups)
        self._arguments = (groups, _sync_options(schedule, compression, sync,
                                                 backward_passes_per_step, options))
        self._impl = _C.DistributedOptimizer(_job.job(), optimizer, self._kind,
                                             self._arguments[0], self._named, self._arguments[1])
        self._updates = self._impl.updates_parameters()  # False alone: there is no engine
        self._compress_momentum = bool(options.get("compress_momentum"))
        self._share_adam_state()
        self._local = str(sync).startswith(_LOCAL_STRATEGIES)
        # p3 on the ring with SGD: its momentum, the engine's only state, is the same on every
        # rank, so hvd.elastic's TorchState can commit it (elastic.py).
        self._elastic_update = (self._kind == "sgd" and str(sync) == "ssgd" and
                                not options.get("parameter_servers") and
                                int(options.get("servers", 0)) == 0)
        self._steps = 0
        self._synchronized = False
        self._skip = False
        self._model = None  # the gs.DistributedModel whose forward waits layer by layer
        _job.register(self)
        if model is not None:
            model._attach(self)
            self._model = model

    # --- the wrapped optimizer's state, shared ---------------------------------------------
    @property
    def param_groups(self):
        return self._inner.param_groups

    @param_groups.setter
    def param_groups(self, value):
        self._inner.param_groups = value

    @property
    def state(self):
        return self._inner.state

    @state.setter
    def state(self, value):
        self._inner.state = value

    @property
    def defaults(self):
        return self._inner.defaults

    @defaults.setter
    def defaults(self, value):
        self._inner.defaults = value

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The wrapped torch.optim optimizer."""
        return self._inner

    def __repr__(self) -> str:
        return f"gs.DistributedOptimizer({self._inner!r})"

    def __getstate__(self):
        raise TypeError("a gs.DistributedOptimizer cannot be pickled; save its state_dict()")

    def add_param_group(self, param_group) -> None:
        raise ConfigError("gs.DistributedOptimizer synchronizes the parameters it was built "
                          "with; add groups to the optimizer before wrapping it")

    # --- a step -----------------------------------------------------------------------------
    @property
    def updates_parameters(self) -> bool:
        """Whether the engine applies the update (p3, sharded, parameter servers)."""
        return self._updates

    @property
    def exchanges_momenta(self) -> bool:
        """compress_momentum past its dense warm-up: the ranks' momenta are averaged during
        backward and step() applies Adam's update (synchronize(), and with it clipping the
        averaged gradients, is refused). False before that and without the option."""
        return self._compress_momentum and self._impl.exchanges_momenta()

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zeroes the gradients. In update mode without a gs.DistributedModel, first waits for
        the last step's updates (the model's forward waits layer by layer otherwise)."""
        if self._updates and self._model is None:
            self._impl.wait_for_parameters()
        self._inner.zero_grad(set_to_none=set_to_none)

    def report_loss(self, loss) -> None:
        """Optional: this rank's loss of the current step (a float or a one-element tensor),
        after the forward and before the backward ends, for the compression guardrail's loss
        signal (a window's mean loss over the ranks against the dense warm-up's last window;
        needs compress_warmup > 0). Nothing without compression or with guard=False."""
        self._impl.report_loss(float(loss))

    def synchronize(self) -> None:
        """Gradient mode: waits for the averaged gradients and writes them into .grad, without
        stepping (e.g. to clip them); then step inside skip_synchronize()."""
        self._impl.synchronize()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside it steps the optimizer on gradients synchronize() averaged already."""
        self._skip = True
        try:
            yield
        finally:
            self._skip = False

    def step(self, closure=None):
        """After backward: steps on the averaged gradients (gradient mode), or lets the engine
        apply the update as the averages arrive (update mode: returns at once)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._skip:
            if not self._synchronized:
                raise ConfigError("skip_synchronize() without synchronize() first")
            if self._local:  # diloco's group=host: synchronize() averaged inside the host
                raise ConfigError("skip_synchronize() would skip diloco's outer step: call step() "
                                  "alone, which averages inside the host before the local step")
            self._inner.step()
            self._share_adam_state()  # the optimizer stepped (Horovod's clipping recipe)
        else:
            if self._updates or self._compress_momentum:
                self._impl.set_lrs([float(g["lr"]) for g in self.param_groups])
            exchanged_momenta = self.exchanges_momenta
            self._impl.step()
            if exchanged_momenta:  # the engine applied Adam's update, in place: it counted
                self._take_adam_steps()
            else:  # the optimizer stepped: it may have created its state and counted the step
                self._share_adam_state()
        self._synchronized = False
        self._steps += 1
        self._impl.trace_step(self._steps)
        return loss

    def join(self) -> None:
        """With join=True, for a rank out of data: takes part in the others' remaining steps
        with zero gradients, stepping with their averages, until every rank has joined."""
        self._impl.join()

    def wait_for_parameters(self) -> None:
        """Update mode: waits until every parameter holds the last step's update."""
        self._impl.wait_for_parameters()

    def synchronize_model(self) -> None:
        """Makes every rank's parameters the one global model where ranks may differ (the
        servers' with asgd, ssp and the delayed strategies; the average with localsgd, an outer
        step with diloco).
        Collective; e.g. before evaluating or saving."""
        self._impl.synchronize_model()

    def with_global_model(self, fn):
        """Runs fn() with this worker's parameters being the servers' global model, then gives
        the worker its own back (evaluation that leaves training undisturbed). Collective."""
        result = []
        self._impl.with_global_model(lambda: result.append(fn()))
        return result[0] if result else None

    # --- compress_momentum (1-bit Adam) -----------------------------------------------------
    def _share_adam_state(self) -> None:
        """The engine's twin of the optimizer takes this optimizer's Adam state as its own (the
        same tensors: past the warm-up the hooks turn gradients into momenta from exp_avg, and
        the engine's update writes exp_avg, exp_avg_sq and the parameters), with the step
        counts. After every step the optimizer took and every load: torch.optim may have
        created or replaced them."""
        if not self._compress_momentum:
            return
        states = []
        for p in self._params():
            state = self._inner.state.get(p, {})
            states.append((state["exp_avg"], state["exp_avg_sq"], int(state["step"]))
                          if "exp_avg" in state else None)
        self._impl.share_adam_state(states)

    def _take_adam_steps(self) -> None:
        """The step counts the engine's update advanced, into this optimizer's state."""
        for p, step in zip(self._params(), self._impl.adam_steps()):
            if step is None:
                continue
            state = self._inner.state[p]
            if torch.is_tensor(state["step"]):
                state["step"].fill_(step)
            else:
                state["step"] = step

    # --- checkpoints --------------------------------------------------------------------------
    def _params(self) -> list[torch.Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    def state_dict(self) -> dict:
        """The wrapped optimizer's state_dict (with the engine's SGD momentum or Adam's moments
        in update mode), plus "gradsync": the step and every rank's synchronization state
        (compressors' residuals, PowerSGD's Q, the delayed strategies' local models). Collective: every rank gets the whole; rank 0 saves it."""
        sync_state = self._impl.sync_state()
        optimizer = self._optimizer_state_dict()
        # With localsgd every rank's optimizer steps on its own gradients: each keeps its own.
        mine = {"sync": torch.frombuffer(bytearray(sync_state), dtype=torch.uint8),
                "optimizer": optimizer if self._local else None}
        return {"optimizer": optimizer,
                "gradsync": {"format": _STATE_FORMAT, "step": self._steps,
                             "world_size": _job.size(), "ranks": allgather_object(mine)}}

    def _optimizer_state_dict(self) -> dict:
        """The wrapped optimizer's state_dict, with the state the engine keeps in update mode
        (SGD's momentum, Adam's and AdamW's moments and step; waits for the last step's updates
        first; collective with sharded and servers)."""
        captured = {}

        def capture():
            params = self._params()
            added = []
            if self._updates and self._kind == "sgd":
                for p, buffer in zip(params, self._impl.momentum_buffers()):
                    if buffer is not None:
                        self._inner.state[p]["momentum_buffer"] = buffer
                        added.append(p)
            elif self._updates:
                for p, entry in zip(params, self._impl.adam_states()):
                    if entry is not None:
                        m, v, step = entry
                        self._inner.state[p] = {"step": torch.tensor(float(step)), "exp_avg": m,
                                                "exp_avg_sq": v}
                        added.append(p)
            captured["optimizer"] = self._inner.state_dict()
            for p in added:
                del self._inner.state[p]

        self._impl.with_optimizer_state(capture)
        return captured["optimizer"]

    def _momentum_to_engine(self) -> None:
        """Update mode: the wrapped optimizer's state (SGD's momentum buffers, Adam's moments) goes
        to the engine, which keeps it from then on (it leaves the optimizer's state)."""
        if not self._updates:
            return
        params = self._params()
        if self._kind == "sgd":
            self._impl.set_momentum_buffers(
                [self._inner.state.get(p, {}).get("momentum_buffer") for p in params])
        else:
            states = [self._inner.state.get(p, {}) for p in params]
            self._impl.share_adam_state([(s["exp_avg"], s["exp_avg_sq"], int(s["step"]))
                                         if "exp_avg" in s else None for s in states])
        self._impl.load_optimizer_state()
        self._inner.state = defaultdict(dict)

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores a state_dict() (every rank loads the same dict and takes its own
        synchronization state), before the first step; the run then continues as the
        uninterrupted one would. On another number of ranks, each adopts what maps of saved
        rank (rank % saved ranks)'s state and starts the compressors' afresh (ConfigError for
        what cannot be mapped: docs/checkpoints.md). A plain optimizer state_dict loads as into
        the optimizer."""
        saved = state_dict.get("gradsync")
        self._inner.load_state_dict(state_dict["optimizer"] if saved else state_dict)
        self._momentum_to_engine()
        self._share_adam_state()
        if saved is None:
            return
        if saved.get("format") != _STATE_FORMAT:
            raise DataError(f"a gradsync state of format {saved.get('format')}, not {_STATE_FORMAT}")
        ranks = saved["ranks"]
        # On another number of ranks each adopts what maps of a saved rank's state and starts the
        # rest afresh (docs/checkpoints.md, "Another number of workers"); the data is the
        # program's own to re-shard.
        mine = ranks[_job.rank() % len(ranks)]
        if mine["optimizer"] is not None:
            self._inner.load_state_dict(mine["optimizer"])
        sync = bytes(mine["sync"].numpy().tobytes())
        if len(ranks) == _job.size():
            self._impl.load_sync_state(sync)
        else:
            self._impl.adopt_sync_state(sync, int(saved["step"]))
        self._steps = int(saved["step"])
        self._impl.set_step(self._steps)

    # --- statistics and traces ----------------------------------------------------------------
    def metrics(self) -> dict:
        """What synchronizing cost this rank so far: bytes_sent, dense_bytes (what dense ring
        allreduces would have sent), comm_seconds, encode_seconds, decode_seconds and
        wait_seconds (communication the forward waited for), and steps; async_pushes,
        staleness_sum and staleness_max (the staleness of this rank's pushes under asgd and ssp,
        zero otherwise)."""
        stats = self._impl.stats()
        stats["steps"] = self._steps
        return stats

    def _close(self) -> None:
        if self._impl is not None:
            self._impl.close()

    # --- elastic rounds (elastic.py) ----------------------------------------------------------
    def _check_elastic(self) -> None:
        """hvd.elastic re-forms the job from the wrapped optimizer's state: the engine must keep
        none of its own that a lost rank would take with it, except p3's SGD momentum, which
        every rank holds whole and TorchState commits (elastic.py)."""
        if self._local or (self._update_mode and not self._elastic_update):
            raise ConfigError("hvd.elastic runs DistributedOptimizers in gradient mode (schedule "
                              "fifo, wfbp or fusion; sync ssgd), or p3 with torch.optim.SGD: "
                              "sharded, parameter servers, Adam in update mode and the local "
                              "strategies hold state a lost rank takes with it "
                              "(docs/python.md, \"Elastic training\")")

    def _rebind(self) -> None:
        """Builds the engine again on the current job (a new elastic round; collective). The
        compressors' residuals and other synchronization state start afresh."""
        self._close()
        self._impl = _C.DistributedOptimizer(_job.job(), self._inner, self._kind,
                                             self._arguments[0], self._named, self._arguments[1])
        if self._compress_momentum:  # the second moment stays frozen from round to round
            self._impl.set_step(self._steps)
            self._share_adam_state()
        self._synchronized = False
        self._skip = False

    def __del__(self):
        impl = getattr(self, "_impl", None)
        if impl is not None:
            impl.close()
