#!/usr/bin/python3
"""Fashion-MNIST through parameter servers: every worker pushes its gradients, the servers
apply SGD with momentum and send the parameters back. Co-located (every rank trains and runs
one server thread; the default) or separate (--servers K: the last K ranks only serve).
--sync odsgd (the default), ssdsgd:K and cdsgd:K let a worker take a local step on its own
gradient while the servers' update is in flight; asgd and ssp:S wait for no one.

    gradsync launch -n 4 -- python3 examples/python/parameter_server.py --sync ssdsgd:4
    gradsync launch -n 5 -- python3 examples/python/parameter_server.py --servers 1 --sync asgd
"""

import argparse

import gradsync.torch as gs
import torch
import torch.nn.functional as F
from torch import nn

from fashion_mnist import batches, evaluate, load


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5)
        self.conv2 = nn.Conv2d(16, 32, 5)
        self.fc1 = nn.Linear(32 * 4 * 4, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=0, help="stop after this many (0: all)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--sync", default="odsgd", help="ssgd, asgd, ssp:S, odsgd, ssdsgd:K...")
    parser.add_argument("--compression", default="none", help="pushes: none, fp16, topk:D...")
    parser.add_argument("--servers", type=int, default=0, help="separate server ranks")
    args = parser.parse_args()
    gs.init()
    torch.manual_seed(0)  # the same initial model on every worker (rank 0 also seeds servers)
    train_x, train_y = load(args.data_dir, "train")
    test_x, test_y = load(args.data_dir, "t10k")
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    options = dict(sync=args.sync, compression=args.compression, servers=args.servers,
                   parameter_servers=True)
    if gs.is_server(args.servers):
        gs.serve(optimizer, model.named_parameters(), **options)  # until the workers stop
        return
    optimizer = gs.DistributedOptimizer(optimizer, model.named_parameters(), **options)
    workers = gs.size() - args.servers
    step = 0
    for epoch in range(args.epochs):
        for x, y in batches(train_x, train_y, args.batch_size, epoch, gs.rank(), workers):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            if step % 100 == 0 and gs.rank() == 0:
                print(f"step {step}: loss {loss.item():.4f}", flush=True)
            if step == args.steps:
                break
    optimizer.synchronize_model()  # every worker: the servers' model
    accuracy = evaluate(model, test_x, test_y)
    if gs.rank() == 0:
        print(f"after {step} steps: the servers' model has test accuracy {100 * accuracy:.2f}%; "
              f"rank 0 sent {optimizer.metrics()['bytes_sent'] / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
