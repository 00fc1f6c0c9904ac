"""One rank of a test job: rank_worker.py SCENARIO OUT_DIR [ARGS...] (conftest.run_job starts it).

Each scenario trains or communicates with gradsync.torch (workload.py's model and data) and
returns what the test checks; the result, or the error that ended the rank (its type, message
and rank attribute), goes to OUT_DIR/rank{R}.pt. A scenario may write OUT_DIR/ready-{R} once it
is under way, for tests that signal the ranks.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import gradsync.torch as gs
from horovod_scenarios import HOROVOD_SCENARIOS
from workload import MOMENTUM_WARMUP, fresh_model, make_optimizer, parameters, share, train

OUT = Path(".")
COMPRESSORS = ["none", "fp16", "int8", "topk:0.05", "mstopk:0.05", "gtopk:0.05", "randomk:0.05",
               "dgc:0.05", "qsgd:16", "terngrad", "twobit", "onebit", "signsgd", "powersgd:2",
               "gradiveq:2"]
STRATEGIES = [{"schedule": "fifo"}, {"schedule": "fusion:0.001"}, {"schedule": "p3"},
              {"sync": "sharded"}, {"sync": "localsgd:2"}, {"parameter_servers": True},
              {"sync": "asgd"}, {"sync": "ssp:2"}, {"sync": "odsgd"}, {"sync": "ssdsgd:2"},
              {"sync": "cdsgd:2"}, {"sync": "asgd", "compression": "topk:0.1"},
              {"sync": "ssp:2", "compensate": "sc"},
              {"schedule": "p3", "compression": "powersgd:2"}]


def ready() -> None:
    (OUT / f"ready-{gs.rank()}").touch()


def equivalence(configs: str) -> dict:
    """Each configuration ("schedule/sync/optimizer", comma separated): the parameters after
    the same global batches."""
    out = {}
    for spec in configs.split(","):
        schedule, sync, optimizer = spec.split("/")
        _, model, opt = train({"schedule": schedule, "sync": sync, "optimizer": optimizer})
        out[spec] = parameters(model)
        opt._close()
    return out


def reach() -> dict:
    """Every compressor (wfbp) and every strategy trains 3 steps: losses, how far the
    parameters moved, the bytes sent."""
    out = {}
    configs = [{"compression": c, "compress_min_elements": 64} for c in COMPRESSORS] + STRATEGIES
    for config in configs:
        config = dict(config)
        # dgc applies momentum itself: the optimizer must not.
        kind = "sgd-plain" if config.get("compression", "").startswith("dgc") else "sgd"
        config["optimizer"] = kind
        before = parameters(fresh_model())
        losses, model, opt = train(config, steps=3)
        moved = max((a - b).abs().max().item() for a, b in zip(before, parameters(model)))
        metrics = opt.metrics()
        out[repr(config)] = {"losses": losses, "moved": moved, "bytes": metrics["bytes_sent"],
                             "async_pushes": metrics["async_pushes"]}
        opt._close()
    return out


def killed(victim: str, at_step: str) -> list:
    """Trains (p3); rank `victim` kills itself with SIGKILL at step `at_step`."""
    model = gs.DistributedModel(fresh_model())
    opt = gs.DistributedOptimizer(make_optimizer("sgd", model), model.named_parameters(),
                                  schedule="p3")
    losses = []
    for step in range(1000):
        if gs.rank() == int(victim) and step == int(at_step):
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = share(step % 8)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def shrunk(victim: str, at_step: str) -> dict:
    """Trains (wfbp); rank `victim` kills itself with SIGKILL at step `at_step`; the survivors
    catch the failure, gs.shrink() to a job of their own, make their parameters equal again
    (broadcast from the new rank 0) and train 5 steps more."""
    model = gs.DistributedModel(fresh_model())
    opt = gs.DistributedOptimizer(make_optimizer("sgd", model), model.named_parameters())
    old_rank, step, lost = gs.rank(), 0, None
    while step < int(at_step) + 5:
        if gs.rank() == int(victim) and step == int(at_step) and lost is None:
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = share(step % 8)
        opt.zero_grad()
        try:
            F.cross_entropy(model(x), y).backward()
            opt.step()
        except gs.PeerLostError as e:
            lost = str(e)
            gs.shrink(window=1.0)
            gs.broadcast_parameters(model.state_dict(), root_rank=0)
            continue
        step += 1
    return {"old_rank": old_rank, "rank": gs.rank(), "size": gs.size(), "lost": lost,
            "parameters": parameters(model)}


def interrupted() -> int:
    """Trains until a signal stops it (wfbp with top-k); ready after 3 steps."""
    model = gs.DistributedModel(fresh_model())
    opt = gs.DistributedOptimizer(make_optimizer("sgd", model), model.named_parameters(),
                                  compression="topk:0.1", compress_min_elements=64)
    for step in range(100000):
        x, y = share(step % 8)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        if step == 3:
            ready()
    return step


def collectives() -> dict:
    """Broadcasts of parameters and optimizer state, and the tensor collectives, on ranks that
    start apart (each its own seed)."""
    torch.manual_seed(100 + gs.rank())
    model = type(fresh_model())()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    if gs.rank() == 0:  # rank 0 alone has taken a step: only it has Adam's moments
        x, y = share(0)
        F.cross_entropy(model(x), y).backward()
        opt.step()
    gs.broadcast_parameters(model.state_dict(), root_rank=0)
    gs.broadcast_optimizer_state(opt, root_rank=0)
    r, n = gs.rank(), gs.size()
    counts = torch.tensor([r + 1, 1000 * r], dtype=torch.int64)
    handle = gs.allreduce_async(torch.full((5,), float(r)), op=gs.Sum)
    return {
        "parameters": parameters(model),
        "adam_state": {k: {n_: v.clone() if torch.is_tensor(v) else v for n_, v in s.items()}
                       for k, s in opt.state_dict()["state"].items()},
        "average": gs.allreduce(torch.arange(7, dtype=torch.float32) * (r + 1)),
        "sum_async": handle.wait(),
        "int_sum": gs.allreduce(counts, op=gs.Sum),
        "half": gs.allreduce(torch.full((3,), r + 0.5, dtype=torch.float16)),
        "gathered": gs.allgather(torch.full((r + 1, 2), r, dtype=torch.int64)),
        "gathered_float": gs.allgather(torch.full((2, 3), float(r))),
        "broadcast": gs.broadcast(torch.tensor([r, r * 10], dtype=torch.int32), root_rank=n - 1),
        "object": gs.broadcast_object({"from": r} if r == 1 else None, root_rank=1),
        "objects": gs.allgather_object(f"rank {r}"),
        "empty": gs.allreduce(torch.zeros(0)),
    }


def ddp(methods: str) -> dict:
    """Gradients after each of 2 steps: DDP alone (gloo's average), DDP with gs.ddp_comm_hook
    ("none" and each of `methods`), and gs.DistributedOptimizer (wfbp) with each method."""
    out = {}

    def run(make, key, steps=2, model=None, first=0):
        model = model or fresh_model()
        wrapped, opt, sync = make(model)
        grads = []
        for step in range(first, first + steps):
            x, y = share(step)
            opt.zero_grad()
            F.cross_entropy(wrapped(x), y).backward()
            if sync:
                opt.synchronize()
            grads.append([p.grad.clone() for p in model.parameters()])
            if sync:
                with opt.skip_synchronize():
                    opt.step()
            else:
                opt.step()
        out[key] = grads
        return model, wrapped

    def plain_ddp(model):
        return DistributedDataParallel(model, bucket_cap_mb=0.004), torch.optim.SGD(
            model.parameters(), lr=0.1), False

    states = []

    def hooked(method, saved=None):
        def make(model):
            wrapped = DistributedDataParallel(model, bucket_cap_mb=0.004)
            state = gs.DdpHookState(wrapped)
            if saved is not None:
                state.load_state_dict(saved)
            states.append(state)
            wrapped.register_comm_hook(state, gs.ddp_comm_hook(method, compress_min_elements=64,
                                                               seed=3))
            return wrapped, torch.optim.SGD(model.parameters(), lr=0.1), False
        return make

    def engine(method):
        def make(model):
            opt = gs.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                          model.named_parameters(), compression=method,
                                          compress_min_elements=64, seed=3)
            return model, opt, True
        return make

    run(plain_ddp, "ddp")
    for method in ["none"] + methods.split(","):
        run(hooked(method), f"hook {method}")
        if method != "none":
            run(engine(method), f"engine {method}")
    # The hook's state_dict: 2 steps, saved; a fresh DDP model and state loaded from it give the
    # third step of an uninterrupted run (error feedback's residuals restored), and without the
    # state another one.
    run(hooked("topk:0.05"), "whole", steps=3)
    model, _ = run(hooked("topk:0.05"), "first", steps=2)
    saved, parameters_after = states[-1].state_dict(), model.state_dict()
    for key, state in (("resumed", saved), ("stateless", None)):
        resumed = fresh_model()
        resumed.load_state_dict(parameters_after)
        run(hooked("topk:0.05", state), key, steps=1, model=resumed, first=2)
    out["metrics"] = states[-1].metrics()
    return out


def resume_first(directory: str, configs: str) -> dict:
    """Per configuration: the losses of 6 uninterrupted steps, and a checkpoint after 3."""
    out = {}
    for i, config in enumerate(eval(configs)):  # noqa: S307 (the test's own literal)
        losses, _, opt = train(config, steps=6)
        opt._close()
        out[i] = losses
        _, model, opt = train(config, steps=3)
        state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
        if gs.rank() == 0:
            torch.save(state, os.path.join(directory, f"checkpoint{i}.pt"))
        opt._close()
        gs.barrier()
    return out


def resume_second(directory: str, configs: str) -> dict:
    """Per configuration: fresh objects, the checkpoint loaded, the losses of steps 4 to 6."""
    out = {}
    for i, config in enumerate(eval(configs)):  # noqa: S307
        _, model, opt = train(config, steps=0)
        state = torch.load(os.path.join(directory, f"checkpoint{i}.pt"))
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        out[i] = train(config, steps=3, start=3, model=model, optimizer=opt)[0]
        opt._close()
    return out


def resume_elsewhere(directory: str, configs: str) -> dict:
    """resume_second on another number of ranks: per configuration, the losses of steps 4 to 6,
    or the error's type and message where the state cannot be mapped."""
    out = {}
    for i, config in enumerate(eval(configs)):  # noqa: S307
        _, model, opt = train(config, steps=0)
        state = torch.load(os.path.join(directory, f"checkpoint{i}.pt"))
        model.load_state_dict(state["model"])
        try:
            opt.load_state_dict(state["optimizer"])
            out[i] = train(config, steps=3, start=3, model=model, optimizer=opt)[0]
        except gs.ConfigError as e:
            out[i] = f"ConfigError: {e}"
        opt._close()
    return out


def momentum(compression: str, recipe: str = "step") -> list:
    """compress_momentum (1-bit Adam) under AdamW: MOMENTUM_WARMUP dense steps, then 4 that
    exchange the ranks' momenta coded by `compression`; the parameters. recipe "horovod": the
    warm-up's steps as train_gpt.py takes them, synchronize() then step() in
    skip_synchronize() (where a clip would go), so the optimizer steps outside step(); "p3":
    step() with schedule p3, where the engine applies 1-bit Adam slice by slice."""
    options = {"optimizer": "adamw", "compression": compression, "compress_min_elements": 1,
               "compress_warmup": MOMENTUM_WARMUP, "compress_momentum": True, "guard": False}
    if recipe in ("step", "p3"):
        _, model, opt = train(dict(options, schedule="p3") if recipe == "p3" else options, steps=6)
    else:
        model = gs.DistributedModel(fresh_model())
        opt = gs.DistributedOptimizer(make_optimizer("adamw", model),
                                      named_parameters=model.named_parameters(),
                                      **{k: v for k, v in options.items() if k != "optimizer"})
        for step in range(6):
            x, y = share(step)
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            if opt.exchanges_momenta:
                opt.step()
            else:
                opt.synchronize()
                with opt.skip_synchronize():
                    opt.step()
    opt._close()
    return parameters(model)


def accumulated(passes: str) -> list:
    """Gradient accumulation: each step `passes` backward passes over parts of this rank's
    share, the loss divided among them; the parameters after the steps (SGD, wfbp)."""
    model = gs.DistributedModel(fresh_model())
    opt = gs.DistributedOptimizer(make_optimizer("sgd", model), model.named_parameters(),
                                  backward_passes_per_step=int(passes))
    for step in range(4):
        x, y = share(step)
        opt.zero_grad()
        for part_x, part_y in zip(x.chunk(int(passes)), y.chunk(int(passes))):
            (F.cross_entropy(model(part_x), part_y) / int(passes)).backward()
        opt.step()
    return parameters(model)


def extras(trace_path: str) -> dict:
    """A trace of steps 1-2 (p3, top-k), the metrics, and join: the last rank has data for 2 of
    4 steps, then joins the others' remaining steps."""
    model = gs.DistributedModel(fresh_model())
    opt = gs.DistributedOptimizer(make_optimizer("sgd", model), model.named_parameters(),
                                  schedule="p3", compression="topk:0.1", compress_min_elements=64)
    trace = gs.trace(opt, steps="1:2")
    train({}, steps=4, model=model, optimizer=opt)
    trace.save(trace_path)
    metrics = gs.metrics()
    opt._close()
    model = fresh_model()
    opt = gs.DistributedOptimizer(make_optimizer("sgd", model), model.named_parameters(),
                                  join=True)
    steps = 2 if gs.rank() == gs.size() - 1 else 4
    for step in range(steps):
        x, y = share(step)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    opt.join()
    return {"metrics": metrics, "joined": parameters(model)}


SCENARIOS = {"accumulated": accumulated, "extras": extras, "equivalence": equivalence, "reach": reach, "killed": killed,
             "shrunk": shrunk,
             "interrupted": interrupted, "collectives": collectives, "ddp": ddp,
             "ddp_gradsync": ddp,
             "resume_first": resume_first, "resume_second": resume_second,
             "resume_elsewhere": resume_elsewhere, "momentum": momentum,
             **HOROVOD_SCENARIOS}


def main() -> int:
    global OUT
    scenario, out_dir, *args = sys.argv[1:]
    OUT = Path(out_dir)
    if scenario == "ddp":  # torch.distributed first: gradsync then takes MASTER_PORT + 1
        torch.distributed.init_process_group("gloo")
    if scenario == "ddp_gradsync":  # the same on gradsync's own backend (it joins the job)
        torch.distributed.init_process_group("gradsync")
    gs.init()
    rank = gs.rank()  # its file's name, whatever rank gs.shrink gives it
    code = 0
    try:
        result = {"value": SCENARIOS[scenario](*args)}
    except BaseException as e:  # noqa: BLE001 (the test inspects every failure)
        result = {"error": type(e).__name__, "message": str(e),
                  "error_rank": getattr(e, "rank", None),
                  "origin": getattr(e, "origin", None),
                  "is_gradsync": isinstance(e, gs.GradsyncError),
                  "seconds_after_start": time.monotonic() - START}
        code = 1
    torch.save(result, OUT / f"rank{rank}.pt")
    if code:
        print(f"rank {rank}: {result['error']}: {result['message']}", flush=True)
    if torch.distributed.is_initialized():  # gloo's groups must not wait for the teardown
        torch.distributed.destroy_process_group()  # (dist_worker.py says why)
    return code


START = time.monotonic()

if __name__ == "__main__":
    sys.exit(main())
