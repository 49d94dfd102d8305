#!/usr/bin/python3
"""Writes the PyTorch fixtures of tests/test_select_ops.cpp (indexing, selection and
elementwise-rule ops) to tests/fixtures/select/<name>.safetensors.

Run by hand from the repository root with Debian's python3-torch (1.13 was used):

    /usr/bin/python3 tools/make_select_fixtures.py

Everything is float64 (exact comparisons where the op is exact), seeded, one thread; the file
format is tools/make_fixtures.py's (write_safetensors, reused). In each file "upstream.<out>"
is a random gradient for output <out>, and "grad.<out>.<input>" the gradient of
sum(<out> * upstream.<out>) with respect to <input>.
"""
import importlib.util
import os

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "..", "tests", "fixtures", "select")
_spec = importlib.util.spec_from_file_location("make_fixtures", os.path.join(HERE, "make_fixtures.py"))
_mf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mf)
write_safetensors = _mf.write_safetensors

D = torch.float64


def leaf(t):
    return t.detach().clone().to(D).requires_grad_(True)


def with_grads(tensors, out_name, out, inputs):
    """Appends out, a random upstream and the gradients of sum(out * upstream) to tensors."""
    upstream = torch.randn_like(out)
    gs = torch.autograd.grad((out * upstream).sum(), [t for _, t in inputs], allow_unused=True)
    tensors += [(out_name, out), ("upstream." + out_name, upstream)]
    tensors += [("grad.%s.%s" % (out_name, n), g if g is not None else torch.zeros_like(t))
                for (n, t), g in zip(inputs, gs)]


def save(name, tensors, **meta):
    meta["fixture"] = name
    meta["torch"] = torch.__version__
    path = os.path.join(OUT_DIR, name + ".safetensors")
    size = write_safetensors(path, tensors, meta)
    print("%-60s %6d bytes, %d tensors" % (os.path.relpath(path), size, len(tensors)))


def topk_fixture():
    torch.manual_seed(1)
    # Small integers: many ties. Values only (PyTorch's tie order is unspecified).
    x_ties = torch.randint(0, 4, (4, 6)).to(D)
    v_last, _ = torch.topk(x_ties, 3, dim=-1)
    v_first, _ = torch.topk(x_ties, 2, dim=0, largest=False)
    # Distinct values: indices are determined, and the values' gradient.
    x = leaf(torch.randn(3, 7))
    v, i = torch.topk(x, 3, dim=1)
    tensors = [("x_ties", x_ties), ("values_ties_k3_last", v_last), ("values_ties_k2_axis0_smallest", v_first),
               ("x", x), ("indices", i)]
    with_grads(tensors, "values", v, [("x", x)])
    save("topk", tensors)


def clamp_fixture():
    torch.manual_seed(2)
    nan = float("nan")
    # Points exactly on the bounds, between, outside, and NaN.
    x = leaf(torch.tensor([-1.0, -0.5, -0.2, 0.0, 0.5, 0.8, 1.0, nan, 2.0]))
    tensors = [("x", x)]
    with_grads(tensors, "both", torch.clamp(x, -0.5, 0.8), [("x", x)])
    with_grads(tensors, "min", torch.clamp(x, min=0.0), [("x", x)])
    with_grads(tensors, "max", torch.clamp(x, max=0.5), [("x", x)])
    with_grads(tensors, "reversed", torch.clamp(x, 0.8, -0.5), [("x", x)])
    with_grads(tensors, "abs", torch.abs(x), [("x", x)])
    save("clamp", tensors)


def extremum_fixture():
    torch.manual_seed(3)
    nan = float("nan")
    # Broadcast (2, 3) with (3); ties at several places; a NaN on each side.
    a = leaf(torch.tensor([[1.0, 2.0, -1.0], [0.5, nan, 3.0]]))
    b = leaf(torch.tensor([1.0, 2.0, nan]))
    tensors = [("a", a), ("b", b)]
    with_grads(tensors, "maximum", torch.maximum(a, b), [("a", a), ("b", b)])
    with_grads(tensors, "minimum", torch.minimum(a, b), [("a", a), ("b", b)])
    save("extremum", tensors)


