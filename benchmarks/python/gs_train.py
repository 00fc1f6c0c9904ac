#!/usr/bin/python3
"""Data-parallel training with gradsync from Python (gs.DistributedOptimizer): the peer of
benchmarks/peers/ddp_train.py (PyTorch DDP) and of `gradsync train` (the C++ CLI).

    /usr/bin/python3 benchmarks/python/gs_train.py --workers 2 --model cnn --dataset synthetic \\
        --batch-size 64 --steps 60 --warmup-steps 0 --threads 1 --json results/gs-cnn.json

Everything but the distributed layer is ddp_train.py's own (its models, data, sharding, timing
and evaluation), so that a samples/s ratio compares gradsync's Python package with DDP and
nothing else: the model is wrapped in gs.DistributedModel, SGD (lr, momentum) in
gs.DistributedOptimizer with --schedule, --compression and --sync, and rank 0's parameters are
broadcast first. Launches its ranks itself (torch.multiprocessing), or runs as one rank under a
launcher (RANK and WORLD_SIZE set: `gradsync launch`, torchrun, scripts/netem). gs.init() keeps
freed memory in the heap as `gradsync train` does (--default-allocator: glibc's own policy).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "peers"))
import ddp_train  # noqa: E402  (its data, models and sharding: the same as DDP's)
from ddp_models import MODELS, make_model  # noqa: E402


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--model", choices=MODELS, default="cnn")
    parser.add_argument("--dataset", choices=("synthetic", "fashion-mnist"), default="synthetic")
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--batch-size", type=int, default=64, help="per worker")
    parser.add_argument("--steps", type=int, default=60, help="timed steps")
    parser.add_argument("--warmup-steps", type=int, default=10, help="untimed steps before")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--schedule", default="wfbp")
    parser.add_argument("--compression", default="none")
    parser.add_argument("--sync", default="ssgd")
    parser.add_argument("--eval-every", type=int, default=0)
    parser.add_argument("--eval-samples", type=int, default=0)
    parser.add_argument("--default-allocator", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--quiet", action="store_true")
    return parser.parse_args(argv)


class Evaluator(ddp_train.Evaluator):
    """ddp_train's evaluation with gradsync's collectives instead of torch.distributed's."""

    def accuracy(self, model, samples: int = 0) -> float:
        import gradsync.torch as gs

        start = time.perf_counter()
        test_size = min(samples, len(self.y)) if samples > 0 else len(self.y)
        with torch.no_grad():
            gs.average_buffers(model)
            was_training = model.training
            model.eval()
            mine = torch.arange(self.rank, test_size, self.world)
            counts = torch.zeros(2)
            for first in range(0, len(mine), self.BATCH):
                idx = mine[first:first + self.BATCH]
                logits = model(ddp_train.normalized(self.x[idx]))
                counts[0] += (logits.argmax(1) == self.y[idx]).sum().item()
                counts[1] += len(idx)
            model.train(was_training)
            gs.allreduce_(counts, op=gs.Sum)
        self.seconds += time.perf_counter() - start
        return counts[0].item() / counts[1].item() if counts[1] > 0 else 0.0


def run(args: argparse.Namespace) -> None:
    import gradsync.torch as gs

    torch.set_num_threads(args.threads)
    gs.init(keep_freed_memory=not args.default_allocator)
    rank, world = gs.rank(), gs.size()
    torch.manual_seed(args.seed)
    model = gs.DistributedModel(make_model(args.model))
    gs.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = gs.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum),
        named_parameters=model.named_parameters(), schedule=args.schedule,
        compression=args.compression, sync=args.sync, seed=args.seed)
    batches = ddp_train.Batches(args, rank, world)
    evaluator = Evaluator(args, rank, world) if args.eval_every > 0 else None
    evaluations = []

    def step() -> float:
        x, y = batches.next()
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()

    loss = float("nan")
    for _ in range(args.warmup_steps):
        loss = step()
    optimizer.wait_for_parameters()
    gs.barrier()
    start = time.perf_counter()
    per_epoch = batches.steps_per_epoch()
    for i in range(args.steps):
        loss = step()
        done = i + 1
        if rank == 0 and not args.quiet and done % max(1, args.steps // 10) == 0:
            print(f"step {done}/{args.steps}: loss {loss:.4f}", flush=True)
        if evaluator is None:
            continue
        last = done == args.steps or (args.warmup_steps + done) % per_epoch == 0
        if last or done % args.eval_every == 0:
            optimizer.wait_for_parameters()
            trained = time.perf_counter() - start - evaluator.seconds
            evaluate = lambda: evaluator.accuracy(model.module, 0 if last else args.eval_samples)
            accuracy = optimizer.with_global_model(evaluate)
            evaluations.append({"step": done, "seconds": trained, "test_accuracy": accuracy})
            if rank == 0 and not args.quiet:
                print(f"step {done}: test accuracy {100 * accuracy:.2f}% after {trained:.1f} s",
                      flush=True)
    optimizer.wait_for_parameters()
    gs.barrier()
    seconds = time.perf_counter() - start - (evaluator.seconds if evaluator else 0.0)
    mean_loss = gs.allreduce(torch.tensor([loss])).item()
    metrics = optimizer.metrics()
    if rank != 0:
        return
    steps_run = args.warmup_steps + args.steps
    result = {
        "system": "gradsync-python", "model": args.model, "workers": world,
        "batch_size": args.batch_size, "threads": args.threads, "dataset": args.dataset,
        "steps": args.steps, "warmup_steps": args.warmup_steps,
        "samples_per_s": args.batch_size * world * args.steps / seconds, "seconds": seconds,
        "final_loss": mean_loss, "lr": args.lr, "momentum": args.momentum, "seed": args.seed,
        "schedule": args.schedule, "compression": args.compression, "sync": args.sync,
        "allocator": "glibc default" if args.default_allocator else "freed memory kept",
        "bytes_sent_per_step": metrics["bytes_sent"] / steps_run,
        "dense_bytes_per_step": metrics["dense_bytes"] / steps_run,
        "wait_seconds_per_step": metrics["wait_seconds"] / steps_run,
        "eval_every": args.eval_every, "eval_samples": args.eval_samples,
        "evaluations": evaluations,
        "final_test_accuracy": evaluations[-1]["test_accuracy"] if evaluations else None,
    }
    print(f"gradsync-python {args.model}: {world} workers x batch {args.batch_size}, "
          f"{args.steps} steps in {seconds:.3f} s = {result['samples_per_s']:.1f} samples/s, "
          f"final loss {mean_loss:.4f}", flush=True)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


def spawned(rank: int, world: int, port: int, token: str, args: argparse.Namespace) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      GRADSYNC_JOB_TOKEN=token)
    run(args)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        run(args)
        return 0
    mp.spawn(spawned, args=(args.workers, ddp_train.free_port(), secrets.token_hex(16), args),
             nprocs=args.workers, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
