// sort: a GPT-style causal decoder learns to sort digit sequences (after minGPT's demo).
//
// Sequence: x_1 ... x_n | s_1 ... s_n where s = sorted(x), n = --length (default 8).
// The model sees the first 2n - 1 tokens and predicts the next token at every position;
// only the n sorted outputs are scored (the rest are ignore_index). At evaluation it
// decodes the n outputs greedily, one token at a time, from the n inputs alone.
#include "common.hpp"

using namespace xgrad;

namespace {

struct Task {
  std::size_t n = 8;        // sequence length
  std::int64_t digits = 10; // vocabulary
  // tokens (B, 2n - 1), targets (B, 2n - 1) with -100 where nothing is predicted.
  std::pair<Tensor, Tensor> batch(Rng& rng, std::size_t B) const {
    const std::size_t L = 2 * n - 1;
    std::vector<std::int64_t> tok(B * L), tgt(B * L, -100);
    for (std::size_t i = 0; i < B; ++i) {
      std::vector<std::int64_t> x(n);
      for (auto& v : x) v = rng.uniform_int(0, digits - 1);
      std::vector<std::int64_t> s = x;
      std::sort(s.begin(), s.end());
      std::vector<std::int64_t> seq = x;
      seq.insert(seq.end(), s.begin(), s.end());
      for (std::size_t t = 0; t < L; ++t) tok[i * L + t] = seq[t];
      for (std::size_t t = n - 1; t < L; ++t) tgt[i * L + t] = seq[t + 1];
    }
    return {index_tensor(tok, {B, L}), index_tensor(tgt, {B, L})};
  }
};

// Greedy decoding of the n sorted outputs from the n inputs; fraction decoded exactly.
double exact_match(TransformerDecoder& model, const Task& task, const Tensor& tokens) {
  NoGradGuard no_grad;
  const std::size_t B = tokens.shape()[0], n = task.n, L = 2 * n - 1;
  const std::int64_t* all = tokens.data<std::int64_t>();
  std::vector<std::vector<std::int64_t>> seqs(B);
  for (std::size_t i = 0; i < B; ++i) seqs[i].assign(all + i * L, all + i * L + n);
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t len = n + k;
    std::vector<std::int64_t> flat;
    for (auto& s : seqs) flat.insert(flat.end(), s.begin(), s.end());
    Tensor logits = model.forward(index_tensor(flat, {B, len}));  // (B, len, V)
    auto lv = logits.to_vector();
    const std::size_t V = logits.shape()[2];
    for (std::size_t i = 0; i < B; ++i) {
      const double* row = lv.data() + (i * len + len - 1) * V;
      seqs[i].push_back(std::max_element(row, row + V) - row);
    }
  }
  std::size_t correct = 0;
  for (std::size_t i = 0; i < B; ++i) {
    std::vector<std::int64_t> expect(all + i * L, all + i * L + n);
    std::sort(expect.begin(), expect.end());
    correct += std::equal(expect.begin(), expect.end(), seqs[i].begin() + long(n));
  }
  return double(correct) / double(B);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sort: a GPT-style causal Transformer learns to sort digit sequences"};
  examples::CommonOptions opt;
  opt.steps = 3000;
  examples::RunConfig run("sort");
  Task task;
  std::size_t batch_size = 64, heldout_size = 1000;
  double lr = 3e-3;
  TransformerConfig cfg;
  cfg.embed_dim = 64, cfg.num_heads = 4, cfg.ff_hidden = 128, cfg.num_layers = 2, cfg.dropout = 0.0;
  cfg.tied_output = true;
  examples::add_common_options(app, opt, run);
  run.add(app, "--length", task.n, "digits per sequence", examples::whole_number(2, 32));
  run.add(app, "--batch", batch_size, "sequences per step", examples::whole_number(1, 65536));
  run.add(app, "--lr", lr, "peak learning rate (AdamW, warmup + cosine)", examples::positive_number());
  run.add(app, "--layers", cfg.num_layers, "Transformer blocks", examples::whole_number(1, 64));
  CLI11_PARSE(app, argc, argv);

  try {
    if (examples::resolve_resume(opt, run)) return 0;
    examples::setup_runtime(opt);
    std::filesystem::create_directories(opt.out);
    cfg.vocab_size = std::size_t(task.digits), cfg.max_len = 2 * task.n, cfg.seed = opt.seed;
    TransformerDecoder model(cfg);
    AdamW optimizer(model.named_parameters(), AdamWOptions(lr).betas(0.9, 0.98).eps(1e-9).weight_decay(0.01));
    Rng heldout_rng(opt.seed + 1000003);
    const Tensor heldout = task.batch(heldout_rng, heldout_size).first;
    auto loss_at = [&](long step) {
      Rng rng(opt.seed * 1000003 + std::uint64_t(step));
      auto [tokens, targets] = task.batch(rng, batch_size);
      return cross_entropy(model.forward(tokens), targets);
    };
    auto result = examples::train(opt, run, opt.steps, lr, model, optimizer, loss_at,
                                  [&] { return exact_match(model, task, heldout); });

    // Attention picture: one held-out sequence, teacher-forced.
    Rng pick(opt.seed + 7);
    Tensor one = task.batch(pick, 1).first;
    {
      NoGradGuard no_grad;
      model.eval();
      model.forward(one, /*need_weights=*/true);
    }
    std::vector<std::string> labels;
    for (std::size_t t = 0; t < one.numel(); ++t) labels.push_back(std::to_string(one.data<std::int64_t>()[t]));
    examples::Plots plots(!opt.no_plots);
    plots.draw(opt.out + "/loss.png", examples::curves_script(opt.out + "/loss.png", result.curve, result.accuracies));
    plots.draw(opt.out + "/attention.png",
               examples::attention_script(opt.out + "/attention.png", model.body.attention_weights(), labels,
                                          labels, "sort: causal attention (inputs, then sorted outputs)"));
    examples::write_metrics(opt.out + "/metrics.json",
                         {{"example", "sort"},
                          {"config", {{"seed", opt.seed}, {"length", task.n}, {"batch", batch_size}, {"lr", lr},
                                      {"max_steps", opt.steps}, {"layers", cfg.num_layers},
                                      {"embed_dim", cfg.embed_dim}, {"heads", cfg.num_heads},
                                      {"threads", num_threads()}, {"parameters", model.parameter_count()}}},
                          {"evaluations", result.history},
                          {"final_heldout_exact_match", result.accuracy},
                          {"heldout_size", heldout_size},
                          {"steps", result.steps},
                          {"wall_time_seconds_total", result.total_seconds},
                          {"wall_time_seconds_this_run", result.seconds}});
    std::cout << "sort: " << result.steps << " steps, held-out exact match (greedy) " << 100 * result.accuracy
              << "%" << examples::evaluated_at(result) << " on " << heldout_size << " sequences, "
              << examples::seconds_text(result) << "; "
              << examples::outputs_line(opt.out, plots.written(), result) << "\n";
    std::cout << "ran on: " << runtime_summary() << "\n";
    return plots.ok() ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "sort: error: " << e.what() << "\n";
    return 2;
  }
}
