#!/usr/bin/python3
"""PyTorch twin of examples/fashion_vit.cpp, for a side-by-side comparison (docs/REAL_DATA.md).

Same data (Debian's dataset-fashion-mnist, pixels / 255 standardised with the training images'
mean and standard deviation), model (patches -> Linear -> class token or mean pooling +
learned positions -> pre-LayerNorm blocks of nn.MultiheadAttention and Linear-GELU-Linear ->
LayerNorm -> Linear), initialisation scheme (PyTorch's defaults, positions and class token
N(0, 0.02^2)), optimizer (AdamW, betas (0.9, 0.999); weight decay on the matrices only, not on
biases, LayerNorm weights, positions or the class token), schedule (linear warmup over
min(100, steps / 10) steps, cosine to 5% of the peak), gradient clipping at 1, label
smoothing, batch and steps (a seeded permutation per epoch, drop_last). Prints the test
accuracy and loss at each evaluation, the final ones, and the training time per step.

Run with Debian's python3-torch: /usr/bin/python3 tools/torch_fashion_vit.py [--threads 2]
"""
import gzip
import math
import struct
import time

import numpy as np
from torch_train_common import parser, setup, train_step  # first: sets OMP_WAIT_POLICY before torch loads
import torch
import torch.nn as nn
import torch.nn.functional as F


DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path, rank):
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype, r = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08 or r != rank:
        raise SystemExit(f"{path}: not an unsigned-byte IDX file of rank {rank}")
    dims = struct.unpack(">" + "I" * rank, data[4:4 + 4 * rank])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank)
    if body.size != int(np.prod(dims)):
        raise SystemExit(f"{path}: {body.size} bytes of data, the header declares {dims}")
    return body.reshape(dims)


class Block(nn.Module):
    def __init__(self, dim, heads, mlp):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, mlp), nn.GELU(), nn.Linear(mlp, dim))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.ff(self.ln2(x))


class VisionTransformer(nn.Module):
    def __init__(self, patch, dim, depth, heads, mlp, mean_pool):
        super().__init__()
        self.patch, self.dim, self.mean_pool = patch, dim, mean_pool
        n = (28 // patch) ** 2
        self.embed = nn.Linear(patch * patch, dim)
        self.pos_embed = nn.Parameter(torch.randn(1, n + (0 if mean_pool else 1), dim) * 0.02)
        self.cls_token = None if mean_pool else nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, mlp) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, images):  # (B, 28, 28)
        B, p = images.shape[0], self.patch
        g = 28 // p
        x = images.reshape(B, g, p, g, p).permute(0, 1, 3, 2, 4).reshape(B, g * g, p * p)
        x = self.embed(x)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(B, 1, self.dim), x], dim=1)
        x = x + self.pos_embed
        for b in self.blocks:
            x = b(x)
        x = self.norm(x)
        return self.head(x.mean(dim=1) if self.mean_pool else x[:, 0])


def param_groups(model, weight_decay):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 and name not in ("pos_embed", "cls_token") else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def evaluate(model, images, labels):
    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for b in range(0, len(images), 500):
            logits = model(images[b:b + 500])
            loss += F.cross_entropy(logits, labels[b:b + 500], reduction="sum").item()
            correct += (logits.argmax(1) == labels[b:b + 500]).sum().item()
    model.train()
    return correct / len(images), loss / len(images)


def main():
    a = parser(__doc__, steps=4680, eval_every=468, batch=128, lr=2e-3, weight_decay=0.05, data_dir=DATA)
    a.add_argument("--label-smoothing", type=float, default=0.1)
    a.add_argument("--patch", type=int, default=4)
    a.add_argument("--dim", type=int, default=64)
    a.add_argument("--depth", type=int, default=4)
    a.add_argument("--heads", type=int, default=4)
    a.add_argument("--mlp", type=int, default=128)
    a.add_argument("--pool", choices=["cls", "mean"], default="cls")
    a.add_argument("--flip", action="store_true")
    o = a.parse_args()
    runtime = setup(o)

    tr_x = read_idx(f"{o.data_dir}/train-images-idx3-ubyte.gz", 3).astype(np.float32) / 255
    tr_y = read_idx(f"{o.data_dir}/train-labels-idx1-ubyte.gz", 1).astype(np.int64)
    te_x = read_idx(f"{o.data_dir}/t10k-images-idx3-ubyte.gz", 3).astype(np.float32) / 255
    te_y = read_idx(f"{o.data_dir}/t10k-labels-idx1-ubyte.gz", 1).astype(np.int64)
    mean = tr_x.astype(np.float64).mean()
    std = math.sqrt((tr_x.astype(np.float64) ** 2).mean() - mean * mean)
    tr_x = torch.from_numpy((tr_x - mean) / std).float()
    te_x = torch.from_numpy((te_x - mean) / std).float()
    tr_y, te_y = torch.from_numpy(tr_y), torch.from_numpy(te_y)

    model = VisionTransformer(o.patch, o.dim, o.depth, o.heads, o.mlp, o.pool == "mean")
    opt = torch.optim.AdamW(param_groups(model, o.weight_decay), lr=o.lr, betas=(0.9, 0.999))
    steps_per_epoch = len(tr_x) // o.batch
    print(f"torch_fashion_vit: {sum(p.numel() for p in model.parameters())} parameters, {steps_per_epoch} steps "
          f"per epoch, {o.steps / steps_per_epoch:.3g} epochs, {runtime}")
    gen = torch.Generator().manual_seed(o.seed)
    order = None
    train_seconds = 0.0
    for step in range(o.steps):
        t0 = time.perf_counter()
        epoch, k = divmod(step, steps_per_epoch)
        if k == 0:
            order = torch.randperm(len(tr_x), generator=gen)
        rows = order[k * o.batch:(k + 1) * o.batch]
        x, y = tr_x[rows], tr_y[rows]
        if o.flip:
            f = torch.rand(o.batch, generator=gen) < 0.5
            x = torch.where(f[:, None, None], x.flip(2), x)
        loss = F.cross_entropy(model(x), y, label_smoothing=o.label_smoothing)
        train_step(model, opt, loss, step, o)
        train_seconds += time.perf_counter() - t0
        if (step + 1) % o.eval_every == 0 or step + 1 == o.steps:
            acc, test_loss = evaluate(model, te_x, te_y)
            print(f"step {step + 1}: training loss {loss.item():.4f}, test accuracy {100 * acc:.2f}%, "
                  f"test loss {test_loss:.4f}, {1000 * train_seconds / (step + 1):.1f} ms/step", flush=True)
    acc, test_loss = evaluate(model, te_x, te_y)
    print(f"torch_fashion_vit: {o.steps} steps, test accuracy {100 * acc:.2f}%, test loss {test_loss:.4f}, "
          f"training {train_seconds:.1f} s ({1000 * train_seconds / o.steps:.1f} ms/step)")


if __name__ == "__main__":
    main()
