#!/usr/bin/python3
"""Writes the golden fixtures of tests/test_golden.cpp: reference values from PyTorch.

Run by hand from the repository root with a Python that has torch (1.13 was used):

    /usr/bin/python3 tools/make_fixtures.py

Each configuration goes to tests/fixtures/<name>.safetensors, written here with struct +
json (no dependency on the `safetensors` package): 8-byte little-endian header length N,
N bytes of JSON {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}} padded
with spaces to a multiple of 8, then the raw little-endian tensor bytes.

Everything is seeded and computed in float32 on one thread, so the files are
byte-for-byte reproducible on one machine and PyTorch version. Stored dtypes: F32 for
values, BOOL for masks (True = not allowed to attend, as nn.MultiheadAttention), I64 for
class targets.

Naming inside a file:
  input tensors by role ("query", "key", "value", "x", "logits", "targets", masks),
  "param.<state_dict name>"       the module's parameters,
  "upstream"                      a random gradient shaped like the output; the
                                  differentiated scalar is sum(output * upstream),
  "output", "weights", "weights_avg",
  "grad.<input>", "grad.param.<state_dict name>".
Metadata (strings) tells the C++ side how to build and call the module.
"""
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")

DTYPES = {torch.float32: ("F32", "<f4"), torch.float64: ("F64", "<f8"), torch.bool: ("BOOL", "?"),
          torch.int64: ("I64", "<i8"), torch.float16: ("F16", "<f2"),
          torch.bfloat16: ("BF16", "<i2")}  # numpy has no bfloat16: its 16 bits as int16


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, torch.Tensor); metadata: dict str -> str."""
    header = {}
    blobs = []
    offset = 0
    for name, t in tensors:
        t = t.detach().contiguous()
        code, np_dtype = DTYPES[t.dtype]
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        data = t.numpy().astype(np_dtype).tobytes()
        header[name] = {"dtype": code, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    return os.path.getsize(path)


def fmt(x):
    """A float as a string that parses back to the same double."""
    return repr(float(x))


def randomize_(module, scale=0.5):
    """Non-trivial values for every parameter (PyTorch zero-initialises biases, ones LN)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("weight") and p.dim() == 1:  # LayerNorm weight around 1
                p.copy_(1.0 + scale * torch.randn_like(p))
            else:
                p.copy_(scale * torch.randn_like(p))


def grads_of(loss, named_inputs, module):
    """grad.<input> and grad.param.<name> of the scalar loss."""
    params = list(module.named_parameters()) if module is not None else []
    targets = [t for _, t in named_inputs] + [p for _, p in params]
    gs = torch.autograd.grad(loss, targets)
    out = [("grad." + n, g) for (n, _), g in zip(named_inputs, gs)]
    out += [("grad.param." + n, g) for (n, _), g in zip(params, gs[len(named_inputs):])]
    return out


# --- multi-head attention --------------------------------------------------------------

def mha_call_tensors(mha, named_inputs, stored, query, key, value, key_padding_mask, attn_mask):
    """Runs mha (per-head and averaged weights) and lists what a fixture stores: the inputs,
    "param.*", the stored masks, a random upstream, output, weights, and every gradient of
    sum(output * upstream)."""
    out, w = mha(query, key, value, key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                 need_weights=True, average_attn_weights=False)
    _, w_avg = mha(query, key, value, key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                   need_weights=True, average_attn_weights=True)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    upstream = torch.randn_like(out)
    loss = (out * upstream).sum()
    tensors = list(named_inputs)
    tensors += [("param." + n, p) for n, p in mha.state_dict().items()]
    tensors += stored
    tensors += [("upstream", upstream), ("output", out), ("weights", w), ("weights_avg", w_avg)]
    tensors += grads_of(loss, named_inputs, mha)
    return tensors


