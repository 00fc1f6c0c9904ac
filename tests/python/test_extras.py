"""The rest of the API from Python: gradient accumulation (backward_passes_per_step) against one
rank on the whole batch, gs.trace of a step window from every rank, gs.metrics, and join for a
rank whose data ends first (every rank returns, with one model)."""

import json

import torch

from conftest import max_relative_difference


def test_backward_passes_per_step_accumulate_before_averaging(job):
    one = job(1, "accumulated", "1").check().results[0]["value"]
    two = job(2, "accumulated", "2").check()
    for rank in range(2):
        difference = max_relative_difference(one, two.results[rank]["value"])
        print(f"2 ranks x 2 passes, rank {rank}: {difference:.3g}")
        assert difference < 1e-5


def test_trace_metrics_and_join(job, tmp_path):
    path = tmp_path / "trace.json"
    result = job(3, "extras", str(path)).check()
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    assert trace["otherData"]["ranks"] == 3
    assert {e["pid"] for e in events} == {0, 1, 2}
    names = {e["name"] for e in events}
    assert "step 1" in names and "step 2" in names and "step 3" not in names, sorted(names)
    communication = [e for e in events if e.get("tid") == 1 and e.get("ph") == "X"]
    assert communication, "no operation on the communication lane"
    for value in (r["value"] for r in result.results):
        metrics = value["metrics"]
        assert metrics["size"] == 3 and metrics["steps"] == 4
        assert 0 < metrics["bytes_sent"] < metrics["dense_bytes"]  # top-k sent less than dense
    joined = [r["value"]["joined"] for r in result.results]
    for other in joined[1:]:
        for a, b in zip(joined[0], other):
            assert torch.equal(a, b)
