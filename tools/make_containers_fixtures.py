#!/usr/bin/python3
"""Writes the PyTorch fixtures of tests/test_containers.cpp and tests/test_optim.cpp
(parameter groups) into tests/fixtures/containers/.

Run by hand from the repository root with a Python that has torch (1.13 was used):

    /usr/bin/python3 tools/make_containers_fixtures.py

File layout and naming as tools/make_fixtures.py (whose writer this script reuses):
  "param.<state_dict name>"   the module's parameters (the state_dict loaded unchanged),
  input tensors by role ("x", "tokens"), "upstream" (a random gradient shaped like the
  output: the differentiated scalar is sum(output * upstream)), "output",
  "grad.<input>", "grad.param.<state_dict name>".
Optimizer fixtures ("kind" = "optim_groups"): "param.<name>" initial values, then for every
step s = 1..steps "grad<s>.<name>" (the gradient set before the step) and "after<s>.<name>"
(the parameter after it), and the final state "state.<buffer>.<name>". Metadata gives the
optimizer, its defaults, each group's parameter names and overrides, and the learning-rate
factor of each step (a LambdaLR: group lr = its initial lr * factor).
Everything is seeded and computed in float32 on one thread.
"""
import collections
import math
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import fmt, grads_of, randomize_, write_safetensors  # noqa: E402

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                       "containers")


def module_fixture(name, module, named_inputs, call, meta):
    """Parameters, inputs, output, upstream and every gradient of module run by call."""
    out = call(*[t for _, t in named_inputs])
    upstream = torch.randn_like(out)
    loss = (out * upstream).sum()
    tensors = list(named_inputs)
    tensors += [("param." + n, p) for n, p in module.state_dict().items()]
    tensors += [("upstream", upstream), ("output", out)]
    tensors += grads_of(loss, named_inputs, module)
    return name, tensors, dict(meta, fixture=name)


def sequential_mlp():
    torch.manual_seed(11)
    mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    randomize_(mlp)
    x = torch.randn(5, 4, requires_grad=True)
    return module_fixture("sequential_mlp", mlp, [("x", x)], mlp, {"kind": "sequential_mlp"})


def sequential_named():
    torch.manual_seed(12)
    seq = nn.Sequential(collections.OrderedDict([
        ("fc1", nn.Linear(4, 6)), ("act", nn.GELU(approximate="tanh")), ("norm", nn.LayerNorm(6)),
        ("drop", nn.Dropout(0.0)), ("fc2", nn.Linear(6, 3, bias=False))]))
    randomize_(seq)
    x = torch.randn(2, 3, 4, requires_grad=True)
    return module_fixture("sequential_named", seq, [("x", x)], seq, {"kind": "sequential_named"})


class Residual(nn.Module):
    """x = x + tanh(layer(x)) for each layer of a ModuleList, then a LayerNorm."""

    def __init__(self, dim, depth):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(dim, dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        for layer in self.layers:
            x = x + torch.tanh(layer(x))
        return self.norm(x)


def module_list():
    torch.manual_seed(13)
    net = Residual(4, 3)
    randomize_(net)
    x = torch.randn(3, 4, requires_grad=True)
    return module_fixture("module_list", net, [("x", x)], net, {"kind": "module_list", "depth": 3})


# --- optimizer parameter groups -------------------------------------------------------------

def lr_factor(step, warmup=2, total=5, floor=0.1):
    """Warmup then cosine, as a multiplier of each group's initial lr (step counts from 0)."""
    if step < warmup:
        return (step + 1) / warmup
    r = (step - warmup) / (total - warmup)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * r))


def tiny_lm():
    """Embedding -> LayerNorm -> Linear: the three kinds the nanoGPT recipe separates."""
    return nn.Sequential(nn.Embedding(5, 4), nn.LayerNorm(4), nn.Linear(4, 3))


