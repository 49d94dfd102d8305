#!/usr/bin/python3
"""PyTorch side of the "Performance" issue's workloads (xgrad side: bench_mha, train_step_rss).

Run with Debian's interpreter, which has python3-torch 1.13:  /usr/bin/python3 benchmarks/torch_mha.py

Workloads (float32, CPU):
  mha/<cfg>   nn.MultiheadAttention(E, H, batch_first=True) (bias on, dropout 0), self-attention
              with a bool causal attn_mask (torch 1.13 has no is_causal; True = masked, the
              upper triangle), need_weights=False:
                out = mha(x, x, x); loss = (out * upstream).sum(); loss.backward()
              gradients reach x and every parameter; .grad is set to None before each iteration.
              cfg: tiny B1 T8 E16 H2, small B8 T32 E64 H4, mid B8 T64 E128 H8, large B4 T512 E512 H8
  train_step_reverse
              one training step of the same model as the xgrad `reverse` example's default:
              token Embedding(11, 64) + learned positions (16, 64), 2 pre-LN blocks
              (x + MHA(LN(x)) with key_padding_mask; x + Linear(GELU(Linear(LN(x))))), final LN,
              Linear(64, 11) head; batch 64 of length-1..16 digit sequences padded to 16;
              cross_entropy(ignore_index=-100); zero_grad(set_to_none); backward;
              clip_grad_norm_(1.0); AdamW(lr 3e-3, betas (0.9, 0.98), eps 1e-9, weight_decay 0.01).
              8 batches made before timing, used in turn (as benchmarks/reverse_step.hpp).

Timing (as Google Benchmark's repetitions): warm-up for --warmup seconds, then --reps
repetitions, each timing k back-to-back iterations with time.perf_counter, k chosen so that a
repetition lasts >= --min-time seconds; per-iteration time of a repetition = elapsed / k; the
reported value is the median over repetitions (mean, min and max too).

Threads: torch.set_num_threads(n), and the OpenBLAS that torch's GEMMs go through (Debian's
torch uses the system libblas = OpenBLAS, whose own pthread pool defaults to every core)
is set to n as well: OPENBLAS_NUM_THREADS before import and openblas_set_num_threads after.

--rss STEPS: instead, run STEPS training steps and print baseline VmRSS (after importing
torch, before building the model) and peak VmHWM from /proc/self/status, as JSON.

Prints one JSON object on stdout.
"""
import argparse
import ctypes
import ctypes.util
import json
import math
import os
import statistics
import sys
import time

CONFIGS = {
    "tiny": (1, 8, 16, 2),
    "small": (8, 32, 64, 4),
    "mid": (8, 64, 128, 8),
    "large": (4, 512, 512, 8),
}


def mha_flops(B, T, E):
    """GEMM FLOPs of one MHA forward + backward (see benchmarks/bench_mha.cpp):
    forward F = 8 B T E^2 + 4 B T^2 E (in-proj 6BTE^2, QK^T 2BT^2E, PV 2BT^2E, out-proj 2BTE^2);
    backward 2F; total 3F = 24 B T E^2 + 12 B T^2 E."""
    return 24.0 * B * T * E * E + 12.0 * B * T * T * E


def status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


def set_blas_threads(n):
    """Set OpenBLAS's thread count in this process (the library torch's GEMMs use)."""
    done = []
    for name in ("libopenblas.so.0", ctypes.util.find_library("openblas"), "libblas.so.3"):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        if hasattr(lib, "openblas_set_num_threads"):
            lib.openblas_set_num_threads(ctypes.c_int(n))
            done.append(int(lib.openblas_get_num_threads()))
    return done[0] if done else None


def time_fn(fn, reps, min_time, warmup):
    t0 = time.perf_counter()
    calls = 0
    while calls < 2 or time.perf_counter() - t0 < warmup:
        fn()
        calls += 1
    one = (time.perf_counter() - t0) / calls
    k = max(1, int(math.ceil(min_time / max(one, 1e-9))))
    per_iter = []
    for _ in range(reps):
        s = time.perf_counter()
        for _ in range(k):
            fn()
        per_iter.append((time.perf_counter() - s) / k)
    ms = [v * 1e3 for v in per_iter]
    return {
        "median_ms": statistics.median(ms),
        "mean_ms": statistics.fmean(ms),
        "min_ms": min(ms),
        "max_ms": max(ms),
        "reps": reps,
        "iters_per_rep": k,
    }


def mha_case(torch, name, reps, min_time, warmup):
    B, T, E, H = CONFIGS[name]
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(E, H, batch_first=True)
    x = torch.randn(B, T, E, requires_grad=True)
    upstream = torch.randn(B, T, E)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # True = not allowed
    params = list(mha.parameters())

    def step():
        x.grad = None
        for p in params:
            p.grad = None
        out, _ = mha(x, x, x, attn_mask=mask, need_weights=False)
        loss = (out * upstream).sum()
        loss.backward()

    r = time_fn(step, reps, min_time, warmup)
    flops = mha_flops(B, T, E)
    r.update({"name": "mha/" + name, "B": B, "T": T, "E": E, "H": H, "gflop": flops * 1e-9,
              "gflops_per_s": flops * 1e-9 / (r["median_ms"] * 1e-3)})
    return r


