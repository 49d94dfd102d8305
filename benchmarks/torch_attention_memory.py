#!/usr/bin/python3
"""PyTorch side of benchmarks/attention_memory (issue 18: attention memory linear in T).

usage: /usr/bin/python3 benchmarks/torch_attention_memory.py --T N [--B 1] [--E 512] [--H 8]
                                                            [--reps 1] [--threads 1]

One nn.MultiheadAttention(E, H, batch_first=True) self-attention forward + backward, float32,
bias on, dropout 0, bool causal attn_mask (torch.triu(ones(T, T), 1), True = masked: torch 1.13
has no is_causal), need_weights=False; loss = (out * upstream).sum(); loss.backward(). One
untimed warm-up, then --reps timed iterations (median). Prints one JSON line with the same
keys as the xgrad side; baseline_rss_kb is VmRSS after `import torch`, peak_rss_kb is
getrusage's ru_maxrss. When an allocation fails (RuntimeError "not enough memory" or
MemoryError), prints {"side": "torch", "T": N, "error": "..."} and exits 0, so a driver can
record it.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_mha import status_kb  # noqa: E402  (imports nothing heavy: torch is imported in main)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, required=True)
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--E", type=int, default=512)
    ap.add_argument("--H", type=int, default=8)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(a.threads))
    import torch  # noqa: E402

    torch.set_num_threads(a.threads)
    baseline = status_kb("VmRSS")
    out = {"side": "torch", "B": a.B, "T": a.T, "E": a.E, "H": a.H, "threads": a.threads, "reps": a.reps,
           "baseline_rss_kb": baseline}
    try:
        torch.manual_seed(0)
        mha = torch.nn.MultiheadAttention(a.E, a.H, batch_first=True)
        x = torch.randn(a.B, a.T, a.E, requires_grad=True)
        upstream = torch.randn(a.B, a.T, a.E)
        mask = torch.triu(torch.ones(a.T, a.T, dtype=torch.bool), diagonal=1)
        params = list(mha.parameters())

        def step():
            x.grad = None
            for p in params:
                p.grad = None
            o, _ = mha(x, x, x, attn_mask=mask, need_weights=False)
            (o * upstream).sum().backward()

        step()
        ms = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            step()
            ms.append((time.perf_counter() - t0) * 1e3)
        out["median_ms"] = statistics.median(ms)
        out["ms_per_token"] = out["median_ms"] / (a.B * a.T)
    except (RuntimeError, MemoryError) as e:
        out["error"] = str(e).splitlines()[0][:200]
    out["peak_rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
