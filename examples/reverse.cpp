// reverse: a Transformer encoder learns to reverse digit sequences.
//
// Input:  d_1 d_2 ... d_L PAD ... PAD     (L in [1, 16], batch padded to 16)
// Target: d_L ... d_2 d_1 (ignored at PAD positions)
// The model is bidirectional with a key padding mask; each position classifies its output
// digit. Training stops early once every one of 1,000 held-out sequences is reversed
// exactly. Writes metrics.json, loss.png, attention.png and checkpoint.safetensors to --out.
//
// Data parallel when run by mpirun (built with xgrad::distributed): `mpirun -np 2
// ./build/examples/reverse --out out/reverse-dp` trains the same global batch (--batch) split
// into one contiguous shard of sequences per rank; the gradients are averaged over the ranks
// (DistributedDataParallel), rank 0 alone prints and writes the files, --zero shards AdamW's
// state (ZeRO-1). Without mpirun it is the one-process program, unchanged.
#include "common.hpp"
#ifdef XGRAD_HAVE_DISTRIBUTED
#include <xgrad/distributed/all.hpp>
#endif

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

// The sequences [begin, end) of a batch of B drawn from rng (all B are drawn, so a shard of
// the batch is the same whichever rank makes it); end = B by default. `tokens_total`, when
// given, receives the number of target positions of all B sequences.
Batch make_batch(Rng& rng, std::size_t B, std::size_t begin = 0, std::size_t end = std::size_t(-1),
                 std::size_t* tokens_total = nullptr) {
  if (end > B) end = B;
  const std::size_t n = end - begin;
  std::vector<std::int64_t> tok(n * kMaxLen, kPad), tgt(n * kMaxLen, -100);
  std::vector<bool> pad(n * kMaxLen, true);
  Batch b;
  std::size_t total = 0;
  for (std::size_t i = 0; i < B; ++i) {
    const auto L = std::size_t(rng.uniform_int(1, std::int64_t(kMaxLen)));
    total += L;
    const bool mine = i >= begin && i < end;
    const std::size_t row = (i - begin) * kMaxLen;
    if (mine) b.lengths.push_back(L);
    for (std::size_t t = 0; t < L; ++t) {
      const std::int64_t digit = rng.uniform_int(0, 9);
      if (!mine) continue;
      tok[row + t] = digit;
      pad[row + t] = false;
    }
    if (mine)
      for (std::size_t t = 0; t < L; ++t) tgt[row + t] = tok[row + L - 1 - t];
  }
  if (tokens_total) *tokens_total = total;
  b.tokens = index_tensor(tok, {n, kMaxLen});
  b.padding = bool_tensor(pad, {n, kMaxLen});
  b.targets = index_tensor(tgt, {n, kMaxLen});
  return b;
}