def mha_fixture(name, seed, B=2, T=4, S=None, E=8, H=2, kdim=None, vdim=None, bias=True,
                self_attn=False, causal=False, key_padding=None, float_mask=False,
                mask3d=False):
    torch.manual_seed(seed)
    S = T if S is None else S
    kd = E if kdim is None else kdim
    vd = E if vdim is None else vdim
    mha = nn.MultiheadAttention(E, H, dropout=0.0, bias=bias, batch_first=True,
                                kdim=kdim, vdim=vdim)
    randomize_(mha)
    if self_attn:
        x = torch.randn(B, T, E, requires_grad=True)
        query = key = value = x
        named_inputs = [("x", x)]
    else:
        query = torch.randn(B, T, E, requires_grad=True)
        key = torch.randn(B, S, kd, requires_grad=True)
        value = torch.randn(B, S, vd, requires_grad=True)
        named_inputs = [("query", query), ("key", key), ("value", value)]

    stored = []
    meta = {"kind": "mha", "embed_dim": E, "num_heads": H, "kdim": kd, "vdim": vd,
            "bias": int(bias), "self": int(self_attn), "is_causal": int(causal)}
    attn_mask = None
    if causal:
        # torch 1.13 has no is_causal: the equivalent boolean mask (True = masked). The
        # C++ side passes is_causal = true and checks causal_mask(T, S) against it.
        attn_mask = torch.triu(torch.ones(T, S, dtype=torch.bool), diagonal=1)
        stored.append(("ref.causal_mask", attn_mask))
    if float_mask:
        # Additive (T, S) mask: random finite values and a few -inf (no fully masked row).
        m = 0.5 * torch.randn(T, S)
        m[0, S - 1] = -math.inf
        m[T - 1, 0] = -math.inf
        m[1, 1] = -math.inf
        attn_mask = m
        stored.append(("attn_mask", attn_mask))
    if mask3d:
        # (B*H, T, S) boolean mask, different for every batch and head; column
        # (i + bh) % S stays allowed in row i, so no row is fully masked.
        m = torch.rand(B * H, T, S) < 0.4
        for bh in range(B * H):
            for i in range(T):
                m[bh, i, (i + bh) % S] = False
        attn_mask = m
        stored.append(("attn_mask", attn_mask))
    kpm = None
    if key_padding is not None:
        # key_padding[b] = number of padded keys at the end of batch b's keys.
        kpm = torch.zeros(B, S, dtype=torch.bool)
        for b, n in enumerate(key_padding):
            if n:
                kpm[b, S - n:] = True
        stored.append(("key_padding_mask", kpm))

    return name, mha_call_tensors(mha, named_inputs, stored, query, key, value, kpm, attn_mask), meta


# --- LayerNorm -------------------------------------------------------------------------

def layer_norm_fixture(name, seed, B=2, T=3, E=8, eps=1e-5):
    torch.manual_seed(seed)
    ln = nn.LayerNorm(E, eps=eps)
    randomize_(ln)
    x = (1.5 * torch.randn(B, T, E) + 0.7).requires_grad_()
    out = ln(x)
    upstream = torch.randn_like(out)
    loss = (out * upstream).sum()
    tensors = [("x", x)] + [("param." + n, p) for n, p in ln.state_dict().items()]
    tensors += [("upstream", upstream), ("output", out)]
    tensors += grads_of(loss, [("x", x)], ln)
    return name, tensors, {"kind": "layer_norm", "dim": E, "eps": fmt(eps)}


# --- tanh-approximate GELU --------------------------------------------------------------

def gelu_tanh_fixture(name, seed, n=64):
    """F.gelu(x, approximate='tanh') in float32 and float64 (suffix .f32 / .f64): x spans
    [-8, 8] plus a random part, gradients of sum(output * upstream)."""
    torch.manual_seed(seed)
    x64 = torch.cat([torch.linspace(-8.0, 8.0, n, dtype=torch.float64),
                     torch.tensor([0.0, -0.7518, 1e-4, -1e-4], dtype=torch.float64),
                     2.0 * torch.randn(n, dtype=torch.float64)])
    upstream64 = torch.randn(x64.shape, dtype=torch.float64)
    tensors = []
    for suffix, dtype in ((".f32", torch.float32), (".f64", torch.float64)):
        x = x64.to(dtype).requires_grad_()
        upstream = upstream64.to(dtype)
        out = F.gelu(x, approximate="tanh")
        (gx,) = torch.autograd.grad((out * upstream).sum(), [x])
        tensors += [("x" + suffix, x), ("upstream" + suffix, upstream), ("output" + suffix, out),
                    ("grad.x" + suffix, gx)]
    return name, tensors, {"kind": "gelu", "approximate": "tanh"}


# --- cross entropy ---------------------------------------------------------------------

