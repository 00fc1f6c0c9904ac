#!/usr/bin/python3
"""Fashion-MNIST on one process: a small CNN, SGD with momentum, one epoch.
examples/python/train.py is this script ported to gradsync (docs/python.md shows the diff)."""

import argparse

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
    args = parser.parse_args()
    torch.manual_seed(0)
    train_x, train_y = load(args.data_dir, "train")
    test_x, test_y = load(args.data_dir, "t10k")
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    step = 0
    for epoch in range(args.epochs):
        for x, y in batches(train_x, train_y, args.batch_size, epoch):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            if step % 100 == 0:
                print(f"step {step}: loss {loss.item():.4f}", flush=True)
            if step == args.steps:
                break
    accuracy = evaluate(model, test_x, test_y)
    print(f"after {step} steps: test accuracy {100 * accuracy:.2f}%")


if __name__ == "__main__":
    main()