def gather_fixture():
    torch.manual_seed(4)
    x = leaf(torch.randn(3, 4, 5))
    index_last = torch.randint(0, 5, (2, 4, 3))   # axis 2; smaller on axis 0
    index_first = torch.randint(0, 3, (4, 3, 5))  # axis 0; larger on the axis, smaller on axis 1
    src = leaf(torch.randn(2, 4, 3))
    tensors = [("x", x), ("index_last", index_last), ("index_first", index_first), ("src", src)]
    with_grads(tensors, "gather_last", torch.gather(x, 2, index_last), [("x", x)])
    with_grads(tensors, "gather_first", torch.gather(x, 0, index_first), [("x", x)])
    with_grads(tensors, "scatter_add", x.scatter_add(2, index_last, src), [("x", x), ("src", src)])
    index_sel = torch.tensor([4, 0, 4, 2])
    src_sel = leaf(torch.randn(3, 4, 4))
    tensors += [("index_sel", index_sel), ("src_sel", src_sel)]
    with_grads(tensors, "index_select", torch.index_select(x, 2, index_sel), [("x", x)])
    with_grads(tensors, "index_add", x.index_add(2, index_sel, src_sel), [("x", x), ("src_sel", src_sel)])
    save("gather", tensors)


def logsumexp_fixture():
    torch.manual_seed(5)
    x = torch.randn(3, 5) * 3
    x[1, 0] = float("-inf")
    x[1, 3] = float("-inf")
    x = leaf(x)
    tensors = [("x", x)]
    with_grads(tensors, "last", torch.logsumexp(x, -1), [("x", x)])
    with_grads(tensors, "first_keepdim", torch.logsumexp(x, 0, keepdim=True), [("x", x)])
    with_grads(tensors, "all", torch.logsumexp(x, (0, 1)), [("x", x)])
    big = leaf(torch.tensor([[1000.0, 1001.0, 999.0], [-1000.0, -1001.0, -1002.0]]))
    tensors += [("big", big)]
    with_grads(tensors, "big_last", torch.logsumexp(big, -1), [("big", big)])
    save("logsumexp", tensors)


def cumsum_fixture():
    torch.manual_seed(6)
    x = leaf(torch.randn(3, 4))
    tensors = [("x", x)]
    with_grads(tensors, "axis0", torch.cumsum(x, 0), [("x", x)])
    with_grads(tensors, "axis1", torch.cumsum(x, -1), [("x", x)])
    xi = torch.randint(-5, 5, (2, 5))
    tensors += [("xi", xi), ("xi_axis1", torch.cumsum(xi, 1))]
    save("cumsum", tensors)


def patchify_fixture():
    torch.manual_seed(7)
    B, C, H, W, p, E = 2, 3, 8, 12, 4, 5
    images = leaf(torch.randn(B, C, H, W))
    patches = images.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5).reshape(B, (H // p) * (W // p), C * p * p)
    weight = torch.randn(E, C, p, p, dtype=D)
    # The conv patch embedding (timm's PatchEmbed) on the same images: (B, E, H/p, W/p) -> (B, N, E).
    conv = F.conv2d(images, weight, stride=p).flatten(2).transpose(1, 2)
    tensors = [("images", images), ("weight", weight), ("conv", conv)]
    with_grads(tensors, "patches", patches, [("images", images)])
    save("patchify", tensors, patch=str(p))


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT_DIR, exist_ok=True)
    topk_fixture()
    clamp_fixture()
    extremum_fixture()
    gather_fixture()
    logsumexp_fixture()
    cumsum_fixture()
    patchify_fixture()


if __name__ == "__main__":
    main()
