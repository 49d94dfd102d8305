// char_gpt: a GPT-style character-level language model trained on the fortunes text
// (Debian's fortunes package), then sampling with temperature and top-k.
//
// Data: the fortune files' entries, split 90/10 by document (seeded); each split is one
// character stream with every fortune followed by "%\n" (the files' own separator). The
// vocabulary is every character (Unicode code point) of the corpus. Training windows of
// --context + 1 characters start at seeded random offsets of the training stream.
// Model: token embedding + learned positions -> pre-LayerNorm causal blocks -> LayerNorm ->
// logits through the token embedding (tied), no biases (nanoGPT's shakespeare_char layout).
// Reports validation loss in nats and bits per character (every position of consecutive
// --context windows of the validation stream), next to a unigram and a bigram model (add-one
// counts of the training stream) computed here. Then samples --tokens characters after
// --prompt twice, without and with the key/value cache, and shows both give the same text for
// the same seed and how many characters per second each makes.
// Writes metrics.json, loss.png, attention.png, samples.txt, generation.json (the sample with
// both speeds) and checkpoint.safetensors
// (with the vocabulary) to --out; --resume continues a run bit for bit; --generate-only
// samples from the checkpoint in --out without training (no data package needed).
#include <sstream>

#include "common.hpp"

using namespace xgrad;

namespace {

const std::string kSeparator = "%\n";  // ends every fortune in the character streams

// Concatenation of the chosen documents, each followed by the separator.
std::string stream_of(const TextCorpus& c, const std::vector<std::size_t>& docs) {
  std::string s;
  for (std::size_t d : docs) s += c.documents[d] + kSeparator;
  return s;
}

// Windows of T + 1 characters from `ids` at seeded random offsets: inputs (B, T), targets (B, T).
std::pair<Tensor, Tensor> random_windows(const std::vector<std::int64_t>& ids, std::size_t B, std::size_t T, Rng& rng) {
  std::vector<std::int64_t> x(B * T), y(B * T);
  for (std::size_t b = 0; b < B; ++b) {
    const auto off = std::size_t(rng.uniform_int(0, std::int64_t(ids.size() - T - 1)));
    std::copy(ids.begin() + std::ptrdiff_t(off), ids.begin() + std::ptrdiff_t(off + T), x.begin() + std::ptrdiff_t(b * T));
    std::copy(ids.begin() + std::ptrdiff_t(off + 1), ids.begin() + std::ptrdiff_t(off + T + 1), y.begin() + std::ptrdiff_t(b * T));
  }
  return {index_tensor(x, {B, T}), index_tensor(y, {B, T})};
}

struct ValResult {
  double loss = 0;      // nats per character
  double accuracy = 0;  // next-character top-1
  std::size_t predicted = 0;
};

// Every position of consecutive windows of T characters (the last window shorter): position t
// of a window predicts character t + 1 from the window's characters 0..t.
ValResult validate(TransformerDecoder& model, const std::vector<std::int64_t>& ids, std::size_t T) {
  NoGradGuard no_grad;
  model.eval();
  ValResult r;
  double loss_sum = 0;
  std::size_t correct = 0;
  const std::size_t n = ids.size() - 1, per_batch = 32;
  for (std::size_t start = 0; start < n;) {
    // A batch of full windows, or one final shorter window.
    const std::size_t len = std::min(T, n - start);
    const std::size_t B = len == T ? std::min(per_batch, (n - start) / T) : 1;
    std::vector<std::int64_t> x(B * len), y(B * len);
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t t = 0; t < len; ++t) {
        x[b * len + t] = ids[start + b * len + t];
        y[b * len + t] = ids[start + b * len + t + 1];
      }
    Tensor logits = model.forward(index_tensor(x, {B, len}));
    Tensor targets = index_tensor(y, {B, len});
    loss_sum += cross_entropy(logits, targets).item() * double(B * len);
    const Tensor predicted = argmax(logits, 2);  // (B, len)
    for (std::size_t i = 0; i < B * len; ++i) correct += predicted.data<std::int64_t>()[i] == y[i];
    r.predicted += B * len;
    start += B * len;
  }
  model.train();
  r.loss = loss_sum / double(r.predicted);
  r.accuracy = double(correct) / double(r.predicted);
  return r;
}

