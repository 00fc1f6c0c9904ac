"""gs.Compression: Horovod's hvd.Compression, with gradsync's compressors in the same shape.

Horovod's two, ``Compression.none`` and ``Compression.fp16``, work wherever Horovod takes them:
in gs.allreduce / gs.reducescatter (the tensor travels, and is summed, as float16) and in
gs.DistributedOptimizer. gradsync's own (``Compression.topk(0.01)``, ``Compression.powersgd(4)``
... or any spec string through ``Compression.spec("qsgd:16")``) compress gradients inside
gs.DistributedOptimizer and gs.ddp_comm_hook, with error feedback and the guardrail; a plain
allreduce of one tensor refuses them (there is no residual to feed back).
"""

from __future__ import annotations

import torch

from ._errors import ConfigError


class Compressor:
    """Horovod's interface: compress(tensor) -> (tensor, context); decompress(tensor, context).
    str() is the spec string gs.DistributedOptimizer takes."""

    spec = "none"

    def compress(self, tensor: torch.Tensor):
        return tensor, None

    def decompress(self, tensor: torch.Tensor, context):
        return tensor

    def __str__(self) -> str:
        return self.spec

    def __repr__(self) -> str:
        return f"gs.Compression({self.spec!r})"


class FP16Compressor(Compressor):
    """Floating-point tensors travel as float16 and come back in their own dtype."""

    spec = "fp16"

    def compress(self, tensor: torch.Tensor):
        if not tensor.dtype.is_floating_point:
            return tensor, None
        return tensor.to(torch.float16), tensor.dtype

    def decompress(self, tensor: torch.Tensor, context):
        return tensor if context is None else tensor.to(context)


class GradientCompressor(Compressor):
    """One of gradsync's compressors, for gs.DistributedOptimizer and gs.ddp_comm_hook."""

    def __init__(self, spec: str):
        self.spec = spec

    def compress(self, tensor: torch.Tensor):
        raise ConfigError(f"compression {self.spec!r} compresses gradients with error feedback in "
                          "gs.DistributedOptimizer or gs.ddp_comm_hook; a single allreduce takes "
                          "gs.Compression.none or gs.Compression.fp16")


def _with_value(name: str):
    """Compression.NAME(value): the compressor "NAME:value" (a density, levels, rank, threshold)."""
    return staticmethod(lambda value: GradientCompressor(f"{name}:{value}"))


class Compression:
    """The compressors, as Horovod's hvd.Compression names them and as gradsync adds them:
    Compression.topk(0.01), .mstopk(d), .gtopk(d), .randomk(d), .dgc(d) (densities),
    .qsgd(levels), .powersgd(rank), .gradiveq(rank), .twobit(threshold), and .terngrad,
    .onebit, .signsgd; Compression.spec(text) takes any of `gradsync train --compress`'s specs
    (docs/cli.md), e.g. "topk:0.01"."""

    none = Compressor()
    fp16 = FP16Compressor()
    spec = staticmethod(lambda text: of(text))
    topk, mstopk, gtopk, randomk, dgc = (_with_value(n) for n in
                                         ("topk", "mstopk", "gtopk", "randomk", "dgc"))
    qsgd, powersgd, gradiveq, twobit = (_with_value(n) for n in
                                        ("qsgd", "powersgd", "gradiveq", "twobit"))
    terngrad = GradientCompressor("terngrad")
    onebit = GradientCompressor("onebit")
    signsgd = GradientCompressor("signsgd")


def of(compression) -> Compressor:
    """A Compressor from what a caller passed: None, a Compressor, or a spec string."""
    if compression is None:
        return Compression.none
    if isinstance(compression, Compressor):
        return compression
    if isinstance(compression, str):
        return {"none": Compression.none, "fp16": Compression.fp16}.get(
            compression, GradientCompressor(compression))
    raise ConfigError(f"compression {compression!r}: pass gs.Compression.none, "
                      "gs.Compression.fp16, another gs.Compression or a spec string")
