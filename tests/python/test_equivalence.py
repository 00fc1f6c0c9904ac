"""Two ranks equal one with the same global batch: the engine's averages (wfbp), its per-slice
updates (p3) and its sharded updates, with SGD (momentum 0.9) and Adam, and schedule "auto"
switching between p3's slices (or fusion's buckets) every few steps, against one process
running the same steps; within 1e-5 relative, the bound of the C++ tests
(tests/unit/torch/api/distributed_optimizer_test.cc), which one missing update exceeds by far."""

import math

import torch
import torch.nn.functional as F

from conftest import max_relative_difference
from workload import MOMENTUM_WARMUP, batch, fresh_model, make_optimizer, parameters

CONFIGS = ["wfbp/ssgd/sgd", "p3/ssgd/sgd", "wfbp/sharded/sgd",
           "wfbp/ssgd/adam", "p3/ssgd/adam", "wfbp/sharded/adam",
           "auto:steps=1/ssgd/sgd", "auto:tune=fusion/ssgd/adam"]


def test_two_ranks_equal_one_with_the_same_global_batch(job):
    one = job(1, "equivalence", ",".join(CONFIGS)).check().results[0]["value"]
    two = job(2, "equivalence", ",".join(CONFIGS)).check()
    for config in CONFIGS:
        for rank in range(2):
            difference = max_relative_difference(one[config], two.results[rank]["value"][config])
            print(f"{config}, rank {rank}: {difference:.3g}")
            assert difference < 1e-5, f"{config} on rank {rank}: {difference}"
    # The comparison can fail: one step fewer is far outside the bound.
    moved = max_relative_difference(one["wfbp/ssgd/sgd"], one["wfbp/ssgd/adam"])
    assert moved > 1e-2


def naive_frozen_adamw(steps: int = 6) -> list[torch.Tensor]:
    """One process on the global batches: AdamW for the warm-up, then AdamW's update with the
    second moment and its bias correction left as the warm-up made them (v rising only where
    the momentum outgrows it): 1-bit Adam's rule (docs/algorithms.md), written out."""
    model = fresh_model()
    optimizer = make_optimizer("adamw", model)
    group = optimizer.param_groups[0]
    lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
    for step in range(steps):
        x, y = batch(step)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        if step < MOMENTUM_WARMUP:
            optimizer.step()
            continue
        with torch.no_grad():
            for p in model.parameters():
                state = optimizer.state[p]
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.copy_(torch.maximum(v, v * beta2 + m * m * (1 - beta2)))
                state["step"] += 1
                p.mul_(1 - lr * decay)
                bias1 = 1 - beta1 ** int(state["step"])
                bias2 = 1 - beta2 ** MOMENTUM_WARMUP
                p.sub_(lr / bias1 * m / (v.sqrt() / math.sqrt(bias2) + eps))
    return parameters(model)


def test_compressed_momentum_is_adamw_with_the_second_moment_frozen(job):
    """compress_momentum=True (1-bit Adam from Python): with topk:1 (every value sent) the
    averaged momenta are the global batch's, so 1 and 3 ranks end where the naive replay does
    (1e-5, as the C++ test), also when the warm-up's steps go through synchronize() and
    skip_synchronize() (Horovod's clipping recipe, where the optimizer steps outside step()),
    and with schedule p3 (the engine applies the update); with 1-bit codes, all-gathered or
    through the compressed all-reduce, every rank applies the same update (bitwise)."""
    reference = naive_frozen_adamw()
    for ranks, recipe in ((1, "step"), (3, "step"), (3, "horovod"), (3, "p3")):
        result = job(ranks, "momentum", "topk:1", recipe).check()
        for rank in range(ranks):
            difference = max_relative_difference(reference, result.results[rank]["value"])
            print(f"topk:1 on {ranks} ranks ({recipe}), rank {rank}: {difference:.3g}")
            assert difference < 1e-5, (ranks, recipe, rank, difference)
    for codes in ("onebit", "onebit,allreduce=on"):  # all-gathered, and 1-bit Adam's all-reduce
        onebit = job(3, "momentum", codes).check()
        for rank in (1, 2):
            assert max_relative_difference(onebit.results[0]["value"],
                                           onebit.results[rank]["value"]) == 0, (codes, rank)
    # The check can fail: plain AdamW after the warm-up ends elsewhere.
    plain = job(1, "equivalence", "wfbp/ssgd/adamw").check().results[0]["value"]
    assert max_relative_difference(reference, plain["wfbp/ssgd/adamw"]) > 1e-4
