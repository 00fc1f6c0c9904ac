#!/usr/bin/python3
"""The four image models of gradsync's PyTorch DDP baseline, defined exactly as in docs/models.md.

Input is 1×28×28 (Fashion-MNIST), output 10 logits. gradsync's C++ (LibTorch) versions in
src/torch/ must have the same layers, shapes and parameter order, so that a samples/s ratio
between the two compares the same computation. Parameters use PyTorch's default initialisation.

Choices made where the specification leaves room (also stated in docs/models.md):
- resnet20: projection shortcut (He et al. 2016 "option B": 1x1 conv, bias=False, + BN) where
  the shape changes (first block of stages 2 and 3), identity elsewhere; option A (zero
  padding) is what the paper used for CIFAR, B is the one with parameters, chosen here.
- vgg11: BatchNorm after every conv (as torchvision's vgg11_bn), conv bias kept (True); only 3
  max-pools (28→14→7→3) since a 4th and 5th would shrink 3×3 to nothing; the 512×3×3 map is
  average-pooled to 512; the classifier is 512→512→10 with ReLU and no dropout (dropout only
  changes the numbers, not the work, and would make loss curves noisier to compare).
- No softmax in any model: the training loss is cross-entropy on logits.

Run `/usr/bin/python3 benchmarks/peers/ddp_models.py [--markdown] [NAME...]` to print each
model's parameter table.
"""

from __future__ import annotations

import argparse
import sys
from collections import OrderedDict

import torch
from torch import nn

MODELS = ("mlp", "cnn", "resnet20", "vgg11")
INPUT_SHAPE = (1, 28, 28)
NUM_CLASSES = 10


def mlp() -> nn.Module:
    # Named layers (fc1.weight, ...) so that the C++ twin can register the same names.
    return nn.Sequential(
        OrderedDict(
            flatten=nn.Flatten(),
            fc1=nn.Linear(784, 512),
            relu1=nn.ReLU(),
            fc2=nn.Linear(512, 512),
            relu2=nn.ReLU(),
            fc3=nn.Linear(512, NUM_CLASSES),
        )
    )


def cnn() -> nn.Module:
    return nn.Sequential(
        OrderedDict(
            conv1=nn.Conv2d(1, 32, kernel_size=5, padding=2),
            relu1=nn.ReLU(),
            pool1=nn.MaxPool2d(2),
            conv2=nn.Conv2d(32, 64, kernel_size=5, padding=2),
            relu2=nn.ReLU(),
            pool2=nn.MaxPool2d(2),
            flatten=nn.Flatten(),
            fc1=nn.Linear(64 * 7 * 7, 512),
            relu3=nn.ReLU(),
            fc2=nn.Linear(512, NUM_CLASSES),
        )
    )


def conv3x3(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN, plus shortcut, then ReLU (He et al. 2016, §4.2)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = conv3x3(in_channels, out_channels, stride)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = conv3x3(out_channels, out_channels)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU()
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            # Option B: projection shortcut, only where the shape changes.
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet20(nn.Module):
    """CIFAR ResNet-20 (6n+2 layers, n=3) for 1-channel 28×28 input: 28→28→14→7, then GAP."""

    def __init__(self, blocks_per_stage: int = 3) -> None:
        super().__init__()
        self.conv1 = conv3x3(1, 16)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU()
        stages = []
        in_channels = 16
        for stage, channels in enumerate((16, 32, 64)):
            blocks = []
            for block in range(blocks_per_stage):
                stride = 2 if stage > 0 and block == 0 else 1
                blocks.append(BasicBlock(in_channels, channels, stride))
                in_channels = channels
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3 = stages
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


VGG11_PLAN: tuple[int | str, ...] = (64, "M", 128, "M", 256, 256, "M", 512, 512, 512, 512)


class VGG11(nn.Module):
    """VGG-11 with BatchNorm for 28×28: 3 max-pools (28→14→7→3), GAP to 512, 512→512→10."""

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_channels = INPUT_SHAPE[0]
        for item in VGG11_PLAN:
            if item == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                assert isinstance(item, int)
                layers += [
                    nn.Conv2d(in_channels, item, 3, padding=1),
                    nn.BatchNorm2d(item),
                    nn.ReLU(),
                ]
                in_channels = item
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(512, 512),
            nn.ReLU(),
            nn.Linear(512, NUM_CLASSES),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def make_model(name: str) -> nn.Module:
    """One of MODELS, freshly built with PyTorch's default initialisation."""
    builders = {"mlp": mlp, "cnn": cnn, "resnet20": ResNet20, "vgg11": VGG11}
    if name not in builders:
        raise ValueError(f"unknown model '{name}' (choose from {', '.join(MODELS)})")
    return builders[name]()


def parameter_table(model: nn.Module) -> list[tuple[str, tuple[int, ...], int]]:
    """(name, shape, element count) of each trainable parameter, in registration order.

    BatchNorm running statistics are buffers, not parameters: they are not listed and
    DDP broadcasts them from rank 0 rather than averaging gradients for them.
    """
    return [(n, tuple(p.shape), p.numel()) for n, p in model.named_parameters()]


def count_parameters(model: nn.Module) -> int:
    return sum(numel for _, _, numel in parameter_table(model))


def forward_macs(model: nn.Module) -> int:
    """Multiply-accumulates of Conv2d and Linear layers in one forward pass of one sample.

    BatchNorm, ReLU, pooling and additions are left out (a few % at most). A training step
    costs about 3× this per sample (forward, input gradient, weight gradient); FLOPs = 2×MACs.
    """
    macs = 0

    def hook(module: nn.Module, _inputs: object, output: torch.Tensor) -> None:
        nonlocal macs
        if isinstance(module, nn.Conv2d):
            per_output = module.in_channels // module.groups
            per_output *= module.kernel_size[0] * module.kernel_size[1]
            macs += output[0].numel() * per_output
        elif isinstance(module, nn.Linear):
            macs += module.in_features * module.out_features

    handles = [
        m.register_forward_hook(hook)
        for m in model.modules()
        if isinstance(m, (nn.Conv2d, nn.Linear))
    ]
    try:
        was_training = model.training
        with torch.no_grad():
            model.eval()(torch.zeros(1, *INPUT_SHAPE))
        model.train(was_training)
    finally:
        for handle in handles:
            handle.remove()
    return macs


def markdown_table(model: nn.Module) -> str:
    rows = ["| # | name | shape | elements | bytes (float32) |", "|---:|---|---|---:|---:|"]
    for i, (name, shape, numel) in enumerate(parameter_table(model)):
        dims = "×".join(str(d) for d in shape)
        rows.append(f"| {i} | `{name}` | {dims} | {numel:,} | {4 * numel:,} |")
    total = count_parameters(model)
    rows.append(f"| | **total** | | **{total:,}** | **{4 * total:,}** |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Print the parameter tables of the models.")
    parser.add_argument("models", nargs="*", default=list(MODELS), help="model names")
    parser.add_argument("--markdown", action="store_true", help="Markdown tables")
    args = parser.parse_args(argv)
    for name in args.models:
        model = make_model(name)
        with torch.no_grad():
            out = model.eval()(torch.zeros(2, *INPUT_SHAPE))
        assert out.shape == (2, NUM_CLASSES), out.shape
        if args.markdown:
            print(f"### {name}\n\n{markdown_table(model)}\n")
            continue
        print(f"{name}: {count_parameters(model):,} parameters, "
              f"{forward_macs(model) / 1e6:.2f} M forward MACs per sample")
        for pname, shape, numel in parameter_table(model):
            print(f"  {pname:40s} {str(list(shape)):20s} {numel:>10,}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
