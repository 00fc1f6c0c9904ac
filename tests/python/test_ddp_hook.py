"""gs.ddp_comm_hook under PyTorch's DistributedDataParallel (on gloo for its own set-up, or on
gradsync's torch.distributed backend; gradsync's transport for the gradients), 2 ranks, buckets of a few KB (several per step), 2 steps: with
compression "none" every gradient is bitwise what DDP's own gloo average gives; with a
compressor, bitwise what gs.DistributedOptimizer's engine (wfbp) gives for the same seed. The
hook's state_dict resumes a run bitwise."""

import pytest
import torch

METHODS = ["topk:0.05", "powersgd:2", "qsgd:16", "randomk:0.05", "fp16"]


@pytest.mark.parametrize("scenario", ["ddp", "ddp_gradsync"])
def test_ddp_hook_equals_ddp_and_the_engine(job, scenario):
    result = job(2, scenario, ",".join(METHODS), env={"GLOO_SOCKET_IFNAME": "lo"}).check()
    for rank in range(2):
        grads = result.results[rank]["value"]
        for step in range(2):
            for a, b in zip(grads["ddp"][step], grads["hook none"][step]):
                assert torch.equal(a, b), f"rank {rank} step {step}: hook none != DDP"
        for method in METHODS:
            for step in range(2):
                hook, engine = grads[f"hook {method}"][step], grads[f"engine {method}"][step]
                for a, b in zip(hook, engine):
                    assert torch.equal(a, b), f"{method}, rank {rank} step {step}"
            # A compressor changes the gradient: the equality above is not the dense one's.
            assert any(not torch.equal(a, b) for a, b in zip(grads[f"hook {method}"][1],
                                                              grads["ddp"][1])), method

    for rank in range(2):
        grads = result.results[rank]["value"]
        for a, b in zip(grads["resumed"][0], grads["whole"][2]):
            assert torch.equal(a, b), f"rank {rank}: the resumed step differs"
        assert any(not torch.equal(a, b) for a, b in zip(grads["stateless"][0],
                                                          grads["whole"][2]))
        metrics = grads["metrics"]
        assert metrics["steps"] == 1 and 0 < metrics["bytes_sent"] < metrics["dense_bytes"]
