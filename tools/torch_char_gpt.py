#!/usr/bin/python3
"""PyTorch twin of examples/char_gpt.cpp, for a side-by-side comparison (docs/REAL_DATA.md).

Same data (Debian's fortunes: the plain-text files of /usr/share/games/fortunes in name order,
entries separated by lines holding only '%', split 90/10 by document with a seeded permutation
(numpy's, so not the same documents as xgrad's split), each split one character stream with
every fortune followed by "%\\n"), model (token embedding + learned positions -> pre-LayerNorm
causal blocks of nn.MultiheadAttention and Linear-GELU-Linear, no biases, LayerNorms with a
weight only -> LayerNorm -> logits through the token embedding), initialisation (nanoGPT's:
N(0, 0.02^2), residual projections N(0, (0.02 / sqrt(2 * layers))^2)), optimizer (AdamW, betas
(0.9, 0.99); weight decay on the matrices, not on LayerNorm weights or embeddings), schedule
(linear warmup over min(100, steps / 10) steps, cosine to 5% of the peak), gradient clipping at 1,
batch (random windows of context + 1 characters) and steps. Validation loss: every position of
consecutive context-long windows of the validation stream. Prints validation loss in nats and
bits per character at each evaluation, the bigram baseline, and the training time per step.

Run with Debian's python3-torch: /usr/bin/python3 tools/torch_char_gpt.py [--threads 2]
"""
import math
import os
import time

import numpy as np
from torch_train_common import parser, setup, train_step  # first: sets OMP_WAIT_POLICY before torch loads
import torch
import torch.nn as nn
import torch.nn.functional as F


DATA = "/usr/share/games/fortunes"


def load_fortunes(d, max_files=0):
    names = sorted(n for n in os.listdir(d)
                   if not n.startswith(".") and not n.endswith((".dat", ".u8"))
                   and not os.path.islink(os.path.join(d, n)) and os.path.isfile(os.path.join(d, n)))
    if max_files:
        names = names[:max_files]
    docs = []
    for n in names:
        with open(os.path.join(d, n), encoding="utf-8") as f:
            entry = []
            for line in f.read().split("\n"):
                if line in ("%", "%\r"):
                    if "".join(entry).strip(" \t\r\n"):
                        docs.append("".join(entry))
                    entry = []
                else:
                    entry.append(line + "\n")
            if "".join(entry).strip(" \t\r\n"):
                docs.append("".join(entry))
    return names, docs


class LayerNorm(nn.Module):  # weight only (torch 1.13's nn.LayerNorm has no bias=False)
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, None, 1e-5)


class Block(nn.Module):
    def __init__(self, dim, heads, mlp):
        super().__init__()
        self.ln1 = LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, bias=False, batch_first=True)
        self.ln2 = LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, mlp, bias=False), nn.GELU(), nn.Linear(mlp, dim, bias=False))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.ff(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, context, dim, layers, heads, mlp):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, dim)
        self.pos_emb = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, mlp) for _ in range(layers))
        self.ln_f = LayerNorm(dim)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                residual = name.endswith("out_proj.weight") or name.endswith("ff.2.weight")
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers) if residual else 0.02)

    def forward(self, idx):
        T = idx.shape[1]
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)  # True = masked
        x = self.tok_emb(idx) + self.pos_emb.weight[:T]
        for b in self.blocks:
            x = b(x, mask)
        return self.ln_f(x) @ self.tok_emb.weight.T


def validate(model, ids, T):
    model.eval()
    n, total, correct, count = len(ids) - 1, 0.0, 0, 0
    with torch.no_grad():
        start = 0
        while start < n:
            length = min(T, n - start)
            B = min(32, (n - start) // T) if length == T else 1
            x = torch.stack([ids[start + b * length:start + (b + 1) * length] for b in range(B)])
            y = torch.stack([ids[start + b * length + 1:start + (b + 1) * length + 1] for b in range(B)])
            logits = model(x)
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum").item()
            correct += (logits.argmax(-1) == y).sum().item()
            count += B * length
            start += B * length
    model.train()
    return total / count, correct / count


def main():
    a = parser(__doc__, steps=2000, eval_every=250, batch=32, lr=2e-3, weight_decay=0.1, data_dir=DATA)
    a.add_argument("--context", type=int, default=128)
    a.add_argument("--layers", type=int, default=4)
    a.add_argument("--dim", type=int, default=128)
    a.add_argument("--heads", type=int, default=4)
    a.add_argument("--mlp", type=int, default=512)
    a.add_argument("--max-files", type=int, default=0)
    o = a.parse_args()
    runtime = setup(o)

    names, docs = load_fortunes(o.data_dir, o.max_files)
    perm = np.random.default_rng(o.seed).permutation(len(docs))
    n_train = min(max(round(0.9 * len(docs)), 1), len(docs) - 1)
    train_text = "".join(docs[i] + "%\n" for i in sorted(perm[:n_train]))
    val_text = "".join(docs[i] + "%\n" for i in sorted(perm[n_train:]))
    chars = sorted(set(train_text) | set(val_text))
    index = {c: i for i, c in enumerate(chars)}
    train_ids = torch.tensor([index[c] for c in train_text], dtype=torch.long)
    val_ids = torch.tensor([index[c] for c in val_text], dtype=torch.long)
    V = len(chars)

    # Bigram baseline with add-one counts, as the C++ example.
    tr, va = train_ids.numpy(), val_ids.numpy()
    bi = np.ones((V, V))
    np.add.at(bi, (tr[:-1], tr[1:]), 1)
    bigram = -np.log(bi[va[:-1], va[1:]] / bi.sum(1)[va[:-1]]).mean()

    model = GPT(V, o.context, o.dim, o.layers, o.heads, o.mlp)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "emb" not in n]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2 or "emb" in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=o.lr, betas=(0.9, 0.99))
    print(f"torch_char_gpt: {len(names)} files, {len(docs)} fortunes, {len(train_ids)} + {len(val_ids)} characters, "
          f"vocabulary {V}, {sum(p.numel() for p in model.parameters())} parameters, bigram {bigram:.4f} nats/char, "
          f"{runtime}")
    gen = torch.Generator().manual_seed(o.seed)
    train_seconds = 0.0
    T = o.context
    for step in range(o.steps):
        t0 = time.perf_counter()
        off = torch.randint(0, len(train_ids) - T - 1, (o.batch,), generator=gen)
        x = torch.stack([train_ids[i:i + T] for i in off.tolist()])
        y = torch.stack([train_ids[i + 1:i + T + 1] for i in off.tolist()])
        loss = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
        train_step(model, opt, loss, step, o)
        train_seconds += time.perf_counter() - t0
        if (step + 1) % o.eval_every == 0 or step + 1 == o.steps:
            vl, acc = validate(model, val_ids, T)
            print(f"step {step + 1}: training loss {loss.item():.4f}, validation loss {vl:.4f} nats/char "
                  f"({vl / math.log(2):.3f} bits/char), next-char accuracy {100 * acc:.1f}%, "
                  f"{1000 * train_seconds / (step + 1):.1f} ms/step", flush=True)
    vl, acc = validate(model, val_ids, T)
    print(f"torch_char_gpt: {o.steps} steps, validation loss {vl:.4f} nats/char ({vl / math.log(2):.3f} bits/char), "
          f"bigram {bigram:.4f}, training {train_seconds:.1f} s ({1000 * train_seconds / o.steps:.1f} ms/step)")


if __name__ == "__main__":
    main()
