"""One rank of a torch.distributed test job: dist_worker.py SCENARIO OUT_DIR [ARGS...]
(conftest.run_job starts it with worker="dist_worker.py").

The program is a plain torch.distributed one: `dist.init_process_group("gradsync")` after
`import gradsync.torch` and nothing else of gradsync's; a gloo group over the same ranks
(dist.new_group(backend="gloo")) runs the same calls, and the test compares the two. The result
(or the error that ended the rank) goes to OUT_DIR/rank{R}.pt, as rank_worker.py's do.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import gradsync.torch  # noqa: F401  (registers the "gradsync" backend)
from workload import fresh_model, share

OUT = Path(".")
R = dist.ReduceOp
# The dtypes gloo reduces, with inputs small enough that every reduction below is exact.
DTYPES = [torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.uint8,
          torch.int8]
SIZES = [0, 1, 1003]
LARGE = (1 << 20) + 3


def values(rank: int, count: int, dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
    """Small whole numbers unique-ish per (rank, index): exact in every dtype, sums too."""
    return ((torch.arange(count) * 3 + salt) % 7 + rank + 1).to(dtype)


def ops_for(dtype: torch.dtype) -> list[str]:
    """The names of the reductions gloo runs on `dtype` (ReduceOp objects print as addresses)."""
    ops = ["SUM", "PRODUCT", "MIN", "MAX"]
    if not dtype.is_floating_point:
        ops += ["BAND", "BOR", "BXOR"]
    return ops


def battery(group, gloo: bool) -> dict:
    """Every collective on `group`, on this rank's inputs; what each produced, by name. Where
    gloo lacks a call (all_gather_into_tensor, reduce_scatter, all_to_all of lists), its side
    computes the same from the calls it has."""
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    out = {}
    for dtype in DTYPES:
        for count in SIZES + ([LARGE] if dtype == torch.float32 else []):
            for op in ops_for(dtype):
                t = values(rank, count, dtype)
                dist.all_reduce(t, op=getattr(R, op), group=group)
                out[f"all_reduce/{dtype}/{count}/{op}"] = t
            for root in range(size):
                t = values(rank, count, dtype, salt=root)
                dist.broadcast(t, src=_global(group, root), group=group)
                out[f"broadcast/{dtype}/{count}/{root}"] = t
            gathered = [torch.empty(count, dtype=dtype) for _ in range(size)]
            if count or not gloo:  # gloo's allgather of empty tensors dies of SIGFPE (1.13)
                dist.all_gather(gathered, values(rank, count, dtype), group=group)
            out[f"all_gather/{dtype}/{count}"] = torch.stack(gathered)
            whole = torch.empty(count * size, dtype=dtype)
            if gloo:
                whole = torch.cat(gathered)
            else:
                dist.all_gather_into_tensor(whole, values(rank, count, dtype), group=group)
            out[f"all_gather_into_tensor/{dtype}/{count}"] = whole
            out.update(reduce_scatters(group, gloo, rank, size, dtype, count))
    out.update(exchanges(group, rank, size, gloo))
    return out


def reduce_scatters(group, gloo: bool, rank: int, size: int, dtype, count: int) -> dict:
    """reduce_scatter_tensor (SUM) and reduce_scatter of a list (MAX); gloo: all_reduce, then
    this rank's block."""
    out = {}
    block = torch.empty(count, dtype=dtype)
    whole = values(rank, count * size, dtype)
    if gloo:
        dist.all_reduce(whole, group=group)
        block = whole[rank * count:(rank + 1) * count]
    else:
        dist.reduce_scatter_tensor(block, whole, group=group)
    out[f"reduce_scatter_tensor/{dtype}/{count}"] = block.clone()
    pieces = [values(rank, count, dtype, salt=j) for j in range(size)]
    if gloo:
        for piece in pieces:
            dist.all_reduce(piece, op=R.MAX, group=group)
        block = pieces[rank]
    else:
        dist.reduce_scatter(block, pieces, op=R.MAX, group=group)
    out[f"reduce_scatter/{dtype}/{count}"] = block.clone()
    return out


def _global(group, group_rank: int) -> int:
    return dist.distributed_c10d.get_global_rank(group, group_rank) \
        if group is not None and group is not dist.group.WORLD else group_rank