// Sequences whose every target position is predicted exactly.
std::size_t exact_matches(TransformerEncoder& model, const Batch& data) {
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
  return correct;
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
  bool zero = false, dense = false;
  run.add_flag(app, "--dense", dense,
               "run the padding positions through the model too (TransformerConfig::skip_padding false, as PyTorch)");
#ifdef XGRAD_HAVE_DISTRIBUTED
  app.add_flag("--zero", zero,
               "under mpirun: shard AdamW's state across the ranks (ZeRO-1; the same parameters, bit for bit)");
#endif
  CLI11_PARSE(app, argc, argv);

  int rank = 0, world = 1;
  bool in_step = false;  // the ranks have started collectives: a local error must end them all
#ifdef XGRAD_HAVE_DISTRIBUTED
  struct FinalizeAtExit {
    ~FinalizeAtExit() { xgrad::distributed::finalize(); }
  } finalize_at_exit;
#endif
  try {
#ifdef XGRAD_HAVE_DISTRIBUTED
    namespace dist = xgrad::distributed;
    dist::init(argc, argv);
    rank = dist::rank(), world = dist::world_size();
    if (rank != 0) std::cout.rdbuf(nullptr);  // rank 0 alone prints
#endif
    if (examples::resolve_resume(opt, run)) return 0;
    if (cfg.embed_dim % cfg.num_heads != 0)
      throw ValueError("--dim " + std::to_string(cfg.embed_dim) + " is not a multiple of --heads " +
                       std::to_string(cfg.num_heads));
    if (batch_size < std::size_t(world))
      throw ValueError("--batch " + std::to_string(batch_size) + " is smaller than the " + std::to_string(world) +
                       " ranks: every rank needs at least one sequence of the global batch");
    if (zero && world == 1) std::cerr << "reverse: --zero has no effect with one rank\n";
    examples::setup_runtime(opt);
    cfg.seed = opt.seed;
    cfg.skip_padding = !dense;
    if (rank == 0) std::filesystem::create_directories(opt.out);
    const long total = opt.steps;
    TransformerEncoder model(cfg);
    const AdamWOptions adamw = AdamWOptions(lr).betas(0.9, 0.98).eps(1e-9).weight_decay(0.01);
#ifdef XGRAD_HAVE_DISTRIBUTED
    std::unique_ptr<dist::DistributedDataParallel> ddp;  // outlives the optimizer
#endif
    std::unique_ptr<Optimizer> optimizer = std::make_unique<AdamW>(model.named_parameters(), adamw);
    examples::Parallel parallel;
#ifdef XGRAD_HAVE_DISTRIBUTED
    if (dist::uses_mpi()) {
      in_step = true;
      ddp = std::make_unique<dist::DistributedDataParallel>(model);  // rank 0's initial values everywhere
      if (zero) {
        optimizer.reset();
        optimizer = std::make_unique<dist::ZeroOptimizer>(
            *ddp, [&](const NamedTensors& shard) { return std::make_unique<AdamW>(shard, adamw); });
      }
      auto* zero_opt = dynamic_cast<dist::ZeroOptimizer*>(optimizer.get());
      parallel.root = rank == 0;
      parallel.global_loss = [](double mine) {
        Tensor l = scalar(mine, DType::Float64);
        dist::all_reduce(l, dist::ReduceOp::Average);
        return l.item();
      };
      parallel.clip_grad_norm = [&model, zero_opt](double max_norm) {
        return zero_opt ? zero_opt->clip_grad_norm(max_norm) : clip_grad_norm(model.parameters(), max_norm);
      };
      parallel.save = [&](const std::string& path, const std::map<std::string, std::string>& meta) {
        dist::save_checkpoint(path, model, optimizer.get(), meta);
      };
      parallel.load = [&](const std::string& path) { return dist::load_checkpoint(path, model, optimizer.get()); };
    }
#endif
    // This rank's shard of each batch: every rank draws the whole global batch from (seed, step)
    // and keeps its contiguous sequences (one rank: all of them, as without MPI).
    auto shard = [&](std::size_t n) -> std::pair<std::size_t, std::size_t> {
#ifdef XGRAD_HAVE_DISTRIBUTED
      return dist::shard_range(n, rank, world);  // sizes differ by at most one
#else
      return {0, n};
#endif
    };
    Rng heldout_rng(opt.seed + 1000003);
    const auto [held_begin, held_end] = shard(heldout_size);
    const Batch heldout = make_batch(heldout_rng, heldout_size, held_begin, held_end);
    auto loss_at = [&](long step) {
      Rng rng(opt.seed * 1000003 + std::uint64_t(step));  // data for step s depends only on (seed, s)
      if (world == 1) {
        Batch b = make_batch(rng, batch_size);
        return cross_entropy(model.forward(b.tokens, b.padding), b.targets);
      }
      // The global loss is the mean over every target position of the global batch; a rank's
      // mean over its own positions is weighted by N * (its positions) / (all positions), so
      // that the ranks' average (what DistributedDataParallel makes of the gradients) is the
      // global mean, whatever the shards' lengths (also when --batch is not a multiple of N).
      const auto [begin, end] = shard(batch_size);
      std::size_t all_tokens = 0, my_tokens = 0;
      Batch b = make_batch(rng, batch_size, begin, end, &all_tokens);
      for (std::size_t L : b.lengths) my_tokens += L;
      Tensor mean = cross_entropy(model.forward(b.tokens, b.padding), b.targets);
      return mul_scalar(mean, double(world) * double(my_tokens) / double(all_tokens));
    };
    auto evaluate = [&] {
      double correct = double(exact_matches(model, heldout));
#ifdef XGRAD_HAVE_DISTRIBUTED
      if (world > 1) {
        Tensor c = scalar(correct, DType::Float64);
        dist::all_reduce(c, dist::ReduceOp::Sum);  // counts: exact in float64
        correct = c.item();
      }
#endif
      return correct / double(heldout_size);
    };
    auto result = examples::train(opt, run, total, lr, model, *optimizer, loss_at, evaluate,
                                  parallel.save ? &parallel : nullptr);
    if (rank != 0) return 0;

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
                    {"parameters", model.parameter_count()}, {"ranks", world}, {"zero", zero && world > 1}}},
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
    std::cout << "ran on: " << runtime_summary() << (world > 1 ? " | ranks " + std::to_string(world) : "") << "\n";
    return plots.ok() ? 0 : 1;
  } catch (const std::exception& e) {
#ifdef XGRAD_HAVE_DISTRIBUTED
    // Before the first collective every rank meets the same error; after it, a rank that stops
    // alone would leave the others waiting: end them all, unless every rank threw this one.
    const auto* de = dynamic_cast<const xgrad::distributed::DistributedError*>(&e);
    std::cerr << "reverse: " << (world > 1 && !de ? "rank " + std::to_string(rank) + ": " : "") << "error: " << e.what()
              << "\n";
    if (world > 1 && in_step && !(de && de->collective())) xgrad::distributed::abort(2);
#else
    std::cerr << "reverse: error: " << e.what() << "\n";
#endif
    return 2;
  }
}
