#!/usr/bin/python3
"""Data-parallel training with PyTorch DistributedDataParallel (gloo, CPU): gradsync's peer; with
--backend gradsync, the same program over gradsync's torch.distributed backend.

    /usr/bin/python3 benchmarks/peers/ddp_train.py --workers 2 --model cnn --dataset synthetic \\
        --batch-size 64 --steps 60 --warmup-steps 10 --threads 1 --json results/ddp-cnn.json

Launches one process per rank itself (torch.multiprocessing.spawn), or, when RANK and
WORLD_SIZE are set (torchrun or `gradsync launch` style, with MASTER_ADDR/MASTER_PORT), runs
as that one rank (WORLD_SIZE then overrides --workers). Each rank trains a model of
ddp_models.py with SGD + momentum on its shard of the data: Fashion-MNIST read straight from
the gzipped IDX files (DistributedSampler-style sharding: a seeded permutation per epoch,
padded to a multiple of the world size, rank r takes every world-th index from r), or
synthetic data (normal inputs, uniform labels) generated once per rank. DDP runs with its
defaults (25 MiB gradient buckets, overlap with backward, BatchNorm buffers broadcast from
rank 0 at each forward).

Throughput: --warmup-steps untimed steps, a barrier, --steps timed steps, a barrier; rank 0
times the span between the two barriers, and samples/s = global batch × steps / seconds, where
global batch = --batch-size × workers. final_loss is the last timed step's loss averaged over
ranks. Rank 0 writes the JSON (--json) and prints one summary line.

Evaluation (--eval-every N, Fashion-MNIST only), as `gradsync train` evaluates: BatchNorm
running statistics are first averaged across ranks (kept averaged, as gradsync does), then the
unwrapped model in eval mode scores the test set, each rank every world-th image from its rank
(batches of 500) and the correct counts summed over ranks. Every N timed steps it scores the
first --eval-samples test images (0: all), at the end of each epoch and of the run all 10,000.
Each record is {step, seconds, test_accuracy}: seconds is rank 0's training time since the
first timed step with every evaluation's time left out (time-to-accuracy curves), and
samples_per_s then leaves evaluation time out too. Use --warmup-steps 0 for time-to-accuracy,
so that no training happens before the clock starts.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import socket
import struct
import sys
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_models import INPUT_SHAPE, MODELS, NUM_CLASSES, make_model  # noqa: E402

FASHION_MNIST_MEAN = 0.2860
FASHION_MNIST_STD = 0.3530
SYNTHETIC_BATCHES = 16  # distinct synthetic batches per rank, cycled through


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="ranks (processes)")
    parser.add_argument("--model", choices=MODELS, default="cnn")
    parser.add_argument("--dataset", choices=("synthetic", "fashion-mnist"), default="synthetic")
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--batch-size", type=int, default=64, help="per worker")
    parser.add_argument("--steps", type=int, default=60, help="timed steps")
    parser.add_argument("--warmup-steps", type=int, default=10, help="untimed steps before")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--timeout", type=float, default=300, help="collective timeout, s")
    parser.add_argument("--eval-every", type=int, default=0,
                        help="evaluate every N timed steps (0: never; fashion-mnist only)")
    parser.add_argument("--eval-samples", type=int, default=0,
                        help="--eval-every evaluations use the first N test images (0: all)")
    parser.add_argument("--backend", choices=("gloo", "gradsync"), default="gloo",
                        help="torch.distributed backend (gradsync: import gradsync.torch's)")
    parser.add_argument("--json", help="write the result here (rank 0)")
    parser.add_argument("--quiet", action="store_true", help="only the summary line")
    args = parser.parse_args(argv)
    for name in ("workers", "batch_size", "steps", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup_steps < 0:
        parser.error("--warmup-steps must not be negative")
    if args.eval_every < 0 or args.eval_samples < 0:
        parser.error("--eval-every and --eval-samples must not be negative")
    if args.eval_every > 0 and args.dataset != "fashion-mnist":
        parser.error("--eval-every needs --dataset fashion-mnist (a test set)")
    return args


def read_idx(path: str) -> tuple[tuple[int, ...], bytes]:
    """Shape and raw bytes of a gzipped IDX file of unsigned bytes (type code 0x08)."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    if len(data) < 4:
        raise ValueError(f"{path}: too short for an IDX header")
    zero, type_code, ndim = struct.unpack_from(">HBB", data, 0)
    if zero != 0 or type_code != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {data[:4].hex()})")
    shape = struct.unpack_from(f">{ndim}I", data, 4)
    offset = 4 + 4 * ndim
    count = 1
    for dim in shape:
        count *= dim
    if len(data) - offset != count:
        raise ValueError(f"{path}: {len(data) - offset} data bytes, header says {count}")
    return shape, data[offset:]


