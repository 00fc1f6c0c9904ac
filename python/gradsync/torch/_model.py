"""gs.DistributedModel: the layer-by-layer waits of p3 and sharded in a Python model's forward.

In update mode the engine writes each step's update into the parameters while the next forward
may already run. Without this wrapper, gs.DistributedOptimizer.zero_grad() waits for every
parameter first (no overlap); with it, a forward pre-hook on each module that owns parameters
waits for that module's only, so the previous step's communication overlaps the forward (P3,
Lee et al.), and the forward's end waits for the rest before backward. In gradient mode the
hooks cost nothing.
"""

from __future__ import annotations

import weakref

import torch

_models: "weakref.WeakSet" = weakref.WeakSet()  # live DistributedModels, for the optimizer


class DistributedModel(torch.nn.Module):
    """Wraps `module` (as DDP does: model = gs.DistributedModel(Net())). Names, parameters,
    buffers and state_dict are the wrapped module's own (no "module." prefix), so checkpoints
    and gs.DistributedOptimizer(named_parameters=model.named_parameters()) see the model's
    names. A gs.DistributedOptimizer built over its parameters attaches itself."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.module = module
        self._optimizer = None
        self._hooks = []
        _models.add(self)

    def forward(self, *args, **kwargs):
        out = self.module(*args, **kwargs)
        optimizer = self._optimizer() if self._optimizer is not None else None
        if optimizer is not None and optimizer.updates_parameters:
            optimizer.wait_for_parameters()  # what no layer waited for, before backward
        return out

    # The wrapped module's own names, without a "module." prefix.
    def named_parameters(self, prefix: str = "", recurse: bool = True, *args, **kwargs):
        return self.module.named_parameters(prefix, recurse, *args, **kwargs)

    def named_buffers(self, prefix: str = "", recurse: bool = True, *args, **kwargs):
        return self.module.named_buffers(prefix, recurse, *args, **kwargs)

    def state_dict(self, *args, **kwargs):
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict: bool = True):
        return self.module.load_state_dict(state_dict, strict)

    def _attach(self, optimizer) -> None:
        """Hooks every module that owns parameters the optimizer's engine updates."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        self._optimizer = weakref.ref(optimizer)
        if not optimizer.updates_parameters:
            return
        impl = optimizer._impl
        for path, sub in self.module.named_modules():
            if not any(True for _ in sub.parameters(recurse=False)):
                continue
            if path == "":  # the root's own parameters: the mirror has no layer for them
                self._hooks.append(sub.register_forward_pre_hook(
                    lambda m, inputs: impl.wait_for_parameters()))
            elif impl.has_layer(path):
                self._hooks.append(sub.register_forward_pre_hook(
                    lambda m, inputs, path=path: impl.wait_for_layer(path)))


def model_of(parameters) -> DistributedModel | None:
    """The live DistributedModel that owns every one of `parameters` (by identity), if any."""
    mine = {id(p) for p in parameters}
    for model in list(_models):
        if mine and mine <= {id(p) for p in model.module.parameters()}:
            return model
    return None
