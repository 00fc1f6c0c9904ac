#!/usr/bin/python3
"""Fashion-MNIST with PyTorch's DistributedDataParallel, gradsync underneath: DDP buckets the
gradients and overlaps them with backward as always; gs.ddp_comm_hook averages each bucket
with gradsync's compressors over gradsync's transport (docs/python.md).

    gradsync launch -n 4 -- python3 examples/python/train_ddp.py --compression powersgd:4
    torchrun --nproc_per_node 4 examples/python/train_ddp.py   (GRADSYNC_JOB_TOKEN set)
    torchrun --nproc_per_node 4 examples/python/train_ddp.py --backend gradsync
"""

import argparse
import os

import gradsync.torch as gs
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

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
    parser.add_argument("--compression", default="none", help="none, fp16, topk:D, powersgd:R...")
    parser.add_argument("--backend", default="gloo", choices=["gloo", "gradsync"],
                        help="torch.distributed's backend for DDP's own group")
    args = parser.parse_args()
    if "WORLD_SIZE" not in os.environ:  # alone, without a launcher
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    # DDP's own group (its start-up broadcast), on MASTER_PORT. On the "gradsync" backend the
    # group is the gradsync job itself; beside gloo, gs.init() joins one (its store on a port
    # rank 0 picks) for the hook's transport.
    dist.init_process_group(args.backend)
    gs.init()
    torch.manual_seed(0)
    train_x, train_y = load(args.data_dir, "train")
    test_x, test_y = load(args.data_dir, "t10k")
    model = DistributedDataParallel(Net())
    model.register_comm_hook(gs.DdpHookState(model), gs.ddp_comm_hook(args.compression))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
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
    accuracy = evaluate(model.module, test_x, test_y)
    if gs.rank() == 0:
        print(f"after {step} steps: test accuracy {100 * accuracy:.2f}%")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
