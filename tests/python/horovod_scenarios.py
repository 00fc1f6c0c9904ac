"""Scenarios of rank_worker.py written as Horovod programs are: `import gradsync.torch as hvd`
and Horovod's names, signatures and keywords only (test_horovod.py checks what they return)."""

from __future__ import annotations

import torch

import gradsync.torch as hvd


def values(rank: int, count: int, dtype=torch.float32, salt: int = 0) -> torch.Tensor:
    return ((torch.arange(count) * 3 + salt) % 7 + rank + 1).to(dtype)


def reductions() -> dict:
    """Every op of hvd.allreduce on several dtypes, pre/postscale, grouped, fp16 compression."""
    r = hvd.rank()
    out = {}
    for dtype in (torch.float32, torch.float64, torch.int64, torch.float16):
        for op in (hvd.Sum, hvd.Min, hvd.Max, hvd.Product):
            out[f"{dtype}/{op.value}"] = hvd.allreduce(values(r, 1003, dtype), op=op,
                                                       name=f"t.{dtype}.{op.value}")
    out["average_kw"] = hvd.allreduce(values(r, 10), average=True)
    out["positional_op"] = hvd.allreduce(values(r, 10), hvd.Sum)  # gradsync's older form
    out["scaled"] = hvd.allreduce(values(r, 10), op=hvd.Sum, prescale_factor=2.0,
                                  postscale_factor=0.5)
    out["fp16"] = hvd.allreduce(values(r, 10), compression=hvd.Compression.fp16)
    tensors = [values(r, n) for n in (0, 1, 17)]
    out["grouped"] = hvd.grouped_allreduce(tensors, op=hvd.Sum)
    handle = hvd.grouped_allreduce_async_([t.clone() for t in tensors], op=hvd.Max)
    out["grouped_async"] = hvd.synchronize(handle)
    out["adasum"] = hvd.allreduce(values(r, 6) * (1 if r % 2 else -1), op=hvd.Adasum)
    try:
        hvd.allreduce(values(r, 3, torch.int64))
    except hvd.ConfigError as e:
        out["int_average_error"] = str(e)
    return out


def exchanges() -> dict:
    """alltoall (equal and given splits), reducescatter (divisible or not), allgather of
    unequal first dimensions, broadcast from the last rank, hosts."""
    r, n = hvd.rank(), hvd.size()
    out = {"equal": hvd.alltoall(values(r, n * 2 * 3).view(n * 2, 3))}
    splits = torch.tensor([j + 1 for j in range(n)], dtype=torch.int32)
    out["split"], out["received_splits"] = hvd.alltoall(
        values(r, int(splits.sum()) * 2, torch.int64).view(-1, 2), splits=splits)
    out["reducescatter"] = hvd.reducescatter(values(r, (2 * n + 1) * 4).view(2 * n + 1, 4))
    out["reducescatter_sum"] = hvd.reducescatter(values(r, n * 3, torch.int32), op=hvd.Sum)
    out["allgather"] = hvd.allgather(values(r, (r + 1) * 2, torch.int8).view(r + 1, 2))
    out["broadcast"] = hvd.broadcast(values(r, 5, torch.bool), root_rank=n - 1)
    out["hosts"] = (hvd.cross_rank(), hvd.cross_size(), hvd.is_homogeneous(),
                    hvd.local_rank(), hvd.local_size())
    out["built"] = (hvd.mpi_built(), hvd.gloo_built(), hvd.nccl_built())
    out["reducescatter_fp16"] = hvd.reducescatter(values(r, n * 4).view(n, 4), op=hvd.Sum,
                                                  compression=hvd.Compression.fp16)
    return out


def compressed_optimizer() -> dict:
    """hvd.DistributedOptimizer with Horovod's Compression.none and with gradsync's compressors
    in Compression's shape (.topk(d), .spec(text)): 3 steps each, the bytes each sent."""
    from workload import fresh_model, make_optimizer, parameters, share
    import torch.nn.functional as F

    out = {}
    for name, compression in (("none", hvd.Compression.none),
                              ("topk", hvd.Compression.topk(0.05)),
                              ("qsgd", hvd.Compression.spec("qsgd:16"))):
        model = fresh_model()
        optimizer = hvd.DistributedOptimizer(make_optimizer("sgd", model),
                                             named_parameters=model.named_parameters(),
                                             compression=compression, num_groups=0)
        for step in range(3):
            x, y = share(step)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        out[name] = {"bytes": optimizer.metrics()["bytes_sent"], "parameters": parameters(model)}
        optimizer._close()
    return out


