"""gradsync as a torch.distributed backend (dist_worker.py): every collective against gloo on the
same inputs and ranks (1, 2, 3; dtypes gloo reduces; sizes 0, 1, non-divisible and a million),
groups of some ranks, send/recv, DDP's parameters against DDP on gloo, a lost rank."""

from __future__ import annotations

import pytest
import torch

from conftest import max_relative_difference
from dist_worker import values


def dist_job(job, size, scenario, *args, **kwargs):
    return job(size, scenario, *args, worker="dist_worker.py", **kwargs)


def assert_same(mine, theirs, where=""):
    """Equal values (and dtypes) all the way down: tensors, lists, dicts, plain values."""
    if isinstance(mine, torch.Tensor):
        assert mine.dtype == theirs.dtype and torch.equal(mine, theirs), \
            f"{where}: {mine.flatten()[:8]} != {theirs.flatten()[:8]}"
    elif isinstance(mine, dict):
        assert mine.keys() == theirs.keys(), where
        for key in mine:
            assert_same(mine[key], theirs[key], f"{where}/{key}")
    elif isinstance(mine, (list, tuple)):
        assert len(mine) == len(theirs), where
        for i, (a, b) in enumerate(zip(mine, theirs)):
            assert_same(a, b, f"{where}[{i}]")
    else:
        assert mine == theirs, f"{where}: {mine} != {theirs}"


@pytest.mark.parametrize("size", [1, 2, 3])
def test_every_collective_equals_gloos(job, size):
    result = dist_job(job, size, "collectives", timeout=300).check()
    for rank, r in enumerate(result.results):
        value = r["value"]
        assert value["backend"] == "gradsync"
        assert_same(value["gradsync"], value["gloo"], f"rank {rank}")
        expected = sum(values(q, 9, torch.float32) for q in range(size))
        assert torch.equal(value["async"], expected)
        assert torch.equal(value["future"], expected)
        for n, t in zip((0, 1, 7), value["coalesced"]):
            assert torch.equal(t, sum(values(q, n, torch.float32) for q in range(size)))
        check_beyond_gloo(value["beyond_gloo"], size)


def check_beyond_gloo(got: dict, size: int) -> None:
    """bool and bfloat16 (gloo reduces neither) and AVG (gloo has none), naively."""
    combine = {"SUM": torch.add, "MIN": torch.minimum, "MAX": torch.maximum, "PRODUCT": torch.mul}
    for dtype in (torch.bool, torch.bfloat16):
        inputs = [(values(q, 50, torch.int64) % (q + 2) if dtype == torch.bool
                   else values(q, 50, torch.int64)).to(dtype) for q in range(size)]
        for op, f in combine.items():
            if dtype == torch.bool:
                f = {"SUM": torch.logical_or, "PRODUCT": torch.logical_and}.get(op, f)
            expected = inputs[0]
            for t in inputs[1:]:
                expected = f(expected, t)
            assert torch.equal(got[f"{dtype}/{op}"], expected), (dtype, op)
    average = sum(values(q, 50, torch.float32) for q in range(size)) / size
    assert torch.allclose(got["avg"], average)


def test_groups_of_some_ranks_equal_gloos(job):
    result = dist_job(job, 3, "subgroups").check()
    for rank, r in enumerate(result.results):
        groups = r["value"]
        assert set(groups) == {g for g in ("[0, 2]", "[1, 2]", "[0, 1, 2]") if str(rank) in g}
        for name, both in groups.items():
            assert_same(both["gradsync"], both["gloo"], f"rank {rank} group {name}")


@pytest.mark.parametrize("size", [2, 3])
def test_send_and_recv(job, size):
    result = dist_job(job, size, "point_to_point").check()
    for rank, r in enumerate(result.results):
        left = (rank - 1) % size
        v = r["value"]
        assert torch.equal(v["ring"], ((torch.arange(5) * 3) % 7 + left + 1))
        for i, salt in enumerate((3, 7)):
            assert torch.equal(v["tagged"][i], ((torch.arange(3) * 3 + salt) % 7 + left + 1).float())
        assert torch.equal(v["batched"], ((torch.arange(4) * 3) % 7 + left + 1))


@pytest.mark.parametrize("size", [2, 3])
def test_ddp_on_gradsync_gives_gloos_parameters(job, size):
    result = dist_job(job, size, "ddp", "3").check()
    for r in result.results:
        mine, theirs = r["value"]["gradsync"], r["value"]["gloo"]
        for step, (a, b) in enumerate(zip(mine, theirs)):
            # Sums of 2 or 3 gradients, in another order than gloo's ring on 3: float rounding.
            assert max_relative_difference(a, b) < 1e-5, f"step {step}"


@pytest.mark.parametrize("mode", ["allreduce", "ddp"])
def test_a_lost_rank_fails_the_others_naming_it(job, mode):
    result = dist_job(job, 3, "lost_rank", mode)
    assert result.codes[1] == 3
    for rank in (0, 2):
        v = result.results[rank]["value"]
        assert v["error"] is not None, f"rank {rank} never noticed"
        assert "rank 1" in v["message"], v["message"]
        assert v["seconds"] < 10, v
