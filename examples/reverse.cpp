// reverse: a Transformer encoder learns to reverse digit sequences.
//
// Input:  d_1 d_2 ... d_L PAD ... PAD     (L in [1, 16], batch padded to 16)
// Target: d_L ... d_2 d_1 (ignored at PAD positions)
// The model is bidirectional with a key padding mask; each position classifies its output
// digit. Training stops early once every one of 1,000 held-out sequences is reversed
// exactly. Writes metrics.json, loss.png, attention.png and checkpoint.safetensors to --out.
#include "common.hpp"

using namespace xgrad;

namespace {

constexpr std::int64_t kPad = 10, kVocab = 11;
constexpr std::size_t kMaxLen = 16;

struct Batch {
  Tensor tokens;    // (B, 16) int64
  Tensor padding;   // (B, 16) bool, true = PAD
  Tensor targets;   // (B, 16) int64, -100 at PAD
  std::vector<std::size_t> lengths;
};

Batch make_batch(Rng& rng, std::size_t B) {
  std::vector<std::int64_t> tok(B * kMaxLen, kPad), tgt(B * kMaxLen, -100);
  std::vector<bool> pad(B * kMaxLen, true);
  Batch b;
  for (std::size_t i = 0; i < B; ++i) {
    const auto L = std::size_t(rng.uniform_int(1, std::int64_t(kMaxLen)));
    b.lengths.push_back(L);
    for (std::size_t t = 0; t < L; ++t) {
      tok[i * kMaxLen + t] = rng.uniform_int(0, 9);
      pad[i * kMaxLen + t] = false;
    }
    for (std::size_t t = 0; t < L; ++t) tgt[i * kMaxLen + t] = tok[i * kMaxLen + L - 1 - t];
  }
  b.tokens = index_tensor(tok, {B, kMaxLen});
  b.padding = bool_tensor(pad, {B, kMaxLen});
  b.targets = index_tensor(tgt, {B, kMaxLen});
  return b;
}

// Fraction of sequences whose every target position is predicted exactly.
double exact_match(TransformerEncoder& model, const Batch& data) {
  NoGradGuard no_grad;
  Tensor logits = model.forward(data.tokens, data.padding);  // (B, 16, V)
  auto lv = logits.to_vector();
  const std::int64_t* tgt = data.targets.data<std::int64_t>();
  std::size_t correct = 0;
  for (std::size_t i = 0; i < data.lengths.size(); ++i) {
    bool ok = true;
    for (std::size_t t = 0; t < data.lengths[i] && ok; ++t) {
      const double* row = lv.data() + (i * kMaxLen + t) * kVocab;
      ok = std::max_element(row, row + kVocab) - row == tgt[i * kMaxLen + t];
    }
    correct += ok;
  }
  return double(correct) / double(data.lengths.size());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"reverse: a Transformer encoder learns to reverse digit sequences (lengths 1-16)"};
  examples::CommonOptions opt;
  opt.steps = 3000;
  examples::RunConfig run("reverse");
  std::size_t batch_size = 64, heldout_size = 1000;
  double lr = 3e-3;
  TransformerConfig cfg;
  cfg.vocab_size = kVocab, cfg.max_len = kMaxLen, cfg.embed_dim = 64, cfg.num_heads = 4;
  cfg.ff_hidden = 128, cfg.num_layers = 2, cfg.dropout = 0.0;
  examples::add_common_options(app, opt, run);
  run.add(app, "--batch", batch_size, "sequences per step", examples::whole_number(1, 65536));
  run.add(app, "--lr", lr, "peak learning rate (AdamW, warmup + cosine)", examples::positive_number());
  run.add(app, "--layers", cfg.num_layers, "Transformer blocks", examples::whole_number(1, 64));
  run.add(app, "--dim", cfg.embed_dim, "embedding size (a multiple of --heads)", examples::whole_number(1, 4096));
  run.add(app, "--heads", cfg.num_heads, "attention heads", examples::whole_number(1, 256));
  CLI11_PARSE(app, argc, argv);

  try {
    if (examples::resolve_resume(opt, run)) return 0;
    if (cfg.embed_dim % cfg.num_heads != 0)
      throw ValueError("--dim " + std::to_string(cfg.embed_dim) + " is not a multiple of --heads " +
                       std::to_string(cfg.num_heads));
    examples::setup_runtime(opt);
    cfg.seed = opt.seed;
    std::filesystem::create_directories(opt.out);
    const long total = opt.steps;
    TransformerEncoder model(cfg);
    AdamW optimizer(model.named_parameters(), AdamWOptions(lr).betas(0.9, 0.98).eps(1e-9).weight_decay(0.01));
    Rng heldout_rng(opt.seed + 1000003);
    const Batch heldout = make_batch(heldout_rng, heldout_size);
    auto loss_at = [&](long step) {
      Rng rng(opt.seed * 1000003 + std::uint64_t(step));  // data for step s depends only on (seed, s)
      Batch b = make_batch(rng, batch_size);
      return cross_entropy(model.forward(b.tokens, b.padding), b.targets);
    };
    auto result = examples::train(opt, run, total, lr, model, optimizer, loss_at,
                                  [&] { return exact_match(model, heldout); });

    // Attention picture for one held-out example.
    Rng pick(opt.seed + 7);
    Batch one = make_batch(pick, 1);
    {
      NoGradGuard no_grad;
      model.eval();
      model.forward(one.tokens, one.padding, /*need_weights=*/true);
    }
    std::vector<std::string> labels;
    for (std::size_t t = 0; t < kMaxLen; ++t) {
      auto v = one.tokens.data<std::int64_t>()[t];
      labels.push_back(v == kPad ? "_" : std::to_string(v));
    }
    examples::Plots plots(!opt.no_plots);
    plots.draw(opt.out + "/loss.png", examples::curves_script(opt.out + "/loss.png", result.curve, result.accuracies));
    plots.draw(opt.out + "/attention.png",
               examples::attention_script(opt.out + "/attention.png", model.body.attention_weights(), labels,
                                          labels, "reverse: who attends to whom (_ = padding)"));

    nlohmann::json metrics = {
        {"example", "reverse"},
        {"config", {{"seed", opt.seed}, {"batch", batch_size}, {"lr", lr}, {"max_steps", total},
                    {"layers", cfg.num_layers}, {"embed_dim", cfg.embed_dim}, {"heads", cfg.num_heads},
                    {"ff_hidden", cfg.ff_hidden}, {"threads", num_threads()},
                    {"parameters", model.parameter_count()}}},
        {"evaluations", result.history},
        {"final_heldout_exact_match", result.accuracy},
        {"heldout_size", heldout_size},
        {"steps", result.steps},
        {"wall_time_seconds_total", result.total_seconds},
        {"wall_time_seconds_this_run", result.seconds}};
    examples::write_metrics(opt.out + "/metrics.json", metrics);
    std::cout << "reverse: " << result.steps << " steps, held-out exact match " << 100 * result.accuracy
              << "%" << examples::evaluated_at(result) << " on " << heldout_size << " sequences, "
              << examples::seconds_text(result) << "; "
              << examples::outputs_line(opt.out, plots.written(), result) << "\n";
    std::cout << "ran on: " << runtime_summary() << "\n";
    return plots.ok() ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "reverse: error: " << e.what() << "\n";
    return 2;
  }
}