def process_sets() -> dict:
    """Two overlapping sets on 3 ranks: each reduces, gathers and broadcasts among its own."""
    r = hvd.rank()
    evens = hvd.add_process_set([0, 2])
    upper = hvd.add_process_set(hvd.ProcessSet([1, 2]))
    out = {"evens": (evens.included(), evens.rank(), evens.size()),
           "upper": (upper.included(), upper.rank(), upper.size())}
    for name, ps in (("evens", evens), ("upper", upper)):
        if ps.included():
            out[f"{name}/sum"] = hvd.allreduce(values(r, 100), op=hvd.Sum, process_set=ps)
            out[f"{name}/gather"] = hvd.allgather(values(r, 2), process_set=ps)
            out[f"{name}/broadcast"] = hvd.broadcast(values(r, 3), root_rank=ps.ranks[-1],
                                                     process_set=ps)
            out[f"{name}/objects"] = hvd.allgather_object(r, process_set=ps)
            hvd.barrier(process_set=ps)
    out["world"] = hvd.allreduce(values(r, 4), op=hvd.Sum)
    if not evens.included():
        try:
            hvd.allreduce(values(r, 4), process_set=evens)
        except hvd.ConfigError as e:
            out["outsider_error"] = str(e)
    hvd.remove_process_set(evens)
    hvd.remove_process_set(upper)
    return out


def sync_batch_norm() -> dict:
    """hvd.SyncBatchNorm on this rank's share of a global batch of 12, beside torch's BatchNorm2d
    on the whole batch in this process (the reference): outputs, input gradients, the
    weight's gradient summed over the ranks, running statistics, eval mode."""
    n, r = hvd.size(), hvd.rank()
    torch.manual_seed(0)
    x, head = torch.randn(12, 3, 5, 5), torch.randn(12, 3, 5, 5)
    bn = hvd.SyncBatchNorm(3)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    ref = torch.nn.BatchNorm2d(3)
    ref.load_state_dict(bn.state_dict())
    rows = slice(r * 12 // n, (r + 1) * 12 // n)
    mine = x[rows].clone().requires_grad_()
    for _ in range(2):  # two steps: the running statistics move twice
        mine.grad, bn.weight.grad, bn.bias.grad = None, None, None
        out = bn(mine)
        (out * head[rows]).sum().backward()
    whole = x.clone().requires_grad_()
    for _ in range(2):
        whole.grad, ref.weight.grad, ref.bias.grad = None, None, None
        out_ref = ref(whole)
        (out_ref * head).sum().backward()
    bn.eval()
    ref.eval()
    return {"out": (out.detach(), out_ref[rows].detach()),
            "grad_x": (mine.grad, whole.grad[rows]),
            "grad_weight": (hvd.allreduce(bn.weight.grad, op=hvd.Sum), ref.weight.grad),
            "grad_bias": (hvd.allreduce(bn.bias.grad, op=hvd.Sum), ref.bias.grad),
            "running": ((bn.running_mean, bn.running_var), (ref.running_mean, ref.running_var)),
            "eval": (bn(x[rows]).detach(), ref(x[rows]).detach())}


def timeline(path: str) -> dict:
    """hvd.start_timeline on every rank, three named collectives and a barrier, stop."""
    hvd.start_timeline(path, mark_cycles=True)
    hvd.allreduce(values(hvd.rank(), 1000), name="grad.fc1.weight")
    hvd.allgather(values(hvd.rank(), 10, torch.int64), name="counts")
    hvd.broadcast(values(hvd.rank(), 3), root_rank=0, name="weights")
    hvd.barrier()
    hvd.stop_timeline()
    hvd.allreduce(values(hvd.rank(), 5), name="after.stop")
    return {}


HOROVOD_SCENARIOS = {"hvd_timeline": timeline, "hvd_sync_batch_norm": sync_batch_norm, "hvd_reductions": reductions, "hvd_exchanges": exchanges,
                     "hvd_process_sets": process_sets,
                     "hvd_compressed_optimizer": compressed_optimizer}