def cross_entropy_fixture(name, seed, B=2, T=5, C=7, ignore_index=-100, label_smoothing=0.0):
    torch.manual_seed(seed)
    logits = (2.0 * torch.randn(B, T, C)).requires_grad_()
    targets = torch.randint(0, C, (B, T), dtype=torch.int64)
    targets[0, 1] = ignore_index
    targets[1, 3] = ignore_index
    targets[1, 4] = ignore_index
    out = F.cross_entropy(logits.reshape(-1, C), targets.reshape(-1), ignore_index=ignore_index,
                          label_smoothing=label_smoothing)
    upstream = torch.randn(())
    loss = out * upstream
    tensors = [("logits", logits), ("targets", targets), ("upstream", upstream), ("output", out)]
    tensors += grads_of(loss, [("logits", logits)], None)
    return name, tensors, {"kind": "cross_entropy", "ignore_index": ignore_index,
                           "label_smoothing": fmt(label_smoothing)}


# --- pre-LN Transformer block, named as xgrad::TransformerBlock ------------------------

class FeedForward(nn.Module):
    def __init__(self, E, hidden):
        super().__init__()
        self.fc1 = nn.Linear(E, hidden)
        self.fc2 = nn.Linear(hidden, E)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))  # exact (erf) GELU


class Block(nn.Module):
    """x = x + attn(ln1(x)); x = x + ff(ln2(x)): parameter names as xgrad's
    TransformerBlock::named_parameters() (ln1.*, attn.in_proj_weight, attn.in_proj_bias,
    attn.out_proj.*, ln2.*, ff.fc1.*, ff.fc2.*)."""

    def __init__(self, E, H, hidden):
        super().__init__()
        self.ln1 = nn.LayerNorm(E)
        self.attn = nn.MultiheadAttention(E, H, dropout=0.0, batch_first=True)
        self.ln2 = nn.LayerNorm(E)
        self.ff = FeedForward(E, hidden)

    def forward(self, x, attn_mask=None, key_padding_mask=None):
        h = self.ln1(x)
        a, w = self.attn(h, h, h, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                         need_weights=True, average_attn_weights=False)
        x = x + a
        return x + self.ff(self.ln2(x)), w


def block_fixture(name, seed, B=2, T=4, E=8, H=2, hidden=16, causal=False, key_padding=None):
    torch.manual_seed(seed)
    block = Block(E, H, hidden)
    randomize_(block)
    x = torch.randn(B, T, E, requires_grad=True)
    tensors = [("x", x)]
    meta = {"kind": "transformer_block", "embed_dim": E, "num_heads": H, "ff_hidden": hidden,
            "is_causal": int(causal)}
    attn_mask = kpm = None
    if causal:
        attn_mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        tensors.append(("ref.causal_mask", attn_mask))
    if key_padding is not None:
        kpm = torch.zeros(B, T, dtype=torch.bool)
        for b, n in enumerate(key_padding):
            if n:
                kpm[b, T - n:] = True
        tensors.append(("key_padding_mask", kpm))
    out, w = block(x, attn_mask=attn_mask, key_padding_mask=kpm)
    upstream = torch.randn_like(out)
    loss = (out * upstream).sum()
    tensors += [("param." + n, p) for n, p in block.state_dict().items()]
    tensors += [("upstream", upstream), ("output", out), ("weights", w)]
    tensors += grads_of(loss, [("x", x)], block)
    return name, tensors, meta


# --- AdamW -----------------------------------------------------------------------------

