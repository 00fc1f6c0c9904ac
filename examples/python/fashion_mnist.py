"""Fashion-MNIST for the Python examples: the gzipped IDX files of Debian's
dataset-fashion-mnist read with the standard library, shuffled batches (each rank its own share
of every global batch), and test accuracy."""

from __future__ import annotations

import gzip
import os
import struct

import torch

MEAN, STD = 0.2860, 0.3530  # of the training images


def _idx(path: str) -> torch.Tensor:
    with gzip.open(path, "rb") as f:
        data = f.read()
    _, type_code, dims = struct.unpack_from(">HBB", data, 0)
    if type_code != 0x08:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    shape = struct.unpack_from(f">{dims}I", data, 4)
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).view(shape)


def load(directory: str, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (N x 1 x 28 x 28, normalized float32) and labels (N, int64) of split "train" or
    "t10k" (the test set)."""
    images = _idx(os.path.join(directory, f"{split}-images-idx3-ubyte.gz"))
    labels = _idx(os.path.join(directory, f"{split}-labels-idx1-ubyte.gz"))
    return ((images.float() / 255 - MEAN) / STD).unsqueeze(1), labels.long()


def batches(x: torch.Tensor, y: torch.Tensor, batch_size: int, epoch: int, rank: int = 0,
            size: int = 1):
    """The epoch's batches in a shuffled order (the same on every rank); of each global batch of
    batch_size x size samples, rank takes its own batch_size."""
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(epoch))
    per_step = batch_size * size
    for first in range(0, len(y) - per_step + 1, per_step):
        mine = order[first + rank * batch_size:first + (rank + 1) * batch_size]
        yield x[mine], y[mine]


def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Test accuracy of `model` on (x, y)."""
    model.eval()
    with torch.no_grad():
        correct = sum((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum().item()
                      for i in range(0, len(y), 1000))
    model.train()
    return correct / len(y)
