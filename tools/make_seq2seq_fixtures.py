#!/usr/bin/python3
"""Writes the golden fixtures of tests/test_seq2seq.cpp: torch.nn.Transformer (encoder-decoder).

Run by hand from the repository root with Debian's python3-torch (1.13 was used):

    /usr/bin/python3 tools/make_seq2seq_fixtures.py

Each configuration goes to tests/fixtures/seq2seq/<name>_<f32|f64>.safetensors (the writer
and the parameter randomisation are tools/make_fixtures.py's). A small nn.Transformer
(d_model 16, 2 encoder + 2 decoder layers, dim_feedforward 32, dropout 0) with randomised
parameters (LayerNorm weights around 1, non-zero biases) runs on

  src (S, B, E) or (B, S, E)   tgt (T, B, E) or (B, T, E)    (batch_first from the metadata)
  src_key_padding_mask (B, S) bool, memory_key_padding_mask = the same, tgt_key_padding_mask
  (B, T) bool (True = padding), tgt_mask = causal (T, T) bool (True = masked)

in training mode (dropout 0: PyTorch's slow path, the one that supports autograd). No row
is fully masked (PyTorch gives NaN there; xgrad's finiteness is tested separately).
Stored: "param.<state_dict name>", the inputs, "memory" (the encoder's output),
"upstream" (random, shaped like the output), "output", and "grad.src", "grad.tgt",
"grad.param.<name>" of sum(output * upstream). Metadata: the module's options.
Float32 and float64 files come from the same parameters and inputs (float64 computed
natively, not converted from the float32 results).
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import grads_of, randomize_, write_safetensors  # noqa: E402

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "seq2seq")

CONFIGS = [
    # name, nhead, activation, norm_first, batch_first
    ("post_ln_relu_seq_first", 2, "relu", False, False),
    ("pre_ln_gelu_batch_first", 4, "gelu", True, True),
    ("post_ln_gelu_batch_first", 4, "gelu", False, True),
    ("pre_ln_relu_seq_first", 2, "relu", True, False),
]
D_MODEL, FF, LAYERS, B, S, T = 16, 32, 2, 2, 5, 4


def fixture(name, seed, nhead, activation, norm_first, batch_first):
    torch.manual_seed(seed)
    model = nn.Transformer(d_model=D_MODEL, nhead=nhead, num_encoder_layers=LAYERS, num_decoder_layers=LAYERS,
                           dim_feedforward=FF, dropout=0.0, activation=activation, batch_first=batch_first,
                           norm_first=norm_first)
    randomize_(model)
    model.train()  # dropout is 0; training mode keeps PyTorch off its inference fast path
    src_shape = (B, S, D_MODEL) if batch_first else (S, B, D_MODEL)
    tgt_shape = (B, T, D_MODEL) if batch_first else (T, B, D_MODEL)
    src0, tgt0 = torch.randn(src_shape), torch.randn(tgt_shape)
    src_kpm = torch.zeros(B, S, dtype=torch.bool)
    src_kpm[1, S - 2:] = True
    tgt_kpm = torch.zeros(B, T, dtype=torch.bool)
    tgt_kpm[0, T - 1] = True
    tgt_mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    upstream0 = torch.randn(tgt_shape)
    for dtype, tag in ((torch.float32, "f32"), (torch.float64, "f64")):
        m = model.to(dtype)
        src = src0.to(dtype).requires_grad_()
        tgt = tgt0.to(dtype).requires_grad_()
        memory = m.encoder(src, src_key_padding_mask=src_kpm)
        out = m(src, tgt, tgt_mask=tgt_mask, src_key_padding_mask=src_kpm, tgt_key_padding_mask=tgt_kpm,
                memory_key_padding_mask=src_kpm)
        assert torch.isfinite(out).all() and torch.isfinite(memory).all()
        upstream = upstream0.to(dtype)
        loss = (out * upstream).sum()
        tensors = [("src", src), ("tgt", tgt), ("src_key_padding_mask", src_kpm),
                   ("tgt_key_padding_mask", tgt_kpm), ("tgt_mask", tgt_mask)]
        tensors += [("param." + n, p) for n, p in m.state_dict().items()]
        tensors += [("memory", memory), ("upstream", upstream), ("output", out)]
        tensors += grads_of(loss, [("src", src), ("tgt", tgt)], m)
        meta = {"fixture": f"{name}_{tag}", "kind": "transformer", "d_model": D_MODEL, "nhead": nhead,
                "num_encoder_layers": LAYERS, "num_decoder_layers": LAYERS, "dim_feedforward": FF,
                "activation": activation, "norm_first": int(norm_first), "batch_first": int(batch_first),
                "layer_norm_eps": repr(1e-5), "dtype": tag, "torch": torch.__version__}
        path = os.path.join(OUT_DIR, f"{name}_{tag}.safetensors")
        size = write_safetensors(path, tensors, meta)
        print(f"{path}: {len(tensors)} tensors, {size} bytes")


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT_DIR, exist_ok=True)
    for i, (name, nhead, activation, norm_first, batch_first) in enumerate(CONFIGS):
        fixture(name, 100 + i, nhead, activation, norm_first, batch_first)


if __name__ == "__main__":
    main()
