#!/usr/bin/python3
"""torch.distributed's all_reduce over a size sweep, on gloo or on gradsync's backend, in the
nccl-tests style: per size, the mean time per call of rank 0 (after a barrier, over enough
iterations to fill about --seconds), algbw = bytes / time and busbw = algbw × 2(P-1)/P.

    /usr/bin/python3 benchmarks/peers/dist_allreduce.py --backend gradsync --workers 4 \\
        --min-bytes 4096 --max-bytes 67108864 --json results/dist-allreduce-gradsync.json

Launches one process per rank itself (torch.multiprocessing.spawn); float32 SUM, CPU tensors,
one compute thread per rank.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("gloo", "gradsync"), default="gloo")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--min-bytes", type=int, default=4096)
    parser.add_argument("--max-bytes", type=int, default=64 << 20)
    parser.add_argument("--factor", type=int, default=4, help="size step")
    parser.add_argument("--seconds", type=float, default=0.5, help="timed per size")
    parser.add_argument("--json", help="write the result here (rank 0)")
    return parser.parse_args(argv)


def timed(tensor: torch.Tensor, iterations: int) -> float:
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(tensor)
    dist.barrier()
    return (time.perf_counter() - start) / iterations


def sweep(rank: int, world: int, args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    if args.backend == "gradsync":
        import gradsync.torch  # noqa: F401  (registers the backend)
    dist.init_process_group(args.backend, rank=rank, world_size=world)
    rows = []
    size = args.min_bytes
    while size <= args.max_bytes:
        tensor = torch.ones(size // 4)
        probe = timed(tensor, 3)  # also the warm-up
        count = torch.tensor([max(3, min(2000, int(args.seconds / max(probe, 1e-6))))])
        dist.broadcast(count, 0)  # every rank runs as many
        seconds = timed(tensor, int(count))
        algbw = size / seconds / 1e9
        rows.append({"bytes": size, "iterations": int(count), "seconds": seconds,
                     "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (world - 1) / world})
        if rank == 0:
            print(f"{args.backend:9} {size:>10} B {seconds * 1e6:>10.1f} us "
                  f"busbw {rows[-1]['busbw_gbps']:.3f} GB/s", flush=True)
        size *= args.factor
    if rank == 0 and args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"backend": args.backend, "workers": world, "rows": rows}, f, indent=2)
    dist.destroy_process_group()


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]))
    mp.spawn(sweep, args=(args.workers, args), nprocs=args.workers, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
