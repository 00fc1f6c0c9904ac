#!/usr/bin/python3
"""Fashion-MNIST data-parallel with gradsync: examples/python/train_single.py ported, Horovod
style (docs/python.md shows the diff). Each rank trains on its share of every global batch.

    gradsync launch -n 4 -- python3 examples/python/train.py --compression powersgd:4
    torchrun --nproc_per_node 4 examples/python/train.py --schedule p3   (GRADSYNC_JOB_TOKEN set)
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
    parser.add_argument("--schedule", default="wfbp", help="fifo, wfbp, fusion:MB, p3")
    parser.add_argument("--compression", default="none", help="none, fp16, topk:D, powersgd:R...")
    parser.add_argument("--sync", default="ssgd", help="ssgd, sharded, localsgd:H, asgd...")
    args = parser.parse_args()
    gs.init()
    torch.manual_seed(0)
    train_x, train_y = load(args.data_dir, "train")
    test_x, test_y = load(args.data_dir, "t10k")
    model = gs.DistributedModel(Net())  # p3 and sharded: each layer waits for its own update
    gs.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    optimizer = gs.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                        schedule=args.schedule, compression=args.compression,
                                        sync=args.sync)
    step = 0
    for epoch in range(args.epochs):
        for x, y in batches(train_x, train_y, args.batch_size, epoch, gs.rank(), gs.size()):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            if step % 100 == 0 and gs.rank() == 0:
                print(f"step {step}: loss {loss.item():.4f}", flush=True)
            if step == args.steps:
                break
    optimizer.synchronize_model()  # the one global model where ranks' copies differ
    accuracy = evaluate(model, test_x, test_y)
    if gs.rank() == 0:
        print(f"after {step} steps: test accuracy {100 * accuracy:.2f}%")


if __name__ == "__main__":
    main()
