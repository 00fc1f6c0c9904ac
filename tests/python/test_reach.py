"""Every compressor and every synchronization strategy is reachable from Python and trains a
few steps (finite losses, parameters moved, bytes sent); bad specs raise ValueError (gs.ConfigError)
listing the choices, on a job of one in this process."""

import math

import pytest
import torch

import gradsync.torch as gs
from workload import fresh_model


def test_every_compressor_and_strategy_trains(job):
    result = job(2, "reach").check()
    runs = result.results[0]["value"]
    assert len(runs) == 15 + 14
    for config, run in runs.items():
        assert all(math.isfinite(loss) for loss in run["losses"]), config
        assert run["moved"] > 0, config
        if "localsgd" not in config:
            assert run["bytes"] > 0, config
        # asgd and ssp answer each push with its staleness; the others report none.
        asynchronous = "'asgd'" in config or "'ssp:2'" in config
        assert (run["async_pushes"] > 0) == asynchronous, (config, run["async_pushes"])
    # The two ranks agree on every loss (each is allreduced) and train the same replicas.
    assert result.results[1]["value"].keys() == runs.keys()


@pytest.fixture(scope="module")
def alone():
    gs.init(handle_ctrl_c=False)
    yield
    gs.shutdown()


def refusal(**options) -> str:
    model = fresh_model()
    with pytest.raises(ValueError) as raised:
        gs.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                model.named_parameters(), **options)
    assert isinstance(raised.value, gs.ConfigError)
    return str(raised.value)


def test_bad_specs_raise_value_error_listing_the_choices(alone):
    assert "fusion" in refusal(schedule="sideways") and "p3" in refusal(schedule="sideways")
    message = refusal(compression="zip")
    assert "powersgd" in message and "topk" in message, message
    message = refusal(sync="bogus")
    assert "sharded" in message and "localsgd" in message, message
    assert "topk" in refusal(compression="topk:2")
    assert "backward passes" in refusal(backward_passes_per_step=0)
    assert "Adam or AdamW" in refusal(compression="onebit", compress_momentum=True,
                                      compress_warmup=2)
    with pytest.raises(ValueError, match="powersgd"):
        gs.ddp_comm_hook("zip")
    with pytest.raises(ValueError, match="gs.Average"):
        gs.allreduce(torch.ones(2), op="median")


def test_update_modes_refuse_what_the_engine_cannot_apply(alone):
    model = fresh_model()
    with pytest.raises(gs.ConfigError, match="SGD, Adam and AdamW"):
        gs.DistributedOptimizer(torch.optim.RMSprop(model.parameters()), schedule="p3")
    # Alone there is no engine: p3 runs the optimizer as gradient mode would.
    model = fresh_model()
    with pytest.raises(gs.ConfigError, match="maximize"):
        gs.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, maximize=True),
                                sync="sharded")


def test_compressed_momentum_says_when_it_exchanges_momenta(alone):
    """compress_momentum (1-bit Adam) alone: dense steps for the warm-up, then momenta;
    exchanges_momenta tells a loop when it may no longer synchronize() (to clip)."""
    model = fresh_model()
    optimizer = gs.DistributedOptimizer(torch.optim.AdamW(model.parameters(), lr=1e-2),
                                        model.named_parameters(), compression="onebit",
                                        compress_warmup=2, compress_momentum=True)
    seen = []
    for step in range(3):
        seen.append(optimizer.exchanges_momenta)
        optimizer.zero_grad()
        model(torch.randn(4, 1, 8, 8)).square().mean().backward()
        optimizer.step()
    assert seen == [False, False, True]
    assert int(optimizer.state[model.fc1.weight]["step"]) == 3  # the engine's step counted
    with pytest.raises(gs.ConfigError, match="averages momenta"):
        optimizer.synchronize()
    optimizer._close()
