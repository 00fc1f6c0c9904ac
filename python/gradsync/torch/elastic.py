"""Horovod's hvd.elastic on gradsync's elastic rounds (include/gradsync/elastic.h).

An elastic job (`gradsync launch --elastic [--max-restarts K] -n N -- python train.py`, or
gs.init(elastic="MIN:MAX")) runs in rounds. The training function given to run() trains in one;
when a collective fails because a rank was lost (gs.PeerLostError, gs.TimeoutError), every
survivor restores its state to the last commit() and the job re-forms without the lost rank; when
a worker waits to come in (a restarted or a new one), every member leaves the round at the same
commit() (HostsUpdatedInterrupt) and the job re-forms with it. In the new round rank 0 holds the
most advanced state (the most commits) and sync() gives it to every member, then the function is
called again with the state, as Horovod does.

What re-forms, and by which rule: the model's and optimizer's state is rank 0's (sync); a
gs.DistributedOptimizer is rebuilt on the new round (gradient mode, or p3 with SGD, whose
momentum the engine keeps and TorchState commits with the model: its compressors' residuals start
afresh, as after a restart); ElasticSampler re-divides the epoch's samples not yet processed by
any rank among the new members.
"""

from __future__ import annotations

import copy
import functools
import math
import sys

import torch

from . import _collectives, _job, _ops
from ._errors import PeerLostError, TimeoutError


class HostsUpdatedInterrupt(RuntimeError):
    """Raised by commit() on every member when a worker waits to come in: run() re-forms the job
    with it. `skip_sync` as Horovod's (False: the state is synchronized in the new round)."""

    def __init__(self, skip_sync: bool = False):
        super().__init__("a worker waits to join the elastic job")
        self.skip_sync = skip_sync


# What a lost rank makes a collective raise: run() recovers from these.
HorovodInternalError = (PeerLostError, TimeoutError)


def run(func):
    """Decorates the training function `func(state, *args, **kwargs)`: runs it, and after a lost
    rank or a worker coming in, re-forms the job and runs it again from the state (see the module's
    docstring). Returns what func returns; None on a worker that got in after the job finished."""

    @functools.wraps(func)
    def wrapper(state: State, *args, **kwargs):
        _job.session()  # a ConfigError now, in a fixed job
        _check_optimizers()
        skip_sync = False
        while True:
            failure = None
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HorovodInternalError as e:
                failure = f"rank {_job.rank()} leaves elastic round {_job.session().round} ({e})"
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            if not _job.next_round(state._commits, failure):
                return None
            if _job.rank() == 0:
                print(f"gradsync: elastic round {_job.session().round}: {_job.size()} workers "
                      f"from commit {state._commits}", file=sys.stderr, flush=True)
            state.on_reset()

    return wrapper


def _check_optimizers() -> None:
    from ._optimizer import DistributedOptimizer  # it imports this package's modules

    for closable in list(_job._closables):
        if isinstance(closable, DistributedOptimizer):
            closable._check_elastic()


class State:
    """What the job keeps through its rounds: save() at commit(), restore() after a failure,
    sync() from rank 0 in every new round, reset() and the reset callbacks after each re-forming.
    Subclasses define the first four."""

    def __init__(self, **kwargs):
        self._reset_callbacks = []
        self._commits = 0  # how advanced this state is: the rounds' rank 0 holds the most

    def register_reset_callbacks(self, callbacks) -> None:
        """Callables run after each re-forming (e.g. to scale the learning rate to the new
        size)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self) -> None:
        """Saves the state (what a failure returns to), then looks for workers waiting to come
        in (HostsUpdatedInterrupt on every member). Collective: every member commits at the same
        steps."""
        self.save()
        self._commits += 1
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """HostsUpdatedInterrupt on every member when a worker waits to come in (rank 0 asks the
        store and tells the others: one small broadcast). Collective."""
        session = _job.session()
        waiting = 0
        if _job.rank() == 0:
            session.heartbeat()
            waiting = session.waiting()
        flag = torch.tensor([waiting], dtype=torch.int64)
        _ops.broadcast_(flag, 0).wait()
        if int(flag.item()) > 0:
            raise HostsUpdatedInterrupt(False)

    def save(self) -> None:
        raise NotImplementedError

    def restore(self) -> None:
        raise NotImplementedError

    def sync(self) -> None:
        raise NotImplementedError

    def reset(self) -> None:
        pass


class ObjectState(State):
    """Keeps the keyword arguments as attributes (epoch=0, batch=0, ...): commit() saves their
    values, restore() sets them back, sync() makes them rank 0's."""

    def __init__(self, **kwargs):
        self._saved_state = dict(kwargs)
        self._set_attrs()
        super().__init__()

    def save(self) -> None:
        self._saved_state = {name: copy.deepcopy(getattr(self, name)) for name in self._saved_state}

    def restore(self) -> None:
        self._set_attrs()

    def sync(self) -> None:
        saved = {"attrs": self._saved_state, "commits": self._commits}
        saved = _collectives.broadcast_object(saved if _job.rank() == 0 else None, 0)
        self._saved_state, self._commits = saved["attrs"], saved["commits"]
        self._set_attrs()

    def _set_attrs(self) -> None:
        for name, value in self._saved_state.items():
            setattr(self, name, copy.deepcopy(value))