// Unigram and bigram models of the training stream with add-one counts, scored on the
// validation stream (nats per character; the bigram from the second character on).
std::pair<double, double> ngram_baselines(const std::vector<std::int64_t>& train, const std::vector<std::int64_t>& val,
                                          std::size_t V) {
  std::vector<double> uni(V, 1.0), bi(V * V, 1.0), row(V, double(V));
  for (std::size_t i = 0; i < train.size(); ++i) {
    uni[std::size_t(train[i])] += 1;
    if (i > 0) bi[std::size_t(train[i - 1]) * V + std::size_t(train[i])] += 1, row[std::size_t(train[i - 1])] += 1;
  }
  const double uni_total = double(train.size()) + double(V);
  double u = 0, b = 0;
  for (std::size_t i = 0; i < val.size(); ++i) u -= std::log(uni[std::size_t(val[i])] / uni_total);
  for (std::size_t i = 1; i < val.size(); ++i)
    b -= std::log(bi[std::size_t(val[i - 1]) * V + std::size_t(val[i])] / row[std::size_t(val[i - 1])]);
  return {u / double(val.size()), b / double(val.size() - 1)};
}

// Next character from the last position's logits (1, V): the top_k largest kept (topk; 0 or
// V: all), then one seeded draw from softmax(kept / temperature) (sample_categorical).
std::int64_t sample_next(const Tensor& logits, std::size_t top_k, double temperature, Rng& rng) {
  const std::size_t V = logits.shape()[1];
  if (top_k == 0 || top_k >= V) return sample_categorical(logits, rng, temperature).data<std::int64_t>()[0];
  const TopK best = topk(logits, long(top_k), -1);  // (1, k) values and ids, largest first
  const std::int64_t pick = sample_categorical(best.values, rng, temperature).data<std::int64_t>()[0];
  return best.indices.data<std::int64_t>()[pick];
}

struct Generation {
  std::vector<std::int64_t> tokens;  // the new ones
  double seconds = 0;
};

// Samples n characters after `prompt` through a DecodingSession (models/decoding.hpp), with
// the key/value cache (each new character runs the model over one position) or without (over
// the whole context again). The context grows from the prompt; when it holds max_len
// characters a fresh session is fed the newest max_len / 2 (the same rule both ways, so both
// give the same text for the same seed).
Generation generate_text(TransformerDecoder& model, const std::vector<std::int64_t>& prompt, std::size_t n,
                         double temperature, std::size_t top_k, std::uint64_t seed, bool use_cache) {
  NoGradGuard no_grad;
  model.eval();
  const std::size_t T = model.body.config.max_len, V = model.body.config.vocab_size;
  Rng rng(seed);
  std::vector<std::int64_t> context = prompt;
  Generation g;
  const auto t0 = std::chrono::steady_clock::now();
  auto session = decoding_session(model, use_cache);
  Tensor logits = session->step(index_tensor(context, {1, context.size()}));  // (1, t, V)
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t t = logits.shape()[1];
    const std::int64_t next = sample_next(reshape(narrow(logits, 1, t - 1, 1), {1, V}), top_k, temperature, rng);
    g.tokens.push_back(next);
    context.push_back(next);
    if (i + 1 == n) break;
    if (session->length() < T) {
      logits = session->step(index_tensor({next}, {1, 1}));
    } else {
      session = decoding_session(model, use_cache);
      const std::vector<std::int64_t> keep(context.end() - std::ptrdiff_t(T / 2), context.end());
      logits = session->step(index_tensor(keep, {1, keep.size()}));
    }
  }
  g.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return g;
}