def adamw_fixture(name, seed, steps=2, lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1):
    torch.manual_seed(seed)
    params = {"w": torch.randn(3, 4), "b": torch.randn(4)}
    tensors = [("param." + n, p.clone()) for n, p in params.items()]
    ps = [nn.Parameter(p.clone()) for p in params.values()]
    opt = torch.optim.AdamW(ps, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                            foreach=False)
    for s in range(1, steps + 1):
        for (n, _), p in zip(params.items(), ps):
            # Gradients of mixed magnitude, one exact zero and one tiny value.
            g = torch.randn_like(p) * (10.0 if s == 1 else 0.1)
            g.view(-1)[0] = 0.0
            g.view(-1)[1] = 1e-7
            p.grad = g
            tensors.append(("grad%d.%s" % (s, n), g.clone()))
        opt.step()
        for (n, _), p in zip(params.items(), ps):
            tensors.append(("after%d.%s" % (s, n), p.detach().clone()))
    for (n, _), p in zip(params.items(), ps):
        st = opt.state[p]
        tensors.append(("state.exp_avg.%s" % n, st["exp_avg"].clone()))
        tensors.append(("state.exp_avg_sq.%s" % n, st["exp_avg_sq"].clone()))
    return name, tensors, {"kind": "adamw", "steps": steps, "lr": fmt(lr), "beta1": fmt(betas[0]),
                           "beta2": fmt(betas[1]), "eps": fmt(eps),
                           "weight_decay": fmt(weight_decay)}


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    fixtures = [
        mha_fixture("mha_self", 1, self_attn=True),
        mha_fixture("mha_self_causal", 2, self_attn=True, T=5, causal=True),
        mha_fixture("mha_cross", 3, T=3, S=5),
        mha_fixture("mha_cross_kvdim", 4, T=4, S=6, kdim=5, vdim=3),
        mha_fixture("mha_key_padding", 5, T=3, S=5, key_padding=[0, 2]),
        mha_fixture("mha_key_padding_causal", 6, self_attn=True, T=5, causal=True,
                    key_padding=[1, 3]),
        mha_fixture("mha_float_mask", 7, T=4, S=5, float_mask=True),
        mha_fixture("mha_mask_3d", 8, T=4, S=5, mask3d=True, bias=False),
        layer_norm_fixture("layer_norm", 9),
        cross_entropy_fixture("cross_entropy", 10),
        cross_entropy_fixture("cross_entropy_smoothing", 11, ignore_index=2, label_smoothing=0.1),
        block_fixture("transformer_block_causal", 12, causal=True),
        block_fixture("transformer_block_padding", 13, key_padding=[0, 2]),
        adamw_fixture("adamw", 14),
        gelu_tanh_fixture("gelu_tanh", 15),
    ]
    # A plain nn.MultiheadAttention state_dict, as torch users save it: it must load into
    # xgrad's MultiHeadAttention with load_checkpoint, unchanged (same module as mha_self).
    name, tensors, _ = fixtures[0]
    state = [(n[len("param."):], t) for n, t in tensors if n.startswith("param.")]
    fixtures.append(("mha_state_dict", state, {"kind": "state_dict", "of": name}))
    os.makedirs(OUT_DIR, exist_ok=True)
    total = 0
    for name, tensors, meta in fixtures:
        path = os.path.join(OUT_DIR, name + ".safetensors")
        size = write_safetensors(path, tensors, dict(meta, fixture=name,
                                                     torch_version=torch.__version__.split("+")[0]))
        total += size
        print("%-28s %6d bytes  %d tensors" % (name + ".safetensors", size, len(tensors)))
    print("total %d bytes" % total)
    os.makedirs(MHA_API_DIR, exist_ok=True)
    for name, tensors, meta in mha_api_fixtures():
        path = os.path.join(MHA_API_DIR, name + ".safetensors")
        size = write_safetensors(path, tensors, dict(meta, fixture=name,
                                                     torch_version=torch.__version__.split("+")[0]))
        print("%-40s %6d bytes  %d tensors" % ("mha_api/" + name + ".safetensors", size,
                                                len(tensors)))
    os.makedirs(HALF_DIR, exist_ok=True)
    name, tensors, meta = half_state_dict_fixture("state_dict_f16_bf16", 41)
    path = os.path.join(HALF_DIR, name + ".safetensors")
    size = write_safetensors(path, tensors, dict(meta, fixture=name,
                                                 torch_version=torch.__version__.split("+")[0]))
    print("%-40s %6d bytes  %d tensors" % ("half/" + name + ".safetensors", size, len(tensors)))


# --- nn.MultiheadAttention API parity (tests/test_mha_api.cpp) --------------------------
# Written to tests/fixtures/mha_api/<name>.safetensors (a subdirectory: test_golden.cpp's
# every_fixture_is_tested lists the top level only), same layout as mha_fixture; metadata adds
# add_bias_kv, add_zero_attn, unbatched and kpm ("none", "bool", "float").

MHA_API_DIR = os.path.join(OUT_DIR, "mha_api")