class TorchState(ObjectState):
    """ObjectState with a model, an optimizer and ElasticSamplers: their state_dicts are saved
    and restored, and made rank 0's by sync(). A gs.DistributedOptimizer's wrapped optimizer is
    what is kept (its engine is rebuilt in each round)."""

    def __init__(self, model: torch.nn.Module | None = None, optimizer=None, **kwargs):
        samplers = {k: v for k, v in kwargs.items() if isinstance(v, ElasticSampler)}
        self.__dict__["_handled"] = {"model": model, "optimizer": optimizer, **samplers}
        self.__dict__["_saved_handled"] = {}
        for name, value in self._handled.items():
            self.__dict__[name] = value
        super().__init__(**{k: v for k, v in kwargs.items() if k not in samplers})
        self._save_handled()

    def __setattr__(self, name, value):
        if name in self.__dict__.get("_handled", {}):
            self._handled[name] = value
        super().__setattr__(name, value)

    def _optimizer(self):
        optimizer = self._handled["optimizer"]
        return getattr(optimizer, "optimizer", optimizer)  # a DistributedOptimizer's own

    def _engine_keeping_momentum(self):
        """The gs.DistributedOptimizer whose engine applies the update and keeps SGD's momentum
        (p3), or None."""
        from ._optimizer import DistributedOptimizer  # it imports this package's modules

        optimizer = self._handled["optimizer"]
        if isinstance(optimizer, DistributedOptimizer) and optimizer.updates_parameters:
            return optimizer
        return None

    def _save_handled(self) -> None:
        saved = {}
        engine = self._engine_keeping_momentum()
        if engine is not None:
            engine.wait_for_parameters()  # the step's update whole before the model is copied
        if self._handled["model"] is not None:
            saved["model"] = copy.deepcopy(self._handled["model"].state_dict())
        if engine is not None:  # the wrapped optimizer's state, with the engine's momentum
            saved["optimizer"] = copy.deepcopy(engine._optimizer_state_dict())
        elif self._handled["optimizer"] is not None:
            saved["optimizer"] = copy.deepcopy(self._optimizer().state_dict())
        for name, value in self._handled.items():
            if isinstance(value, ElasticSampler):
                saved[name] = copy.deepcopy(value.state_dict())
        self._saved_handled = saved

    def save(self) -> None:
        self._save_handled()
        super().save()

    def restore(self) -> None:
        saved = self._saved_handled
        if "model" in saved:
            self._handled["model"].load_state_dict(saved["model"])
        if "optimizer" in saved:
            self._optimizer().load_state_dict(saved["optimizer"])
        for name, value in self._handled.items():
            if isinstance(value, ElasticSampler):
                value.load_state_dict(saved[name])
        super().restore()

    def sync(self) -> None:
        engine = self._engine_keeping_momentum()
        if engine is not None:
            # The engine of this round starts without momentum; the last commit has it (a
            # failure restored it, a worker waiting to come in interrupted that very commit):
            # rank 0's goes to every member, and into each member's engine.
            self._optimizer().load_state_dict(self._saved_handled["optimizer"])
        if self._handled["model"] is not None:
            _collectives.broadcast_parameters(self._handled["model"].state_dict(), 0)
        if self._handled["optimizer"] is not None:
            _collectives.broadcast_optimizer_state(self._optimizer(), 0)
        if engine is not None:
            engine._momentum_to_engine()
        for value in self._handled.values():
            if isinstance(value, ElasticSampler):
                value._sync()
        super().sync()
        self._save_handled()  # what a failure before the first commit returns to


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's elastic sampler: the epoch's samples (shuffled by seed + epoch) divided among
    the current members, without the ones any rank recorded as processed (record_batch,
    record_indices); re-divided in each round, so that no sample of an epoch is skipped and
    none repeated across a re-forming (up to the padding that makes the ranks' shares equal).
    Give it to TorchState (as a keyword argument) so that it is saved, restored and synced."""

    def __init__(self, dataset, shuffle: bool = True, seed: int = 0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices: set[int] = set()
        self.reset()

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        """Marks this rank's batch `batch_idx` (of `batch_size` samples) processed."""
        self.record_indices(self.get_indices(batch_idx, batch_size))

    def record_indices(self, indices) -> None:
        self.processed_indices.update(int(i) for i in indices)

    def get_indices(self, batch_idx: int, batch_size: int) -> list[int]:
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "processed_indices": set(self.processed_indices)}

    def load_state_dict(self, state: dict) -> None:
        self.epoch = state["epoch"]
        self.processed_indices = set(state["processed_indices"])
        self.reset()

    def reset(self) -> None:
        """Divides the epoch's unprocessed samples among the current members."""
        members = _job.size() if _job.is_initialized() else 1
        me = _job.rank() if _job.is_initialized() else 0
        left = [i for i in range(len(self.dataset)) if i not in self.processed_indices]
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            left = [left[i] for i in torch.randperm(len(left), generator=generator).tolist()]
        self.num_samples = math.ceil(len(left) / members) if left else 0
        total = self.num_samples * members
        padded = left + left[:total - len(left)] if left else []
        self.indices = padded[me:total:members]

    def _sync(self) -> None:
        """Every rank's processed samples, as rank 0 sees the epoch (collective)."""
        processed = set().union(*_collectives.allgather_object(self.processed_indices))
        state = _collectives.broadcast_object(
            {"epoch": self.epoch, "processed_indices": processed} if _job.rank() == 0 else None, 0)
        self.load_state_dict(state)

    def __iter__(self):
        return iter(self.indices)

    def __len__(self) -> int:
        return self.num_samples
