#!/usr/bin/python3
"""A Horovod PyTorch program as Horovod users write them (Horovod's own MNIST example, its
structure and calls), ported to gradsync by changing one line: `import horovod.torch as hvd`
became `import gradsync.torch as hvd`. The data are Debian's Fashion-MNIST (no torchvision).

    gradsync launch -n 4 -- python3 examples/python/horovod_mnist.py --fp16-allreduce
    torchrun --nproc_per_node 4 examples/python/horovod_mnist.py   (GRADSYNC_JOB_TOKEN set)

What it uses of Horovod's API: hvd.init, rank/size/local_rank, hvd.SyncBatchNorm,
broadcast_parameters, broadcast_optimizer_state, DistributedOptimizer with
hvd.Compression.fp16 or .none and op=hvd.Average, metric averaging with
hvd.allreduce(name=...), and hvd.join() at the end (every rank has the same number of steps
here; for unequal data gradsync's DistributedOptimizer needs join=True, docs/python.md).

As Horovod's example, each rank takes --batch-size samples per step and the learning rate
scales with the ranks; --global-batch-size G instead gives each rank G / size samples at an
unscaled rate, so that 1, 2 or 3 ranks take the same steps (tests/python/test_horovod.py).
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn, optim

import gradsync.torch as hvd  # was: import horovod.torch as hvd
from fashion_mnist import load


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.bn1 = hvd.SyncBatchNorm(10)  # batch statistics over every rank's samples
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.bn1(self.conv1(x)), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def metric_average(value, name):
    return hvd.allreduce(torch.tensor(value), name=name).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--global-batch-size", type=int, default=0,
                        help="if set: split over the ranks, learning rate not scaled")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--momentum", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--fp16-allreduce", action="store_true")
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--save", help="rank 0 saves the final parameters here (torch.save)")
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    train_x, train_y = load(args.data_dir, "train")
    test_x, test_y = load(args.data_dir, "t10k")

    if args.global_batch_size:
        if args.global_batch_size % hvd.size():
            parser.error(f"--global-batch-size must split over {hvd.size()} ranks")
        batch, lr_scaler = args.global_batch_size // hvd.size(), 1
    else:
        batch, lr_scaler = args.batch_size, hvd.size()
    model = Net()
    optimizer = optim.SGD(model.parameters(), lr=args.lr * lr_scaler, momentum=args.momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression, op=hvd.Average)

    # A sampler as DistributedSampler(shuffle=False) is: rank r takes every size-th sample.
    mine = torch.arange(hvd.rank(), len(train_y), hvd.size())
    model.train()
    for step in range(args.steps):
        index = mine[step * batch:(step + 1) * batch]
        optimizer.zero_grad()
        loss = F.cross_entropy(model(train_x[index]), train_y[index])
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            average = metric_average(loss.item(), "avg_loss")
            if hvd.rank() == 0:
                print(f"step {step}: loss {average:.4f}", flush=True)
    last = hvd.join()  # every rank is done

    model.eval()
    with torch.no_grad():
        # Each rank scores its share of the test set; the averages are every rank's.
        part = slice(hvd.rank(), len(test_y), hvd.size())
        output = model(test_x[part])
        test_loss = F.cross_entropy(output, test_y[part]).item()
        accuracy = (output.argmax(1) == test_y[part]).float().mean().item()
    test_loss = metric_average(test_loss, "avg_loss")
    accuracy = metric_average(accuracy, "avg_accuracy")
    if hvd.rank() == 0:
        print(f"last to join: rank {last}; test set: average loss {test_loss:.4f}, "
              f"test accuracy {100 * accuracy:.2f}%")
        if args.save:
            torch.save([p.detach().clone() for p in model.parameters()], args.save)


if __name__ == "__main__":
    main()