def mha_api_fixture(name, seed, B=2, T=4, S=None, E=8, H=2, kdim=None, vdim=None, bias=True,
                    self_attn=False, unbatched=False, add_bias_kv=False, add_zero_attn=False,
                    causal=False, mask=None, kpm=None, batch_first=True):
    """batch_first=False: PyTorch's default layout, query (T, B, E), key/value (S, B, .),
    output (T, B, E) (metadata batch_first 0; the key is absent when True).
    mask: None, "bool2d" (T, S), "bool3d" ((B*H or H), T, S), "float2d" (T, S).
    kpm: None, "bool" or "float" ((B, S), unbatched (S)); padding = the last key of batch 0 and
    the last two of batch 1; the float mask also adds finite values to the other keys."""
    torch.manual_seed(seed)
    S = T if S is None else S
    kd = E if kdim is None else kdim
    vd = E if vdim is None else vdim
    mha = nn.MultiheadAttention(E, H, dropout=0.0, bias=bias, batch_first=batch_first, kdim=kdim,
                                vdim=vdim, add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn)
    randomize_(mha)
    lead = () if unbatched else (B,)
    nb = 1 if unbatched else B

    def shape(L, F):
        return (*lead, L, F) if batch_first else (L, *lead, F)
    if self_attn:
        x = torch.randn(*shape(T, E), requires_grad=True)
        query = key = value = x
        named_inputs = [("x", x)]
    else:
        query = torch.randn(*shape(T, E), requires_grad=True)
        key = torch.randn(*shape(S, kd), requires_grad=True)
        value = torch.randn(*shape(S, vd), requires_grad=True)
        named_inputs = [("query", query), ("key", key), ("value", value)]
    stored = []
    meta = {"kind": "mha", "embed_dim": E, "num_heads": H, "kdim": kd, "vdim": vd,
            "bias": int(bias), "self": int(self_attn), "is_causal": int(causal),
            "unbatched": int(unbatched), "add_bias_kv": int(add_bias_kv),
            "add_zero_attn": int(add_zero_attn), "kpm": kpm or "none"}
    if not batch_first:
        meta["batch_first"] = 0
    attn_mask = None
    if causal:
        attn_mask = torch.triu(torch.ones(T, S, dtype=torch.bool), diagonal=1)
        stored.append(("ref.causal_mask", attn_mask))
    if mask == "bool2d":
        attn_mask = torch.rand(T, S) < 0.3
        for i in range(T):
            attn_mask[i, i % S] = False
        stored.append(("attn_mask", attn_mask))
    elif mask == "bool3d":
        attn_mask = torch.rand(nb * H, T, S) < 0.4
        for bh in range(nb * H):
            for i in range(T):
                attn_mask[bh, i, (i + bh) % S] = False
        stored.append(("attn_mask", attn_mask))
    elif mask == "float2d":
        attn_mask = 0.5 * torch.randn(T, S)
        attn_mask[0, S - 1] = -math.inf
        attn_mask[T - 1, 0] = -math.inf
        stored.append(("attn_mask", attn_mask))
    key_padding_mask = None
    if kpm is not None:
        pad = torch.zeros(nb, S, dtype=torch.bool)
        pad[0, S - 1] = True
        if nb > 1:
            pad[1, S - 2:] = True
        if kpm == "bool":
            key_padding_mask = pad
        else:
            key_padding_mask = (0.5 * torch.randn(nb, S)).masked_fill(pad, -math.inf)
        if unbatched:
            key_padding_mask = key_padding_mask[0]
        stored.append(("key_padding_mask", key_padding_mask))

    return name, mha_call_tensors(mha, named_inputs, stored, query, key, value, key_padding_mask,
                                  attn_mask), meta


class LayerNormNoBias(nn.Module):
    """nn.LayerNorm(E, bias=False) of torch >= 2.1 (and nanoGPT's LayerNorm): weight only."""

    def __init__(self, E, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(E))
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, None, self.eps)


class BlockNoBias(nn.Module):
    """Block without any bias parameter (GPT-2 / nanoGPT bias=False): names as xgrad's
    TransformerBlock(TransformerBlockOptions(E, H, hidden).bias(false))."""

    def __init__(self, E, H, hidden, gelu="none"):
        super().__init__()
        self.gelu = gelu
        self.ln1 = LayerNormNoBias(E)
        self.attn = nn.MultiheadAttention(E, H, dropout=0.0, bias=False, batch_first=True)
        self.ln2 = LayerNormNoBias(E)
        self.ff = nn.Module()
        self.ff.fc1 = nn.Linear(E, hidden, bias=False)
        self.ff.fc2 = nn.Linear(hidden, E, bias=False)

    def forward(self, x, attn_mask=None):
        h = self.ln1(x)
        a, w = self.attn(h, h, h, attn_mask=attn_mask, need_weights=True,
                         average_attn_weights=False)
        x = x + a
        return x + self.ff.fc2(F.gelu(self.ff.fc1(self.ln2(x)), approximate=self.gelu)), w