def exchanges(group, rank: int, size: int, gloo: bool) -> dict:
    """all-to-all (equal and uneven splits), reduce, gather, scatter, objects, barrier."""
    out = {}
    for rows in (0, 1, 5):
        t = values(rank, rows * size * 3, torch.float32).view(rows * size, 3)
        received = torch.empty_like(t)
        dist.all_to_all_single(received, t, group=group)
        out[f"all_to_all_single/{rows}"] = received
    sent = [j + 1 for j in range(size)]  # rank r sends j + 1 rows to rank j
    got = [rank + 1] * size
    t = values(rank, sum(sent) * 2, torch.int64).view(-1, 2)
    received = torch.empty(sum(got), 2, dtype=torch.int64)
    dist.all_to_all_single(received, t, got, sent, group=group)
    out["all_to_all_single/uneven"] = received
    inputs = [values(rank, j + 2, torch.float64, salt=j) for j in range(size)]
    outputs = [torch.empty(rank + 2, dtype=torch.float64) for _ in range(size)]
    if gloo:
        flat = torch.empty(sum(t.numel() for t in outputs), dtype=torch.float64)
        dist.all_to_all_single(flat, torch.cat(inputs), [rank + 2] * size,
                               [j + 2 for j in range(size)], group=group)
        outputs = list(flat.split(rank + 2)) if flat.numel() else outputs
    else:
        dist.all_to_all(outputs, inputs, group=group)
    out["all_to_all"] = outputs
    for root in range(size):
        t = values(rank, 11, torch.int32)
        dist.reduce(t, dst=_global(group, root), op=R.SUM, group=group)
        if rank == root:
            out[f"reduce/{root}"] = t
        gathered = [torch.empty(4) for _ in range(size)] if rank == root else None
        dist.gather(values(rank, 4, torch.float32), gathered, dst=_global(group, root), group=group)
        if rank == root:
            out[f"gather/{root}"] = gathered
        piece = torch.empty(6, dtype=torch.int64)
        chunks = [values(j, 6, torch.int64, salt=root) for j in range(size)] if rank == root else None
        dist.scatter(piece, chunks, src=_global(group, root), group=group)
        out[f"scatter/{root}"] = piece
    objects = [None] * size
    dist.all_gather_object(objects, {"rank": rank, "text": "x" * rank}, group=group)
    out["all_gather_object"] = objects
    listed = [f"from {rank}", rank] if rank == 0 else [None, None]
    dist.broadcast_object_list(listed, src=_global(group, 0), group=group)
    out["broadcast_object_list"] = listed
    dist.barrier(group=group)
    return out


def init() -> None:
    if "RANK" in os.environ:
        dist.init_process_group("gradsync")
        return
    with socket.socket() as s:  # one process alone: no launcher
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gradsync", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                            world_size=1)


def collectives() -> dict:
    """The battery on the gradsync backend and on gloo, with the gradsync async path too."""
    gloo = dist.new_group(backend="gloo")
    result = {"backend": dist.get_backend(), "gradsync": battery(None, False),
              "gloo": battery(gloo, True), "beyond_gloo": beyond_gloo()}
    t = values(dist.get_rank(), 9, torch.float32)
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    result["async"] = t
    t = values(dist.get_rank(), 9, torch.float32)
    result["future"] = dist.all_reduce(t, async_op=True).get_future().wait()[0]
    coalesced = [values(dist.get_rank(), n, torch.float32) for n in (0, 1, 7)]
    dist.all_reduce_coalesced(coalesced)
    result["coalesced"] = coalesced
    return result


def beyond_gloo() -> dict:
    """What gloo does not reduce (bool, bfloat16) and AVG: the test checks them naively."""
    rank, out = dist.get_rank(), {}
    for dtype in (torch.bool, torch.bfloat16):
        for op in ("SUM", "MIN", "MAX", "PRODUCT"):
            t = (values(rank, 50, torch.int64) % (rank + 2) if dtype == torch.bool
                 else values(rank, 50, torch.int64)).to(dtype)
            dist.all_reduce(t, op=getattr(R, op))
            out[f"{dtype}/{op}"] = t
    t = values(rank, 50, torch.float32)
    dist.all_reduce(t, op=R.AVG)
    out["avg"] = t
    return out


