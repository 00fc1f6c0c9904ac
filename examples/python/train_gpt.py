#!/usr/bin/python3
"""A character-level GPT on Debian's fortunes with gradsync and AdamW: the model and data of
`gradsync train --model gpt` (docs/models.md, docs/data.md) in plain PyTorch, Horovod style.

    gradsync launch -n 2 -- python3 examples/python/train_gpt.py --steps 300
    gradsync launch -n 4 -- python3 examples/python/train_gpt.py --compression onebit \
        --compress-momentum --compress-warmup 30       # 1-bit Adam
    gradsync launch -n 4 -- python3 examples/python/train_gpt.py --compress-momentum \
        --compression onebit,bucket=512,allreduce=on --compress-warmup 57  # its all-reduce

(Under AdamW the guard keeps sparsifiers and PowerSGD dense: docs/algorithms.md, "The
optimizer rule".)

Bytes are the tokens (256 of them); the last tenth of the corpus is held out; each sample is a
window of context + 1 bytes (inputs, and shifted by one the targets), windows overlapping by one
byte. Clipping follows Horovod's recipe: synchronize(), clip, then step() without synchronizing
(with --compress-momentum during the dense warm-up only: past it the ranks exchange momenta in
backward and step() applies Adam's update itself).
"""

import argparse
import math
import os

import gradsync.torch as gs
import torch
import torch.nn.functional as F
from torch import nn

FORTUNES = "/usr/share/games/fortunes"


def load_corpus(path: str) -> bytes:
    """A UTF-8 file, or a folder's text files in name order (links and binary files skipped)."""
    if not os.path.isdir(path):
        return open(path, "rb").read()
    text = b""
    for name in sorted(os.listdir(path)):
        file = os.path.join(path, name)
        if os.path.islink(file) or not os.path.isfile(file):
            continue
        data = open(file, "rb").read()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if b"\0" not in data:
            text += data
    return text


def windows(text: bytes, window: int) -> torch.Tensor:
    """Every window of `window` bytes, each starting window - 1 after the previous one."""
    tokens = torch.tensor(list(text), dtype=torch.long)
    count = (len(tokens) - 1) // (window - 1)
    starts = torch.arange(count) * (window - 1)
    return tokens[starts[:, None] + torch.arange(window)]


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.expand, self.project = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def attention(self, x):
        batch, tokens, width = x.shape
        q, k, v = (t.view(batch, tokens, self.heads, -1).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, dim=2))
        scores = q @ k.transpose(-2, -1) / math.sqrt(width // self.heads)
        future = torch.ones(tokens, tokens, dtype=torch.bool).triu(1)
        mixed = scores.masked_fill(future, float("-inf")).softmax(-1) @ v
        return self.out(mixed.transpose(1, 2).reshape(batch, tokens, width))

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.project(F.gelu(self.expand(self.norm2(x))))


class Gpt(nn.Module):
    def __init__(self, layers=2, width=128, heads=4, context=64):
        super().__init__()
        self.token_embedding = nn.Embedding(256, width)
        self.position_embedding = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, 256, bias=False)

    def forward(self, tokens):
        x = self.token_embedding(tokens) + self.position_embedding(
            torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def loss_of(model, batch):
    logits = model(batch[:, :-1])
    return F.cross_entropy(logits.reshape(-1, 256), batch[:, 1:].reshape(-1))


@torch.no_grad()
def held_out_loss(model, held_out, batch_size=64):
    """The mean loss in nats per token, each rank taking every size()-th window."""
    model.eval()
    mine = held_out[gs.rank()::gs.size()]
    total = sum(loss_of(model, mine[i:i + batch_size]).item() * len(mine[i:i + batch_size])
                for i in range(0, len(mine), batch_size))
    sums = gs.allreduce(torch.tensor([total, float(len(mine))]), op=gs.Sum)
    model.train()
    return (sums[0] / sums[1]).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", default=FORTUNES, help="a UTF-8 file or a folder")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=64, help="windows per rank")
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--warmup-steps", type=int, default=50)
    parser.add_argument("--clip-grad-norm", type=float, default=1.0)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--compression", default="none", help="none, fp16, topk:D, powersgd:R...")
    parser.add_argument("--sync", default="ssgd", help="ssgd, localsgd:H...")
    parser.add_argument("--compress-warmup", type=int, default=0, help="dense steps first")
    parser.add_argument("--compress-warmup-codec", default="none",
                        help="how those steps send: none (float32), fp16 or int8")
    parser.add_argument("--compress-momentum", action="store_true",
                        help="1-bit Adam: exchange compressed momenta after the warm-up")
    args = parser.parse_args()
    gs.init()
    torch.manual_seed(0)
    text = load_corpus(args.corpus)
    held = len(text) // 10
    train, held_out = windows(text[:-held], args.context + 1), windows(text[-held:],
                                                                        args.context + 1)
    model = Gpt(args.layers, args.width, args.heads, args.context)
    gs.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    # Linear warm-up, then a cosine down to a tenth of --lr at the last step (as gradsync train).
    def factor(step):
        if step < args.warmup_steps:
            return (step + 1) / args.warmup_steps
        progress = min(1.0, (step - args.warmup_steps) / max(1, args.steps - 1 - args.warmup_steps))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    optimizer = gs.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                        compression=args.compression, sync=args.sync,
                                        compress_warmup=args.compress_warmup,
                                        compress_warmup_codec=args.compress_warmup_codec,
                                        compress_momentum=args.compress_momentum)
    generator = torch.Generator().manual_seed(1000 + gs.rank())  # each rank its own windows
    local = args.sync.startswith(("localsgd", "diloco"))  # each rank steps on its own gradients
    for step in range(args.steps):
        batch = train[torch.randint(len(train), (args.batch_size,), generator=generator)]
        optimizer.zero_grad()
        loss = loss_of(model, batch)
        loss.backward()
        if optimizer.exchanges_momenta:  # past 1-bit Adam's warm-up: momenta, not gradients
            optimizer.step()
        else:
            if not local:
                optimizer.synchronize()  # the averaged gradients, then clip them
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
            if local:
                optimizer.step()
            else:
                with optimizer.skip_synchronize():
                    optimizer.step()
        schedule.step()
        if (step + 1) % 100 == 0 and gs.rank() == 0:
            print(f"step {step + 1}: loss {loss.item():.4f}", flush=True)
    optimizer.synchronize_model()  # the one global model where ranks' copies differ
    loss = held_out_loss(model, held_out)
    sent = optimizer.metrics()["bytes_sent"] / args.steps
    if gs.rank() == 0:
        print(f"after {args.steps} steps: held-out loss {loss:.4f} nats/token "
              f"({loss / math.log(2):.3f} bits/byte), {sent:,.0f} bytes sent per step")


if __name__ == "__main__":
    main()