def block_nobias_fixture(name, seed, B=2, T=4, E=8, H=2, hidden=16, gelu="none"):
    torch.manual_seed(seed)
    block = BlockNoBias(E, H, hidden, gelu)
    randomize_(block)
    x = torch.randn(B, T, E, requires_grad=True)
    attn_mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    out, w = block(x, attn_mask=attn_mask)
    upstream = torch.randn_like(out)
    loss = (out * upstream).sum()
    tensors = [("x", x), ("ref.causal_mask", attn_mask)]
    tensors += [("param." + n, p) for n, p in block.state_dict().items()]
    tensors += [("upstream", upstream), ("output", out), ("weights", w)]
    tensors += grads_of(loss, [("x", x)], block)
    meta = {"kind": "transformer_block", "embed_dim": E, "num_heads": H, "ff_hidden": hidden,
            "is_causal": 1, "bias": 0, "gelu_approximate": gelu}
    return name, tensors, meta


def embedding_padding_fixture(name, seed, num=6, dim=4, padding_idx=2):
    """nn.Embedding(num, dim, padding_idx): row padding_idx is zero at construction (checked
    before randomisation: ref.init_pad_row) and gets no gradient; indices use it twice."""
    torch.manual_seed(seed)
    emb = nn.Embedding(num, dim, padding_idx=padding_idx)
    k = emb.padding_idx  # negative padding_idx stored as num + padding_idx
    init_row = emb.weight[k].detach().clone()
    with torch.no_grad():  # a non-zero padding row: the lookup still returns it
        emb.weight.copy_(torch.randn(num, dim))
    indices = torch.tensor([[0, k, 5, k], [1, 3, k, 4]])
    out = emb(indices)
    upstream = torch.randn_like(out)
    tensors = [("indices", indices), ("ref.init_pad_row", init_row)]
    tensors += [("param." + n, p) for n, p in emb.state_dict().items()]
    tensors += [("upstream", upstream), ("output", out)]
    tensors += grads_of((out * upstream).sum(), [], emb)
    return name, tensors, {"kind": "embedding", "num_embeddings": num, "dim": dim,
                           "padding_idx": padding_idx}


def layer_norm_no_affine_fixture(name, seed, B=2, T=3, E=8, eps=1e-5):
    """nn.LayerNorm(E, elementwise_affine=False): no parameters."""
    torch.manual_seed(seed)
    ln = nn.LayerNorm(E, eps=eps, elementwise_affine=False)
    assert len(list(ln.parameters())) == 0
    x = (1.5 * torch.randn(B, T, E) + 0.5).requires_grad_()
    out = ln(x)
    upstream = torch.randn_like(out)
    tensors = [("x", x), ("upstream", upstream), ("output", out)]
    tensors += grads_of((out * upstream).sum(), [("x", x)], ln)
    return name, tensors, {"kind": "layer_norm_no_affine", "eps": fmt(eps)}


def cross_entropy_class_axis1_fixture(name, seed, N=2, C=4, T=4, ignore_index=-100,
                                      label_smoothing=0.0):
    """F.cross_entropy on PyTorch's layout: logits (N, C, T), classes on axis 1, C == T (the
    shape that class-last would misread silently)."""
    torch.manual_seed(seed)
    logits = (2.0 * torch.randn(N, C, T)).requires_grad_()
    targets = torch.randint(0, C, (N, T), dtype=torch.int64)
    targets[1, 2] = ignore_index
    out = F.cross_entropy(logits, targets, ignore_index=ignore_index,
                          label_smoothing=label_smoothing)
    upstream = torch.randn(())
    tensors = [("logits", logits), ("targets", targets), ("upstream", upstream), ("output", out)]
    tensors += grads_of(out * upstream, [("logits", logits)], None)
    return name, tensors, {"kind": "cross_entropy", "class_axis": 1, "ignore_index": ignore_index,
                           "label_smoothing": fmt(label_smoothing)}


