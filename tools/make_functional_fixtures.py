#!/usr/bin/python3
"""Writes the fixtures of tests/test_functional.cpp: torch.autograd.functional on two models.

Run by hand from the repository root with Debian's python3-torch (1.13 was used):

    /usr/bin/python3 tools/make_functional_fixtures.py

Files: tests/fixtures/functional/<name>.safetensors, written with make_fixtures.py's
write_safetensors. Everything is float64, seeded, on one thread.

Each file holds, for a function f(*inputs) -> tensor and the scalar s(*inputs) = 0.5 sum(f^2):
  "input.<name>"                 the inputs (metadata "inputs": their names, comma separated)
  "output"                       f(inputs)
  "cotangent", "vjp.<name>"      torch.autograd.functional.vjp(f, inputs, cotangent)
  "tangent.<name>", "jvp"        torch.autograd.functional.jvp(f, inputs, tangents)
  "jacobian.<name>"              torch.autograd.functional.jacobian(f, inputs)
  "scalar"                       s(inputs)
  "hessian.<a>.<b>"              torch.autograd.functional.hessian(s, inputs)
  "vector.<name>", "hvp.<name>", "vhp.<name>"   torch.autograd.functional.hvp / vhp(s, inputs, v)

Models:
  mlp        f(x, W1, b1, W2, b2) = tanh(x W1^T + b1) W2^T + b2, x (3, 4), hidden 5, out 2
  attention  f(x, in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias) =
             nn.MultiheadAttention(4, 2, batch_first=True)(x, x, x, attn_mask=causal)[0],
             x (1, 3, 4), attn_mask (3, 3) bool, True above the diagonal (= masked), via
             torch.nn.utils.stateless.functional_call
"""
import os
import sys

import torch
import torch.autograd.functional as AF
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import write_safetensors  # noqa: E402

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "functional")


def fixture(name, f, inputs, names, gen):
    def s(*xs):
        return 0.5 * (f(*xs) ** 2).sum()

    out = f(*inputs)
    cotangent = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    tangents = tuple(torch.randn(x.shape, generator=gen, dtype=torch.float64) for x in inputs)
    vectors = tuple(torch.randn(x.shape, generator=gen, dtype=torch.float64) for x in inputs)
    _, vjp = AF.vjp(f, inputs, cotangent)
    _, jvp = AF.jvp(f, inputs, tangents)
    jac = AF.jacobian(f, inputs)
    hess = AF.hessian(s, inputs)
    scalar, hvp = AF.hvp(s, inputs, vectors)
    _, vhp = AF.vhp(s, inputs, vectors)

    tensors = [("output", out), ("cotangent", cotangent), ("jvp", jvp), ("scalar", scalar)]
    for i, n in enumerate(names):
        tensors += [("input." + n, inputs[i]), ("vjp." + n, vjp[i]), ("tangent." + n, tangents[i]),
                    ("jacobian." + n, jac[i]), ("vector." + n, vectors[i]), ("hvp." + n, hvp[i]),
                    ("vhp." + n, vhp[i])]
        for j, m in enumerate(names):
            tensors.append(("hessian." + n + "." + m, hess[i][j]))
    os.makedirs(OUT_DIR, exist_ok=True)
    path = os.path.join(OUT_DIR, name + ".safetensors")
    size = write_safetensors(path, tensors, {"fixture": name, "inputs": ",".join(names)})
    print(f"wrote {path} ({size} bytes, {len(tensors)} tensors)")


def main():
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(20240616)

    def randn(*shape):
        return torch.randn(shape, generator=gen, dtype=torch.float64)

    # MLP
    mlp_inputs = (randn(3, 4), randn(5, 4) * 0.7, randn(5) * 0.3, randn(2, 5) * 0.7, randn(2) * 0.3)

    def mlp(x, w1, b1, w2, b2):
        return torch.tanh(x @ w1.T + b1) @ w2.T + b2

    fixture("mlp", mlp, mlp_inputs, ["x", "W1", "b1", "W2", "b2"], gen)

    # One nn.MultiheadAttention with fixed weights and a causal mask.
    mha = nn.MultiheadAttention(4, 2, batch_first=True).double()
    params = {n: randn(*p.shape) * 0.5 for n, p in mha.named_parameters()}
    names = ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    assert sorted(params) == sorted(names)
    mask = torch.triu(torch.ones(3, 3, dtype=torch.bool), diagonal=1)

    def attention(x, *ps):
        state = dict(zip(names, ps))
        return torch.nn.utils.stateless.functional_call(mha, state, (x, x, x), {"attn_mask": mask,
                                                                               "need_weights": False})[0]

    fixture("attention", attention, (randn(1, 3, 4),) + tuple(params[n] for n in names), ["x"] + names, gen)


if __name__ == "__main__":
    main()