def reverse_model(torch):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, E, H, F):
            super().__init__()
            self.ln1 = nn.LayerNorm(E)
            self.attn = nn.MultiheadAttention(E, H, batch_first=True)
            self.ln2 = nn.LayerNorm(E)
            self.ff = nn.Sequential(nn.Linear(E, F), nn.GELU(), nn.Linear(F, E))

        def forward(self, x, key_padding_mask):
            h = self.ln1(x)
            x = x + self.attn(h, h, h, key_padding_mask=key_padding_mask, need_weights=False)[0]
            return x + self.ff(self.ln2(x))

    class Encoder(nn.Module):
        def __init__(self, vocab=11, max_len=16, E=64, H=4, F=128, layers=2):
            super().__init__()
            self.tok_emb = nn.Embedding(vocab, E)
            self.pos_emb = nn.Parameter(torch.randn(max_len, E))
            self.blocks = nn.ModuleList([Block(E, H, F) for _ in range(layers)])
            self.ln_f = nn.LayerNorm(E)
            self.head = nn.Linear(E, vocab)

        def forward(self, tokens, key_padding_mask):
            x = self.tok_emb(tokens) + self.pos_emb[: tokens.shape[1]]
            for b in self.blocks:
                x = b(x, key_padding_mask)
            return self.head(self.ln_f(x))

    return Encoder()


def reverse_batches(torch, n=8, B=64, max_len=16, pad=10):
    g = torch.Generator().manual_seed(12345)
    out = []
    for _ in range(n):
        tokens = torch.full((B, max_len), pad, dtype=torch.int64)
        targets = torch.full((B, max_len), -100, dtype=torch.int64)
        lengths = torch.randint(1, max_len + 1, (B,), generator=g)
        for i in range(B):
            L = int(lengths[i])
            d = torch.randint(0, 10, (L,), generator=g)
            tokens[i, :L] = d
            targets[i, :L] = d.flip(0)
        out.append((tokens, tokens == pad, targets))
    return out


def reverse_trainer(torch):
    torch.manual_seed(0)
    model = reverse_model(torch)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9,
                            weight_decay=0.01)
    batches = reverse_batches(torch)
    params = list(model.parameters())
    state = {"i": 0}
    F = torch.nn.functional

    def step():
        tokens, padding, targets = batches[state["i"] % len(batches)]
        state["i"] += 1
        logits = model(tokens, padding)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                               ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss

    return step, sum(p.numel() for p in params)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--configs", default="tiny,small,mid,large",
                    help="comma-separated MHA configs ('' for none)")
    ap.add_argument("--train", action="store_true", help="also time train_step_reverse")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--min-time", type=float, default=0.1)
    ap.add_argument("--warmup", type=float, default=0.3)
    ap.add_argument("--rss", type=int, metavar="STEPS", help="peak-RSS mode: run STEPS training steps")
    a = ap.parse_args()
    if a.threads < 1:
        ap.error("--threads must be >= 1")

    os.environ["OPENBLAS_NUM_THREADS"] = str(a.threads)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    try:
        import torch
    except ImportError as e:
        print(json.dumps({"side": "torch", "error": f"cannot import torch: {e}"}))
        return 3
    torch.set_num_threads(a.threads)
    blas_threads = set_blas_threads(a.threads)
    head = {"side": "torch", "torch_version": torch.__version__, "threads": a.threads,
            "torch_threads": torch.get_num_threads(), "openblas_threads": blas_threads}

    if a.rss is not None:
        baseline = status_kb("VmRSS")
        step, nparams = reverse_trainer(torch)
        t0 = time.perf_counter()
        loss = None
        for _ in range(a.rss):
            loss = step()
        secs = time.perf_counter() - t0
        head.update({"steps": a.rss, "params": nparams, "seconds_per_step": secs / a.rss,
                     "final_loss": float(loss), "baseline_rss_kb": baseline,
                     "peak_rss_kb": status_kb("VmHWM")})
        print(json.dumps(head))
        return 0

    results = []
    for name in [c for c in a.configs.split(",") if c]:
        if name not in CONFIGS:
            ap.error(f"unknown config '{name}' (known: {', '.join(CONFIGS)})")
        results.append(mha_case(torch, name, a.reps, a.min_time, a.warmup))
    if a.train:
        step, nparams = reverse_trainer(torch)
        r = time_fn(step, a.reps, a.min_time, a.warmup)
        r.update({"name": "train_step_reverse", "params": nparams})
        results.append(r)
    head["results"] = results
    print(json.dumps(head, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