def mha_api_fixtures():
    return [
        mha_api_fixture("unbatched_self", 21, unbatched=True, self_attn=True, T=5, mask="float2d"),
        mha_api_fixture("unbatched_cross", 22, unbatched=True, T=3, S=5, kdim=5, vdim=3,
                        mask="bool3d", kpm="bool"),
        mha_api_fixture("unbatched_self_causal", 23, unbatched=True, self_attn=True, T=4,
                        causal=True),
        mha_api_fixture("bias_kv", 24, T=3, S=5, add_bias_kv=True, mask="bool2d", kpm="bool"),
        mha_api_fixture("zero_attn", 25, self_attn=True, T=4, add_zero_attn=True, mask="bool3d",
                        kpm="bool"),
        mha_api_fixture("bias_kv_zero_attn", 26, T=4, S=5, kdim=5, vdim=3, add_bias_kv=True,
                        add_zero_attn=True, mask="float2d", kpm="bool"),
        mha_api_fixture("bias_kv_zero_attn_causal", 27, self_attn=True, T=5, add_bias_kv=True,
                        add_zero_attn=True, causal=True, bias=False),
        mha_api_fixture("float_kpm", 28, T=3, S=5, kpm="float"),
        mha_api_fixture("float_kpm_self", 29, self_attn=True, T=4, kpm="float"),
        mha_api_fixture("unbatched_float_kpm_bias_kv_zero_attn", 30, unbatched=True, T=3, S=4,
                        add_bias_kv=True, add_zero_attn=True, kpm="float"),
        block_nobias_fixture("block_no_bias", 31),
        block_nobias_fixture("block_no_bias_gelu_tanh", 32, gelu="tanh"),
        mha_api_fixture("seq_first_cross", 33, T=3, S=5, kdim=5, vdim=3, mask="bool2d",
                        kpm="bool", batch_first=False),
        mha_api_fixture("seq_first_self_causal", 34, self_attn=True, T=4, causal=True,
                        batch_first=False),
        embedding_padding_fixture("embedding_padding_idx", 35),
        embedding_padding_fixture("embedding_padding_idx_negative", 36, padding_idx=-1),
        layer_norm_no_affine_fixture("layer_norm_no_affine", 37),
        cross_entropy_class_axis1_fixture("cross_entropy_class_axis1", 38, ignore_index=3,
                                          label_smoothing=0.1),
    ]


# --- half-precision state_dicts (tests/test_checkpoint.cpp) -----------------------------
# Written to tests/fixtures/half/<name>.safetensors (a subdirectory, as mha_api).

HALF_DIR = os.path.join(OUT_DIR, "half")


def half_state_dict_fixture(name, seed, E=8, H=2):
    """An nn.MultiheadAttention(E, H) state_dict in float16 ("f16.<name>") and in bfloat16
    ("bf16.<name>"), as torch users save half-precision models, plus a tensor of special
    values per dtype ("<tag>.special": +-0, +-1, 1/3, the largest finite, the smallest
    normal, the smallest and largest subnormal, +-inf, quiet and signalling NaN with a
    payload, negative NaN), and PyTorch's own float32 conversion of every one of them
    ("f32.<tag>.<name>"), which xgrad's reading must reproduce bit for bit."""
    torch.manual_seed(seed)
    mha = nn.MultiheadAttention(E, H, batch_first=True)
    randomize_(mha)
    nan_bits = {torch.float16: [0x7E00, 0x7C01, 0xFE00, 0x7D55],
                torch.bfloat16: [0x7FC0, 0x7F81, 0xFFC0, 0x7FAA]}
    tensors = []
    for dt, tag in ((torch.float16, "f16"), (torch.bfloat16, "bf16")):
        fi = torch.finfo(dt)
        smallest_subnormal = fi.tiny * fi.eps
        special = torch.tensor([0.0, -0.0, 1.0, -1.0, 1.0 / 3.0, fi.max, -fi.max, fi.tiny, -fi.tiny,
                                smallest_subnormal, -smallest_subnormal,
                                fi.tiny - smallest_subnormal, math.inf, -math.inf], dtype=dt)
        nans = torch.from_numpy(np.array(nan_bits[dt], dtype="<u2").view("<i2")).view(dt)
        state = [(n, p.detach().to(dt)) for n, p in mha.state_dict().items()]
        state.append(("special", torch.cat([special, nans])))
        for n, t in state:
            tensors.append((tag + "." + n, t))
        for n, t in state:
            tensors.append(("f32." + tag + "." + n, t.to(torch.float32)))
    meta = {"kind": "half_state_dict", "embed_dim": E, "num_heads": H}
    return name, tensors, meta


if __name__ == "__main__":
    main()