def groups_fixture(name, seed, make_opt, meta, steps=4):
    """Runs steps of the optimizer make_opt(model) builds (two groups: the Linear weight with
    weight decay, everything else without, as nanoGPT), with gradients of a real loss and a
    LambdaLR schedule."""
    torch.manual_seed(seed)
    model = tiny_lm()
    randomize_(model)
    decay = ["2.weight"]
    no_decay = ["0.weight", "1.weight", "1.bias", "2.bias"]
    named = dict(model.named_parameters())
    opt = make_opt([named[n] for n in decay], [named[n] for n in no_decay])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    tokens = torch.tensor([[0, 3, 1], [4, 4, 2]])
    tensors = [("param." + n, p.detach().clone()) for n, p in model.named_parameters()]
    tensors.append(("tokens", tokens))
    factors = []
    for s in range(1, steps + 1):
        factors.append(lr_factor(s - 1))
        opt.zero_grad(set_to_none=True)
        upstream = torch.randn(2, 3, 3)
        (model(tokens) * upstream * (10.0 if s == 1 else 1.0)).sum().backward()
        for n, p in model.named_parameters():
            tensors.append(("grad%d.%s" % (s, n), p.grad.clone()))
        opt.step()
        sched.step()
        for n, p in model.named_parameters():
            tensors.append(("after%d.%s" % (s, n), p.detach().clone()))
    for n, p in model.named_parameters():
        for buf, v in opt.state[p].items():
            if torch.is_tensor(v) and v.dim() > 0:
                tensors.append(("state.%s.%s" % (buf, n), v.clone()))
    meta = dict(meta, kind="optim_groups", fixture=name, steps=steps,
                decay=",".join(decay), no_decay=",".join(no_decay),
                factors=",".join(fmt(f) for f in factors))
    return name, tensors, {k: str(v) for k, v in meta.items()}


def adamw_groups():
    lr, decay_lr, betas, eps, wd = 0.05, 0.02, (0.9, 0.95), 1e-6, 0.1

    def make(decay, no_decay):
        return torch.optim.AdamW([{"params": decay, "weight_decay": wd, "lr": decay_lr},
                                  {"params": no_decay, "weight_decay": 0.0}],
                                 lr=lr, betas=betas, eps=eps, weight_decay=0.5, foreach=False)
    return groups_fixture("adamw_groups", 21, make,
                          {"optimizer": "AdamW", "lr": fmt(lr), "beta1": fmt(betas[0]),
                           "beta2": fmt(betas[1]), "eps": fmt(eps), "weight_decay": fmt(0.5),
                           "decay.lr": fmt(decay_lr), "decay.weight_decay": fmt(wd),
                           "no_decay.weight_decay": fmt(0.0)})


def sgd_groups():
    lr, momentum, wd = 0.1, 0.9, 0.01

    def make(decay, no_decay):
        return torch.optim.SGD([{"params": decay, "weight_decay": wd},
                                {"params": no_decay, "lr": 0.3, "momentum": 0.5, "nesterov": True}],
                               lr=lr, momentum=momentum, weight_decay=0.0, foreach=False)
    return groups_fixture("sgd_groups", 22, make,
                          {"optimizer": "SGD", "lr": fmt(lr), "momentum": fmt(momentum),
                           "weight_decay": fmt(0.0), "decay.weight_decay": fmt(wd),
                           "no_decay.lr": fmt(0.3), "no_decay.momentum": fmt(0.5),
                           "no_decay.nesterov": "1"})


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT_DIR, exist_ok=True)
    for name, tensors, meta in [sequential_mlp(), sequential_named(), module_list(),
                                adamw_groups(), sgd_groups()]:
        path = os.path.join(OUT_DIR, name + ".safetensors")
        size = write_safetensors(path, tensors, meta)
        print("wrote %s (%d tensors, %d bytes)" % (path, len(tensors), size))


if __name__ == "__main__":
    main()