// nanoGPT's initialisation: every weight matrix (embeddings, positions, projections) drawn
// from N(0, 0.02^2), the residual projections (attn.out_proj, ff.fc2) from
// N(0, (0.02 / sqrt(2 * layers))^2); LayerNorm weights stay 1.
void init_gpt(TransformerDecoder& model, std::uint64_t seed) {
  Rng rng(seed * 31 + 12345);
  const double residual_std = 0.02 / std::sqrt(2.0 * double(model.body.config.num_layers));
  for (const auto& entry : model.named_parameters()) {
    const std::string& name = entry.first;
    const Tensor& t = entry.second;
    if (t.dim() < 2) continue;
    auto ends_with = [&name](const std::string& tail) {
      return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
    };
    const double sd = ends_with("out_proj.weight") || ends_with("fc2.weight") ? residual_std : 0.02;
    float* p = t.mutable_data<float>();
    for (std::size_t i = 0; i < t.numel(); ++i) p[i] = float(sd * rng.normal());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"char_gpt: a character-level GPT trained on the fortunes text (apt-get install fortunes), then sampling"};
  examples::CommonOptions opt;
  opt.steps = 2000;
  opt.eval_every = 250;
  examples::RunConfig run("char_gpt");
  std::size_t batch_size = 32, max_files = 0;
  double lr = 2e-3, weight_decay = 0.1;
  TransformerConfig cfg;
  cfg.max_len = 128, cfg.embed_dim = 128, cfg.num_heads = 4, cfg.ff_hidden = 512, cfg.num_layers = 4;
  cfg.dropout = 0.0, cfg.tied_output = true, cfg.bias = false;
  std::string prompt = "The ", data_dir = kFortunesDir;
  std::size_t tokens = 300, top_k = 40;
  double temperature = 0.8;
  std::uint64_t sample_seed = 1;
  bool generate_only = false;
  examples::add_common_options(app, opt, run);
  run.add(app, "--batch", batch_size, "windows per step", examples::whole_number(1, 65536));
  run.add(app, "--context", cfg.max_len, "characters of context (block size)", examples::whole_number(2, 4096));
  run.add(app, "--lr", lr, "peak learning rate (AdamW, warmup + cosine)", examples::positive_number());
  run.add(app, "--weight-decay", weight_decay, "AdamW weight decay", examples::non_negative_number());
  run.add(app, "--layers", cfg.num_layers, "Transformer blocks", examples::whole_number(1, 64));
  run.add(app, "--dim", cfg.embed_dim, "embedding size (a multiple of --heads)", examples::whole_number(1, 4096));
  run.add(app, "--heads", cfg.num_heads, "attention heads", examples::whole_number(1, 256));
  run.add(app, "--mlp", cfg.ff_hidden, "hidden width of each block's feed-forward layer", examples::whole_number(1, 65536));
  run.add(app, "--max-files", max_files, "read only the first N fortune files, in name order (0 = all)",
          examples::whole_number(0, 100000));
  app.add_option("--data-dir", data_dir, "directory of the fortune files")->capture_default_str();
  app.add_option("--prompt", prompt,
                 "text the samples continue; every character must occur in the training text (an empty prompt "
                 "starts a new fortune)")
      ->capture_default_str();
  app.add_option("--tokens", tokens, "characters to sample")->capture_default_str()->transform(examples::whole_number(0, 100000));
  app.add_option("--temperature", temperature, "sampling temperature (> 0; use --top-k 1 for greedy decoding)")
      ->capture_default_str()
      ->transform(examples::positive_number());
  app.add_option("--top-k", top_k, "sample among the k most likely characters (0 = all; at most the vocabulary size)")
      ->capture_default_str()
      ->transform(examples::whole_number(0, 1000000));
  app.add_option("--sample-seed", sample_seed, "seed of the sampling")
      ->capture_default_str()
      ->transform(examples::whole_number(0, std::numeric_limits<std::uint64_t>::max()));
  app.add_flag("--generate-only", generate_only,
               "sample from the checkpoint in --out without training (the model's options are the stored run's)");
  CLI11_PARSE(app, argc, argv);

  try {
    if (generate_only && opt.resume) throw ValueError("--generate-only and --resume exclude each other");
    const std::string ckpt = opt.out + "/checkpoint.safetensors";
    std::map<std::string, std::string> stored;
    if (generate_only) {
      std::error_code ec;
      if (!std::filesystem::exists(ckpt, ec))
        throw IOError("--generate-only: no checkpoint in " + opt.out + "; train first (without --generate-only)");
      stored = load_safetensors(ckpt).metadata;
      run.resolve(ckpt, stored);
    } else if (examples::resolve_resume(opt, run)) {
      return 0;
    }
    if (cfg.embed_dim % cfg.num_heads != 0)
      throw ValueError("--dim " + std::to_string(cfg.embed_dim) + " is not a multiple of --heads " +
                       std::to_string(cfg.num_heads));
    examples::setup_runtime(opt);
    cfg.seed = opt.seed;

    // Data (not read with --generate-only: the vocabulary is in the checkpoint).
    CharVocab vocab;
    std::vector<std::int64_t> train_ids, val_ids;
    std::size_t num_docs = 0, train_docs = 0;
    std::vector<std::string> files;
    if (generate_only) {
      auto v = stored.find("vocab");
      if (v == stored.end()) throw IOError("--generate-only: " + ckpt + " has no 'vocab' metadata");
      try {
        vocab = CharVocab::from_code_points(nlohmann::json::parse(v->second).get<std::vector<std::uint32_t>>());
      } catch (const nlohmann::json::exception&) {
        throw IOError("--generate-only: the 'vocab' metadata of " + ckpt + " is not a list of code points");
      }
    } else {
      TextCorpus corpus = load_fortunes(data_dir, max_files);
      files = corpus.files;
      num_docs = corpus.documents.size();
      DocumentSplit split = split_documents(num_docs, 0.9, opt.seed);
      train_docs = split.train.size();
      const std::string train_text = stream_of(corpus, split.train), val_text = stream_of(corpus, split.validation);
      vocab = CharVocab({train_text, val_text});
      train_ids = vocab.encode(train_text, "training text");
      val_ids = vocab.encode(val_text, "validation text");
      if (train_ids.size() < cfg.max_len + 2)
        throw ValueError("the training text has " + std::to_string(train_ids.size()) +
                         " characters, fewer than --context + 2 = " + std::to_string(cfg.max_len + 2));
    }
    cfg.vocab_size = vocab.size();
    // Sampling arguments are checked before any training.
    if (top_k > vocab.size())
      throw ValueError("--top-k " + std::to_string(top_k) + " is larger than the vocabulary (" +
                       std::to_string(vocab.size()) + " characters); use at most " + std::to_string(vocab.size()) +
                       " (or 0 for all)");
    std::vector<std::int64_t> prompt_ids = vocab.encode(prompt.empty() ? kSeparator : prompt, "--prompt");
    if (prompt_ids.size() > cfg.max_len)
      prompt_ids.erase(prompt_ids.begin(), prompt_ids.end() - std::ptrdiff_t(cfg.max_len / 2));

    TransformerDecoder model(cfg);
    init_gpt(model, opt.seed);
    std::filesystem::create_directories(opt.out);
    nlohmann::json metrics;
    examples::TrainResult result;
    double unigram = 0, bigram = 0;
    if (generate_only) {
      load_checkpoint(ckpt, model, nullptr);
    } else {
      // nanoGPT's groups: decay on the matrices, not on LayerNorms or the (tied) embeddings.
      AdamW optimizer(decay_groups(model, weight_decay), AdamWOptions(lr).betas(0.9, 0.99));
      std::tie(unigram, bigram) = ngram_baselines(train_ids, val_ids, vocab.size());
      std::cerr << "char_gpt: " << files.size() << " files, " << num_docs << " fortunes (" << train_docs << " train, "
                << num_docs - train_docs << " validation), " << train_ids.size() << " + " << val_ids.size()
                << " characters, vocabulary " << vocab.size() << ", " << model.parameter_count() << " parameters\n";
      auto loss_at = [&](long step) {
        Rng rng(opt.seed * 1000003 + std::uint64_t(step));  // the windows of step s depend only on (seed, s)
        auto [x, y] = random_windows(train_ids, batch_size, cfg.max_len, rng);
        return cross_entropy(model.forward(x), y);
      };
      auto eval = [&] {
        ValResult v = validate(model, val_ids, cfg.max_len);
        return examples::Evaluation{v.accuracy, {{"val_loss", v.loss}, {"val_bits_per_char", v.loss / std::log(2.0)}}};
      };
      result = examples::train(opt, run, opt.steps, lr, model, optimizer, loss_at, eval,
                               {{"vocab", nlohmann::json(vocab.code_points()).dump()}});
    }

    // Sampling: the same seed without and with the key/value cache.
    const Generation plain = generate_text(model, prompt_ids, tokens, temperature, top_k, sample_seed, false);
    const Generation cached = generate_text(model, prompt_ids, tokens, temperature, top_k, sample_seed, true);
    const bool identical = plain.tokens == cached.tokens;
    const std::string text = prompt + vocab.decode(cached.tokens);
    auto rate = [](const Generation& g) { return g.seconds > 0 ? double(g.tokens.size()) / g.seconds : 0.0; };
    std::ostringstream sample_line;
    sample_line << "sampled " << tokens << " characters (temperature " << temperature << ", top-k " << top_k
                << ", seed " << sample_seed << "): with the key/value cache " << rate(cached)
                << " characters/s, without " << rate(plain) << " characters/s ("
                << (rate(plain) > 0 ? rate(cached) / rate(plain) : 0.0) << "x); cached and uncached texts "
                << (identical ? "identical" : "DIFFER");
    if (!identical) sample_line << " (uncached: " << vocab.decode(plain.tokens) << ")";
    const nlohmann::json sample = {{"prompt", prompt}, {"tokens", tokens}, {"temperature", temperature},
                                   {"top_k", top_k}, {"seed", sample_seed}, {"text", text},
                                   {"cached_equals_uncached", identical}};
    {
      std::ofstream(opt.out + "/samples.txt") << text << "\n";
    }
    // Speeds vary from run to run: generation.json, not metrics.json (whose bits --resume reproduces).
    nlohmann::json speed = sample;
    speed["cached_chars_per_second"] = rate(cached);
    speed["uncached_chars_per_second"] = rate(plain);
    examples::write_json(opt.out + "/generation.json", speed);
    std::cout << "--- sample ---\n" << text << "\n--- end of sample ---\n" << sample_line.str() << "\n";
    if (generate_only) return identical ? 0 : 1;

    const ValResult final_val = validate(model, val_ids, cfg.max_len);
    // Attention of the first block over the first 32 validation characters (fewer with a shorter --context).
    const std::size_t n_shown = std::min<std::size_t>({32, cfg.max_len, val_ids.size()});
    std::vector<std::int64_t> shown(val_ids.begin(), val_ids.begin() + std::ptrdiff_t(n_shown));
    {
      NoGradGuard no_grad;
      model.eval();
      model.forward(index_tensor(shown, {1, shown.size()}), /*need_weights=*/true);
    }
    std::vector<std::string> labels;
    for (auto id : shown) {
      std::string c = vocab.decode(id);
      if (c == "\n") c = "\\\\n";                               // shown as \n
      else if (c == " ") c = "_";
      else if (c == "\"" || c == "\\") c = "\\" + c;           // gnuplot's double-quoted string
      else if (c.size() == 1 && (c[0] < 0x20 || c[0] == 0x7f)) c = "?";  // control characters
      labels.push_back(c);
    }
    examples::Plots plots(!opt.no_plots);
    auto with_samples = [](std::vector<std::string> files) {
      files.push_back("samples.txt");
      files.push_back("generation.json");
      return files;
    };
    std::vector<std::pair<long, double>> val_curve;
    for (const auto& h : result.history) val_curve.emplace_back(h.at("step").get<long>(), h.at("val_loss").get<double>());
    const long last = std::max(result.steps, 1L);
    plots.draw(opt.out + "/loss.png",
               examples::lines_script(opt.out + "/loss.png", "char_gpt: fortunes",
                                      {{"training loss", result.curve, false},
                                       {"validation loss", val_curve, false},
                                       {"bigram baseline (validation)", {{1, bigram}, {last, bigram}}, false},
                                       {"validation next-character accuracy", result.accuracies, true}},
                                      "cross-entropy (nats per character)", "next-character accuracy"));
    plots.draw(opt.out + "/attention.png",
               examples::attention_script(opt.out + "/attention.png", model.body.attention_weights(), labels, labels,
                                          "char_gpt: causal attention over 32 validation characters (_ = space)"));
    metrics = {
        {"example", "char_gpt"},
        {"config", {{"seed", opt.seed}, {"batch", batch_size}, {"lr", lr}, {"weight_decay", weight_decay},
                    {"max_steps", opt.steps}, {"context", cfg.max_len}, {"layers", cfg.num_layers},
                    {"embed_dim", cfg.embed_dim}, {"heads", cfg.num_heads}, {"mlp", cfg.ff_hidden},
                    {"vocab_size", vocab.size()}, {"threads", num_threads()}, {"parameters", model.parameter_count()}}},
        {"data", {{"files", files.size()}, {"documents", num_docs}, {"train_documents", train_docs},
                  {"train_characters", train_ids.size()}, {"validation_characters", val_ids.size()}}},
        {"evaluations", result.history},
        {"final_heldout_exact_match", final_val.accuracy},
        {"final_val_loss", final_val.loss},
        {"final_val_bits_per_char", final_val.loss / std::log(2.0)},
        {"baselines", {{"unigram_val_loss", unigram}, {"bigram_val_loss", bigram},
                       {"unigram_bits_per_char", unigram / std::log(2.0)}, {"bigram_bits_per_char", bigram / std::log(2.0)}}},
        {"sample", sample},
        {"steps", result.steps},
        {"wall_time_seconds_total", result.total_seconds},
        {"wall_time_seconds_this_run", result.seconds}};
    examples::write_metrics(opt.out + "/metrics.json", metrics);
    char line[256];
    std::snprintf(line, sizeof line, "validation loss %.4f nats/char (%.3f bits/char), bigram %.4f, unigram %.4f",
                  final_val.loss, final_val.loss / std::log(2.0), bigram, unigram);
    std::cout << "char_gpt: " << result.steps << " steps, " << line << ", " << examples::seconds_text(result) << "; "
              << examples::outputs_line(opt.out, with_samples(plots.written()), result) << "\n";
    std::cout << "ran on: " << runtime_summary() << "\n";
    return plots.ok() && identical ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "char_gpt: error: " << e.what() << "\n";
    return 2;
  }
}
