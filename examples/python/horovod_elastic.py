#!/usr/bin/python3
"""Horovod's elastic PyTorch training (hvd.elastic.run, TorchState, ElasticSampler, commit and
reset callbacks) as Horovod users write it, with `import gradsync.torch as hvd`. Workers may be
lost and come back while it trains; the data are Debian's Fashion-MNIST.

    gradsync launch --elastic --max-restarts 2 -n 4 -- python3 examples/python/horovod_elastic.py

Kill a worker (kill -9) while it trains: the others restore their last commit and go on without
it within about a second; the launcher restarts it, and it comes back in at the next commit with
the current state. docs/python.md, "Elastic training", says what re-forms and how.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.utils.data import DataLoader, Subset, TensorDataset

import gradsync.torch as hvd  # was: import horovod.torch as hvd
from fashion_mnist import load


def make_model() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--samples", type=int, default=12000, help="of the training set")
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--global-batch-size", type=int, default=0,
                        help="if set: split over the workers, learning rate not scaled")
    parser.add_argument("--lr", type=float, default=0.01, help="per worker (scaled by size)")
    parser.add_argument("--batches-per-commit", type=int, default=1)
    parser.add_argument("--schedule", default="wfbp", help="wfbp, fifo, fusion or p3")
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--save", help="rank 0 saves the final parameters and the rounds here")
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(42)
    torch.set_num_threads(1)
    train_x, train_y = load(args.data_dir, "train")
    dataset = Subset(TensorDataset(train_x, train_y), range(args.samples))

    def batch_and_lr():  # per worker, for the current number of workers
        if not args.global_batch_size:
            return args.batch_size, args.lr * hvd.size()
        if args.global_batch_size % hvd.size():
            parser.error(f"--global-batch-size must split over {hvd.size()} workers")
        return args.global_batch_size // hvd.size(), args.lr

    model = make_model()
    optimizer = optim.SGD(model.parameters(), lr=batch_and_lr()[1], momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         schedule=args.schedule)
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=7)
    loader = DataLoader(dataset, batch_size=batch_and_lr()[0], sampler=sampler)

    def on_reset():  # the learning rate follows the number of workers, as in Horovod's examples
        nonlocal loader
        batch, lr = batch_and_lr()
        loader = DataLoader(dataset, batch_size=batch, sampler=sampler)
        for group in optimizer.param_groups:
            group["lr"] = lr

    state = hvd.elastic.TorchState(model, optimizer, train_sampler=sampler, epoch=0, steps=0,
                                   sizes=[hvd.size()])
    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        if state.sizes[-1] != hvd.size():
            state.sizes.append(hvd.size())
        while state.epoch < args.epochs:
            for index, (x, y) in enumerate(loader):
                optimizer.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
                state.train_sampler.record_batch(index, loader.batch_size)
                state.steps += 1
                if state.steps % args.batches_per_commit == 0:
                    state.commit()
                if hvd.rank() == 0 and state.steps % 50 == 0:
                    print(f"epoch {state.epoch + 1} step {state.steps}: loss {loss.item():.4f} "
                          f"({hvd.size()} workers)", flush=True)
            state.epoch += 1
            state.train_sampler.set_epoch(state.epoch)
            state.commit()

    started = time.monotonic()
    train(state)
    model.eval()
    with torch.no_grad():
        test_x, test_y = load(args.data_dir, "t10k")
        accuracy = (model(test_x).argmax(1) == test_y).float().mean().item()
    if hvd.rank() == 0:
        print(f"trained {state.steps} steps in {time.monotonic() - started:.1f} s with "
              f"{' -> '.join(map(str, state.sizes))} workers; test accuracy {100 * accuracy:.2f}%")
        if args.save:
            every = hvd.allgather_object([p.detach().clone() for p in model.parameters()])
            torch.save({"parameters": every, "sizes": state.sizes, "steps": state.steps,
                        "accuracy": accuracy}, args.save)
    elif args.save:
        hvd.allgather_object([p.detach().clone() for p in model.parameters()])


if __name__ == "__main__":
    main()