def subgroups() -> dict:
    """Groups of some ranks, overlapping: the battery on each, gradsync and gloo."""
    out = {}
    for ranks in ([0, 2], [1, 2], [0, 1, 2]):
        mine = dist.new_group(ranks)
        theirs = dist.new_group(ranks, backend="gloo")
        if dist.get_rank() in ranks:
            out[str(ranks)] = {
                "gradsync": exchanges(mine, dist.get_rank(mine), len(ranks), False),
                "gloo": exchanges(theirs, dist.get_rank(theirs), len(ranks), True)}
    return out


def point_to_point() -> dict:
    """A ring of sends (blocking, then isend/irecv), and a message per tag out of order."""
    rank, size = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % size, (rank - 1) % size
    got = torch.empty(5, dtype=torch.int64)
    if rank % 2 == 0:
        dist.send(values(rank, 5, torch.int64), right)
        dist.recv(got, left)
    else:
        dist.recv(got, left)
        dist.send(values(rank, 5, torch.int64), right)
    tagged = [torch.empty(3) for _ in range(2)]
    works = [dist.irecv(tagged[1], left, tag=7), dist.irecv(tagged[0], left, tag=3)]
    works += [dist.isend(values(rank, 3, torch.float32, salt=3), right, tag=3),
              dist.isend(values(rank, 3, torch.float32, salt=7), right, tag=7)]
    for w in works:
        w.wait()
    batched = torch.empty(4, dtype=torch.int64)
    for w in dist.batch_isend_irecv([dist.P2POp(dist.irecv, batched, left),
                                     dist.P2POp(dist.isend, values(rank, 4, torch.int64), right)]):
        w.wait()
    return {"ring": got, "tagged": tagged, "batched": batched}


def ddp(steps: str) -> dict:
    """The same model and batches under DDP on gradsync and on gloo: parameters each step."""
    gloo = dist.new_group(backend="gloo")
    out = {}
    for name, group in (("gradsync", None), ("gloo", gloo)):
        torch.manual_seed(0)
        model = fresh_model()
        wrapped = DistributedDataParallel(model, process_group=group)
        opt = torch.optim.SGD(wrapped.parameters(), lr=0.1, momentum=0.9)
        out[name] = []
        for step in range(int(steps)):
            x, y = share(step)
            opt.zero_grad()
            F.cross_entropy(wrapped(x), y).backward()
            opt.step()
            out[name].append([p.detach().clone() for p in model.parameters()])
    return out


def lost_rank(mode: str) -> dict:
    """Rank 1 dies after one step (an allreduce, or a DDP step); the others' next must fail,
    naming it."""
    if mode == "ddp":
        model = DistributedDataParallel(fresh_model())

        def step(i):
            x, y = share(i)
            F.cross_entropy(model(x), y).backward()
    else:
        t = torch.ones(1000)

        def step(i):
            dist.all_reduce(t)
    step(0)
    if dist.get_rank() == 1:
        os._exit(3)
    started = time.monotonic()
    try:
        for i in range(1, 100):
            step(i)
            time.sleep(0.05)
    except Exception as e:  # noqa: BLE001 (what the test checks)
        return {"error": type(e).__name__, "message": str(e),
                "seconds": time.monotonic() - started}
    return {"error": None}


SCENARIOS = {"collectives": collectives, "subgroups": subgroups,
             "point_to_point": point_to_point, "ddp": ddp, "lost_rank": lost_rank}


def main() -> int:
    global OUT
    scenario, out_dir, *args = sys.argv[1:]
    OUT = Path(out_dir)
    init()
    code = 0
    try:
        result = {"value": SCENARIOS[scenario](*args)}
    except BaseException as e:  # noqa: BLE001 (the test inspects every failure)
        result = {"error": type(e).__name__, "message": str(e)}
        code = 1
    torch.save(result, OUT / f"rank{dist.get_rank()}.pt")
    if code:
        print(f"rank {dist.get_rank()}: {result['error']}: {result['message']}", flush=True)
    # Every group, gloo's too, goes while the interpreter is whole: torch 1.13's gloo groups left
    # to the interpreter's teardown may abort the process ("terminate called without an active
    # exception": their threads still hold work with tensors; pytorch/pytorch#190489), as rank 1
    # of the subgroups scenario did once under load in CI.
    dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main())
