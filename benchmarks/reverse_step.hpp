// reverse_step.hpp — one training step of the `reverse` example's default model, shared by
// bench_mha (BM_train_step_reverse) and train_step_rss (peak RSS driver).
//
// Model and step exactly as examples/reverse.cpp with its defaults:
//   TransformerEncoder vocab 11, max_len 16, E 64, H 4, ff_hidden 128, 2 layers, dropout 0,
//   learned positions; batch 64 of length-1..16 digit sequences padded to 16 (PAD = 10) with
//   a key padding mask (true = PAD); cross_entropy with ignore_index -100 at PAD positions;
//   zero_grad, backward, clip_grad_norm(1.0), AdamW(lr 3e-3, betas (0.9, 0.98), eps 1e-9,
//   weight decay 0.01).
// Differences from the example's loop, on purpose: the learning rate is constant (the
// warmup-cosine schedule is one scalar formula) and the batches are generated before
// timing (kBatches distinct batches, used in turn), as in benchmarks/torch_mha.py.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "xgrad/xgrad.hpp"

namespace xgrad_bench {

struct ReverseBatch {
  xgrad::Tensor tokens;   // (B, 16) int64
  xgrad::Tensor padding;  // (B, 16) bool, true = PAD
  xgrad::Tensor targets;  // (B, 16) int64, -100 at PAD
};

inline ReverseBatch make_reverse_batch(xgrad::Rng& rng, std::size_t B) {
  constexpr std::int64_t kPad = 10;
  constexpr std::size_t kMaxLen = 16;
  std::vector<std::int64_t> tok(B * kMaxLen, kPad), tgt(B * kMaxLen, -100);
  std::vector<bool> pad(B * kMaxLen, true);
  for (std::size_t i = 0; i < B; ++i) {
    const auto L = std::size_t(rng.uniform_int(1, std::int64_t(kMaxLen)));
    for (std::size_t t = 0; t < L; ++t) {
      tok[i * kMaxLen + t] = rng.uniform_int(0, 9);
      pad[i * kMaxLen + t] = false;
    }
    for (std::size_t t = 0; t < L; ++t) tgt[i * kMaxLen + t] = tok[i * kMaxLen + L - 1 - t];
  }
  return {xgrad::index_tensor(tok, {B, kMaxLen}), xgrad::bool_tensor(pad, {B, kMaxLen}),
          xgrad::index_tensor(tgt, {B, kMaxLen})};
}

// skip_padding: the example's default (TransformerConfig::skip_padding; the blocks run the
// real positions only). false: every position, as PyTorch's nn.TransformerEncoder trains.
inline xgrad::TransformerConfig reverse_config(bool skip_padding = true) {
  xgrad::TransformerConfig cfg;
  cfg.vocab_size = 11, cfg.max_len = 16, cfg.embed_dim = 64, cfg.num_heads = 4;
  cfg.ff_hidden = 128, cfg.num_layers = 2, cfg.dropout = 0.0;
  cfg.positional = xgrad::PositionalKind::Learned;
  cfg.seed = 0;
  cfg.skip_padding = skip_padding;
  return cfg;
}

class ReverseTrainer {
 public:
  static constexpr std::size_t kBatch = 64, kBatches = 8;

  explicit ReverseTrainer(bool skip_padding = true)
      : model_(reverse_config(skip_padding)),
        optimizer_(model_.named_parameters(), xgrad::AdamWOptions(3e-3).betas(0.9, 0.98).eps(1e-9).weight_decay(0.01)) {
    xgrad::Rng rng(12345);
    for (std::size_t i = 0; i < kBatches; ++i) batches_.push_back(make_reverse_batch(rng, kBatch));
  }

  // One step: forward, loss, backward, clip, AdamW. Returns the loss tensor (rank 0).
  xgrad::Tensor step() {
    const ReverseBatch& b = batches_[next_++ % batches_.size()];
    xgrad::Tensor loss = xgrad::cross_entropy(model_.forward(b.tokens, b.padding), b.targets, -100);
    optimizer_.zero_grad();
    loss.backward();
    xgrad::clip_grad_norm(model_.parameters(), 1.0);
    optimizer_.step();
    return loss;
  }

  std::size_t parameter_count() const { return model_.parameter_count(); }

 private:
  xgrad::TransformerEncoder model_;
  xgrad::AdamW optimizer_;
  std::vector<ReverseBatch> batches_;
  std::size_t next_ = 0;
};

}  // namespace xgrad_bench