def load_fashion_mnist(data_dir: str, split: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
    """Images (N×1×28×28 uint8) and labels (N int64) of split "train" or "t10k" (test)."""
    image_shape, images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"))
    label_shape, labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"))
    if image_shape[1:] != INPUT_SHAPE[1:] or label_shape != image_shape[:1]:
        raise ValueError(f"{data_dir}: images {image_shape} and labels {label_shape} mismatch")
    x = torch.frombuffer(bytearray(images), dtype=torch.uint8).view(-1, *INPUT_SHAPE)
    y = torch.frombuffer(bytearray(labels), dtype=torch.uint8).long()
    return x, y


@dataclass
class Batches:
    """Endless per-rank batches: (inputs float32 B×1×28×28, labels int64 B)."""

    args: argparse.Namespace
    rank: int
    world: int

    def __post_init__(self) -> None:
        self.batch = self.args.batch_size
        if self.args.dataset == "synthetic":
            gen = torch.Generator().manual_seed(self.args.seed * 1000 + self.rank)
            n = SYNTHETIC_BATCHES * self.batch
            self.x = torch.randn(n, *INPUT_SHAPE, generator=gen)
            self.y = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
        else:
            self.x, self.y = load_fashion_mnist(self.args.data_dir)
        self.epoch = 0
        self.indices = self._shard()
        self.pos = 0

    def _shard(self) -> torch.Tensor:
        n = len(self.y)
        if self.args.dataset == "synthetic":
            return torch.arange(n)  # Already this rank's own data.
        # As torch.utils.data.DistributedSampler(shuffle=True, drop_last=False).
        gen = torch.Generator().manual_seed(self.args.seed + self.epoch)
        order = torch.randperm(n, generator=gen)
        total = -(-n // self.world) * self.world
        order = torch.cat([order, order[: total - n]])
        return order[self.rank : total : self.world]

    def steps_per_epoch(self) -> int:
        return len(self.indices) // self.batch

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.pos + self.batch > len(self.indices):  # Drop the last partial batch.
            self.epoch += 1
            self.indices = self._shard()
            self.pos = 0
        idx = self.indices[self.pos : self.pos + self.batch]
        self.pos += self.batch
        return normalized(self.x[idx]), self.y[idx]


def normalized(x: torch.Tensor) -> torch.Tensor:
    if x.dtype == torch.uint8:
        return (x.float() / 255.0 - FASHION_MNIST_MEAN) / FASHION_MNIST_STD
    return x


class Evaluator:
    """Test accuracy as `gradsync train` measures it (see the module docstring)."""

    BATCH = 500

    def __init__(self, args: argparse.Namespace, rank: int, world: int) -> None:
        self.rank, self.world = rank, world
        self.x, self.y = load_fashion_mnist(args.data_dir, "t10k")
        self.seconds = 0.0  # Spent evaluating, on this rank.

    def accuracy(self, model: nn.Module, samples: int = 0) -> float:
        start = time.perf_counter()
        test_size = min(samples, len(self.y)) if samples > 0 else len(self.y)
        with torch.no_grad():
            for buffer in model.buffers():  # BatchNorm running statistics, averaged.
                if buffer.is_floating_point():
                    dist.all_reduce(buffer)
                    buffer /= self.world
            was_training = model.training
            model.eval()
            mine = torch.arange(self.rank, test_size, self.world)
            counts = torch.zeros(2, dtype=torch.float64)  # correct, seen
            for first in range(0, len(mine), self.BATCH):
                idx = mine[first : first + self.BATCH]
                logits = model(normalized(self.x[idx]))
                counts[0] += (logits.argmax(1) == self.y[idx]).sum().item()
                counts[1] += len(idx)
            model.train(was_training)
            dist.all_reduce(counts)
        self.seconds += time.perf_counter() - start
        return counts[0].item() / counts[1].item() if counts[1] > 0 else 0.0


def train(rank: int, world: int, args: argparse.Namespace) -> None:
    """One rank's whole run; the process group must be reachable through MASTER_ADDR/PORT."""
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # Already fixed when run as a module of a bigger program.
    if args.backend == "gradsync":
        import gradsync.torch  # noqa: F401  (registers the backend)
    dist.init_process_group(
        args.backend,
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=args.timeout),
    )
    try:
        run_steps(rank, world, args)
    finally:
        dist.destroy_process_group()


def run_steps(rank: int, world: int, args: argparse.Namespace) -> None:
    torch.manual_seed(args.seed)  # Same initial model everywhere (DDP broadcasts it anyway).
    model = nn.parallel.DistributedDataParallel(make_model(args.model))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = nn.CrossEntropyLoss()
    batches = Batches(args, rank, world)
    evaluator = Evaluator(args, rank, world) if args.eval_every > 0 else None
    evaluations = []
    model.train()

    def step() -> float:
        x, y = batches.next()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()

    loss = float("nan")
    for i in range(args.warmup_steps):
        loss = step()
        if rank == 0 and not args.quiet:
            print(f"warm-up step {i + 1}/{args.warmup_steps}: loss {loss:.4f}", flush=True)
    dist.barrier()
    start = time.perf_counter()
    report_every = max(1, args.steps // 10)
    per_epoch = batches.steps_per_epoch()
    for i in range(args.steps):
        loss = step()
        if rank == 0 and not args.quiet and ((i + 1) % report_every == 0 or i + 1 == args.steps):
            print(f"step {i + 1}/{args.steps}: loss {loss:.4f}", flush=True)
        if evaluator is None:
            continue
        done = i + 1
        last = done == args.steps or (args.warmup_steps + done) % per_epoch == 0
        if last or done % args.eval_every == 0:
            trained = time.perf_counter() - start - evaluator.seconds
            samples = 0 if last else args.eval_samples  # Epoch and run ends: the whole test set.
            accuracy = evaluator.accuracy(model.module, samples)
            evaluations.append({"step": done, "seconds": trained, "test_accuracy": accuracy})
            if rank == 0 and not args.quiet:
                print(f"step {done}: test accuracy {100 * accuracy:.2f}% "
                      f"after {trained:.1f} s of training", flush=True)
    dist.barrier()
    seconds = time.perf_counter() - start - (evaluator.seconds if evaluator else 0.0)

    mean_loss = torch.tensor([loss], dtype=torch.float64)
    dist.all_reduce(mean_loss)
    if rank != 0:
        return
    samples = args.batch_size * world * args.steps
    result = {
        "system": "pytorch-ddp" if args.backend == "gloo" else "pytorch-ddp+gradsync",
        "model": args.model,
        "workers": world,
        "batch_size": args.batch_size,
        "threads": args.threads,
        "dataset": args.dataset,
        "steps": args.steps,
        "warmup_steps": args.warmup_steps,
        "samples_per_s": samples / seconds,
        "seconds": seconds,
        "final_loss": mean_loss.item() / world,
        "lr": args.lr,
        "momentum": args.momentum,
        "seed": args.seed,
        "backend": args.backend,
        "eval_every": args.eval_every,
        "eval_samples": args.eval_samples,
        "evaluations": evaluations,
        "final_test_accuracy": evaluations[-1]["test_accuracy"] if evaluations else None,
        "torch_version": torch.__version__,
    }
    print(
        f"{result['system']} {args.model}: {world} workers × batch {args.batch_size}, "
        f"{args.steps} steps in {seconds:.3f} s = {result['samples_per_s']:.1f} samples/s, "
        f"final loss {result['final_loss']:.4f}",
        flush=True,
    )
    if args.json:
        directory = os.path.dirname(os.path.abspath(args.json))
        os.makedirs(directory, exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.dataset == "fashion-mnist":
        # Fail before starting any process if the files are missing or malformed.
        names = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"]
        if args.eval_every > 0:
            names += ["t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
        for name in names:
            path = os.path.join(args.data_dir, name)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"{path} not found (see --data-dir)")
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        for var in ("MASTER_ADDR", "MASTER_PORT"):
            if var not in os.environ:
                raise ValueError(f"RANK and WORLD_SIZE are set but {var} is not")
        train(rank, world, args)
        return 0
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    # join=True: if any rank raises, the others are terminated and the error is re-raised here.
    mp.spawn(train, args=(args.workers, args), nprocs=args.workers, join=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (OSError, ValueError) as e:
        print(f"ddp_train: error: {e}", file=sys.stderr)
        sys.exit(1)
    except mp.ProcessRaisedException as e:
        print(f"ddp_train: error: a rank failed:\n{e}", file=sys.stderr)
        sys.exit(1)
    except mp.ProcessExitedException as e:
        print(f"ddp_train: error: {e}", file=sys.stderr)
        sys.exit(1)
