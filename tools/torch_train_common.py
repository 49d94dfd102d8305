"""What tools/torch_fashion_vit.py and tools/torch_char_gpt.py share: the command line's
training options and the training step of examples/common.hpp's train() (AdamW with linear
warmup over min(100, steps / 10) steps then cosine to 5% of the peak, gradient clipping at 1)."""
import argparse
import ctypes
import math
import os

# Imported before torch: torch's OpenMP workers otherwise spin after each parallel region while
# OpenBLAS's threads want the same cores (docs/PERFORMANCE.md measured the default 6-40x slower
# on 2 cores); an OMP_WAIT_POLICY already set is kept. setup() prints which one ran.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402


def parser(doc, steps, eval_every, batch, lr, weight_decay, data_dir):
    a = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--steps", type=int, default=steps)
    a.add_argument("--eval-every", type=int, default=eval_every)
    a.add_argument("--batch", type=int, default=batch)
    a.add_argument("--lr", type=float, default=lr)
    a.add_argument("--weight-decay", type=float, default=weight_decay)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--threads", type=int, default=2)
    a.add_argument("--data-dir", default=data_dir)
    return a


def setup(o):
    """torch's threads and the system OpenBLAS's (Debian's torch does its GEMMs there; its pthread
    pool defaults to every core) set to --threads; the seed."""
    torch.set_num_threads(o.threads)
    blas = "not found"
    for name in ("libopenblas.so.0", "libblas.so.3"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        if hasattr(lib, "openblas_set_num_threads"):
            lib.openblas_set_num_threads(ctypes.c_int(o.threads))
            blas = str(lib.openblas_get_num_threads())
            break
    torch.manual_seed(o.seed)
    return f"torch {torch.__version__}, {o.threads} threads (OpenBLAS {blas}), OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}"


def warmup_cosine_lr(step, base, warmup, total, min_lr):
    if step < warmup:
        return base * (step + 1) / warmup
    if step >= total:
        return min_lr
    r = (step - warmup) / (total - warmup)
    return min_lr + (base - min_lr) * (1 + math.cos(math.pi * r)) / 2


def train_step(model, opt, loss, step, o):
    """One optimizer step at `step` (0-based) of o.steps, as examples/common.hpp's train()."""
    lr = warmup_cosine_lr(step, o.lr, min(100, o.steps // 10), o.steps, 0.05 * o.lr)
    for g in opt.param_groups:
        g["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
