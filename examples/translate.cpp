// translate: an encoder-decoder Transformer learns to translate dates written in many human
// formats into ISO 8601, character by character: the classic picture of attention as
// alignment (each output digit attends to the input characters it is copied or derived from).
//
//   "tue 12 march 1985", "12/03/85", "March 12, 1985", "12th of March 1985", ...  ->  "1985-03-12"
//
// Dates 1950-01-01 .. 2049-12-31 in 18 formats (two-digit years: 50-99 -> 19xx, 00-49 -> 20xx;
// numeric dates are always day before month, so every string names one date; a printed
// weekday is that date's weekday, from a proleptic Gregorian day count). A seeded 5% of the
// dates is reserved: the 2,000 held-out inputs (another seed) are reserved dates, which
// training never draws, so no held-out input is ever a training input (the run counts the
// overlap over every training batch it draws, and reports it).
// Model: Seq2SeqTransformer (characters in, characters out), teacher forcing with
// cross-entropy; held-out exact match by greedy decoding with the KV cache.
// Writes metrics.json, loss.png, cross_attention_<i>.png (one panel per decoder layer and
// head: output characters vs input characters) and checkpoint.safetensors to --out.
// --translate "text" (repeatable) decodes with the checkpoint in --out instead of training.
#include "common.hpp"

#include <unordered_set>

using namespace xgrad;

namespace {

// --- calendar ----------------------------------------------------------------------------------

struct Date {
  int year, month, day;
};

// Days since 1970-01-01 of a proleptic Gregorian date, and back (H. Hinnant's algorithms).
long days_from_civil(int y, int m, int d) {
  y -= m <= 2;
  const long era = (y >= 0 ? y : y - 399) / 400;
  const long yoe = y - era * 400;
  const long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

Date civil_from_days(long z) {
  z += 719468;
  const long era = (z >= 0 ? z : z - 146096) / 146097;
  const long doe = z - era * 146097;
  const long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const long mp = (5 * doy + 2) / 153;
  const int d = int(doy - (153 * mp + 2) / 5 + 1), m = int(mp < 10 ? mp + 3 : mp - 9);
  return {int(yoe + era * 400 + (m <= 2)), m, d};
}

int weekday(long z) { return int(z >= -4 ? (z + 4) % 7 : (z + 5) % 7 + 6); }  // 0 = Sunday

const long kFirstDay = days_from_civil(1950, 1, 1), kLastDay = days_from_civil(2049, 12, 31);

const char* const kMonths[] = {"january", "february", "march",     "april",   "may",      "june",
                               "july",    "august",   "september", "october", "november", "december"};
const char* const kWeekdays[] = {"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"};

std::string capital(std::string s) {
  s[0] = char(s[0] - 'a' + 'A');
  return s;
}
std::string upper(std::string s) {
  for (char& c : s) c = c >= 'a' && c <= 'z' ? char(c - 'a' + 'A') : c;
  return s;
}
std::string two(int v) { return (v < 10 ? "0" : "") + std::to_string(v); }
std::string ordinal(int d) {
  const char* suffix = (d % 100 >= 11 && d % 100 <= 13) ? "th" : d % 10 == 1 ? "st" : d % 10 == 2 ? "nd" : d % 10 == 3 ? "rd" : "th";
  return std::to_string(d) + suffix;
}

constexpr std::size_t kFormats = 18;
const char* const kFormatNames[kFormats] = {
    "tue 12 march 1985", "12/03/85",           "March 12, 1985",   "12.03.1985",        "12 Mar 1985",
    "Tuesday, March 12, 1985", "12-MAR-85",    "march 12 1985",    "12th of March 1985", "1985/03/12",
    "Tue, 12 Mar 1985",  "12/3/1985",          "19850312",         "the 12th of march, 1985", "TUESDAY 12 MARCH 1985",
    "12 march 85",       "1985-03-12",         "Mar 12, 85"};

std::string render(std::size_t format, long z) {
  const Date dt = civil_from_days(z);
  const std::string month = kMonths[dt.month - 1], mon = month.substr(0, 3);
  const std::string wd = kWeekdays[weekday(z)], wdy = wd.substr(0, 3);
  const std::string d = std::to_string(dt.day), dd = two(dt.day), mm = two(dt.month);
  const std::string yyyy = std::to_string(dt.year), yy = two(dt.year % 100);
  switch (format) {
    case 0: return wdy + " " + d + " " + month + " " + yyyy;
    case 1: return dd + "/" + mm + "/" + yy;
    case 2: return capital(month) + " " + d + ", " + yyyy;
    case 3: return dd + "." + mm + "." + yyyy;
    case 4: return d + " " + capital(mon) + " " + yyyy;
    case 5: return capital(wd) + ", " + capital(month) + " " + d + ", " + yyyy;
    case 6: return dd + "-" + upper(mon) + "-" + yy;
    case 7: return month + " " + d + " " + yyyy;
    case 8: return ordinal(dt.day) + " of " + capital(month) + " " + yyyy;
    case 9: return yyyy + "/" + mm + "/" + dd;
    case 10: return capital(wdy) + ", " + dd + " " + capital(mon) + " " + yyyy;
    case 11: return d + "/" + std::to_string(dt.month) + "/" + yyyy;
    case 12: return yyyy + mm + dd;
    case 13: return "the " + ordinal(dt.day) + " of " + month + ", " + yyyy;
    case 14: return upper(wd) + " " + d + " " + upper(month) + " " + yyyy;
    case 15: return d + " " + month + " " + yy;
    case 16: return yyyy + "-" + mm + "-" + dd;
    default: return capital(mon) + " " + d + ", " + yy;
  }
}

std::string iso(long z) { return render(16, z); }

// --- vocabularies --------------------------------------------------------------------------------

constexpr std::int64_t kPad = 0, kBos = 1, kEos = 2;
const std::string kSrcChars = " ,-./0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
const std::string kTgtChars = "-0123456789";
constexpr std::size_t kMaxSrc = 32, kOutLen = 10, kMaxTgt = kOutLen + 1;  // BOS + 10 characters

std::int64_t src_id(char c) {
  const auto p = kSrcChars.find(c);
  return p == std::string::npos ? -1 : std::int64_t(p) + 3;
}
std::int64_t tgt_id(char c) { return std::int64_t(kTgtChars.find(c)) + 3; }
std::string tgt_text(const std::vector<std::int64_t>& ids) {
  std::string s;
  for (auto i : ids) s += i >= 3 && i < 3 + std::int64_t(kTgtChars.size()) ? kTgtChars[std::size_t(i - 3)] : '?';
  return s;
}

// The characters of text outside the vocabulary, in order of first appearance: 'x' for
// printable ASCII, 'ä' (U+00E4) for a UTF-8 sequence, U+0009 for a control character, byte
// 0xFF for a byte that starts no valid UTF-8 sequence.
std::vector<std::string> unknown_characters(const std::string& text) {
  std::vector<std::string> out;
  auto add = [&](const std::string& s) {
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  };
  char buf[48];
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool valid = n > 0 && i + n <= text.size();
    std::uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (std::size_t k = 1; valid && k < n; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      valid = (cc >> 6) == 2;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!valid) {
      std::snprintf(buf, sizeof buf, "byte 0x%02X", c);
      add(buf);
      ++i;
      continue;
    }
    if (n == 1 && src_id(char(c)) >= 0) {
      ++i;
      continue;
    }
    if (n == 1 && c >= 32 && c < 127) std::snprintf(buf, sizeof buf, "'%c'", c);
    else if (n == 1) std::snprintf(buf, sizeof buf, "U+%04X", unsigned(cp));
    else std::snprintf(buf, sizeof buf, "'%s' (U+%04X)", text.substr(i, n).c_str(), unsigned(cp));
    add(buf);
    i += n;
  }
  return out;
}

// The problems of a --translate text, or "" when the model can read it.
std::string input_problem(const std::string& text) {
  if (text.empty()) return "the input is empty";
  const std::vector<std::string> bad = unknown_characters(text);
  if (!bad.empty()) {
    std::string list;
    for (const auto& b : bad) list += (list.empty() ? "" : ", ") + b;
    return "characters not in the vocabulary: " + list +
           " (the model reads letters a-z A-Z, digits 0-9, space and , - . /)";
  }
  if (text.size() > kMaxSrc)
    return "the input has " + std::to_string(text.size()) + " characters; the model reads at most " +
           std::to_string(kMaxSrc) + " (its max_src_len)";
  return "";
}

// --- data ------------------------------------------------------------------------------------------

struct Example {
  long day;
  std::size_t format;
  std::string text;
};

struct Batch {
  Tensor src, src_padding, tgt_in, tgt_out;  // (B, S) int64, (B, S) bool, (B, 11) int64 x 2
};

// A seeded 5% of the days: the held-out dates, never drawn for training.
class DateSplit {
 public:
  explicit DateSplit(std::uint64_t seed) {
    for (long z = kFirstDay; z <= kLastDay; ++z) (mix(std::uint64_t(z) ^ (seed * 0x9E3779B97F4A7C15ull)) % 20 == 0 ? held_ : train_).push_back(z);
  }
  long train_day(Rng& rng) const { return train_[std::size_t(rng.uniform_int(0, std::int64_t(train_.size()) - 1))]; }
  long heldout_day(Rng& rng) const { return held_[std::size_t(rng.uniform_int(0, std::int64_t(held_.size()) - 1))]; }
  std::size_t train_days() const { return train_.size(); }
  std::size_t heldout_days() const { return held_.size(); }

 private:
  static std::uint64_t mix(std::uint64_t x) {  // splitmix64's finaliser
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  }
  std::vector<long> train_, held_;
};

std::vector<Example> training_examples(const DateSplit& split, Rng& rng, std::size_t B) {
  std::vector<Example> out;
  for (std::size_t i = 0; i < B; ++i) {
    const long z = split.train_day(rng);
    const auto f = std::size_t(rng.uniform_int(0, kFormats - 1));
    out.push_back({z, f, render(f, z)});
  }
  return out;
}

// n distinct held-out inputs (reserved dates, formats drawn uniformly).
std::vector<Example> heldout_examples(const DateSplit& split, Rng& rng, std::size_t n) {
  std::vector<Example> out;
  std::unordered_set<std::string> seen;
  while (out.size() < n) {
    const long z = split.heldout_day(rng);
    const auto f = std::size_t(rng.uniform_int(0, kFormats - 1));
    std::string t = render(f, z);
    if (seen.insert(t).second) out.push_back({z, f, std::move(t)});
  }
  return out;
}

// Sources padded to the longest in the batch.
std::pair<Tensor, Tensor> encode_sources(const std::vector<std::string>& texts) {
  std::size_t S = 1;
  for (const auto& t : texts) S = std::max(S, t.size());
  std::vector<std::int64_t> ids(texts.size() * S, kPad);
  std::vector<bool> pad(texts.size() * S, true);
  for (std::size_t i = 0; i < texts.size(); ++i)
    for (std::size_t s = 0; s < texts[i].size(); ++s) ids[i * S + s] = src_id(texts[i][s]), pad[i * S + s] = false;
  return {index_tensor(ids, {texts.size(), S}), bool_tensor(pad, {texts.size(), S})};
}

Batch make_batch(const std::vector<Example>& ex) {
  std::vector<std::string> texts;
  std::vector<std::int64_t> in, out;
  for (const auto& e : ex) {
    texts.push_back(e.text);
    const std::string y = iso(e.day);
    in.push_back(kBos);
    for (char c : y) in.push_back(tgt_id(c)), out.push_back(tgt_id(c));
    out.push_back(kEos);
  }
  Batch b;
  std::tie(b.src, b.src_padding) = encode_sources(texts);
  b.tgt_in = index_tensor(in, {ex.size(), kMaxTgt});
  b.tgt_out = index_tensor(out, {ex.size(), kMaxTgt});
  return b;
}

// Greedy (beam 1) or beam-search decoding of texts, in chunks, with or without the cache.
std::vector<std::string> translate_texts(Seq2SeqTransformer& model, const std::vector<std::string>& texts,
                                         std::size_t beam, bool use_cache = true) {
  NoGradGuard no_grad;
  model.eval();
  std::vector<std::string> out;
  constexpr std::size_t kChunk = 1000;
  for (std::size_t at = 0; at < texts.size(); at += kChunk) {
    const std::vector<std::string> part(texts.begin() + long(at), texts.begin() + long(std::min(texts.size(), at + kChunk)));
    const auto [src, pad] = encode_sources(part);
    auto session = decoding_session(model, src, pad, use_cache);
    if (beam == 1) {
      for (const auto& ids : greedy_decode(*session, GreedyOptions{kBos, kEos, 0})) out.push_back(tgt_text(ids));
    } else {
      for (const auto& hyps : beam_search(*session, BeamSearchOptions{beam, 0.6, kBos, kEos, 0}))
        out.push_back(tgt_text(hyps.front().tokens));
    }
  }
  model.train();
  return out;
}

double exact_match(const std::vector<std::string>& got, const std::vector<Example>& ex) {
  std::size_t ok = 0;
  for (std::size_t i = 0; i < ex.size(); ++i) ok += got[i] == iso(ex[i].day);
  return double(ok) / double(ex.size());
}

std::string label(char c) { return c == ' ' ? "_" : std::string(1, c); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"translate: an encoder-decoder Transformer learns to translate human-written dates into ISO 8601"};
  examples::CommonOptions opt;
  opt.steps = 1500;
  opt.eval_every = 250;
  examples::RunConfig run("translate");
  std::size_t batch_size = 64, heldout_size = 2000, layers = 2, dim = 64, heads = 4, ff = 128, beam = 1;
  double lr = 2e-3;
  std::vector<std::string> to_translate;
  examples::add_common_options(app, opt, run);
  run.add(app, "--batch", batch_size, "sentences per step", examples::whole_number(1, 65536));
  run.add(app, "--lr", lr, "peak learning rate (AdamW, warmup + cosine)", examples::positive_number());
  run.add(app, "--layers", layers, "encoder layers and decoder layers (each)", examples::whole_number(1, 16));
  run.add(app, "--dim", dim, "d_model (a multiple of --heads)", examples::whole_number(1, 1024));
  run.add(app, "--heads", heads, "attention heads", examples::whole_number(1, 64));
  run.add(app, "--ff", ff, "feed-forward width (dim_feedforward)", examples::whole_number(1, 8192));
  run.add(app, "--heldout", heldout_size, "held-out inputs (reserved dates, never trained on)",
          examples::whole_number(1, 100000));
  app.add_option("--beam", beam, "beam width for --translate and the final held-out beam evaluation (1 = greedy)")
      ->capture_default_str()
      ->transform(examples::whole_number(1, 64));
  app.add_option("--translate", to_translate,
                 "translate this text with the checkpoint in --out instead of training (repeatable)");
  CLI11_PARSE(app, argc, argv);

  try {
    const std::string ckpt = opt.out + "/checkpoint.safetensors";
    if (!to_translate.empty()) {  // --translate: the stored run's model, no training
      for (const auto& t : to_translate) {
        const std::string problem = input_problem(t);
        if (!problem.empty()) throw ValueError("--translate \"" + t + "\": " + problem);
      }
      std::error_code ec;
      if (!std::filesystem::exists(ckpt, ec))
        throw IOError("--translate: no checkpoint in " + opt.out + "; train first (run without --translate)");
      run.resolve(ckpt, load_safetensors(ckpt).metadata);
    } else if (examples::resolve_resume(opt, run)) {
      return 0;
    }
    if (dim % heads != 0)
      throw ValueError("--dim " + std::to_string(dim) + " is not a multiple of --heads " + std::to_string(heads));
    examples::setup_runtime(opt);
    Rng init(opt.seed);
    Seq2SeqTransformer model(Seq2SeqOptions(3 + kSrcChars.size(), 3 + kTgtChars.size(), dim, heads)
                                 .num_encoder_layers(layers)
                                 .num_decoder_layers(layers)
                                 .dim_feedforward(ff)
                                 .dropout(0.0)
                                 .norm_first(true)
                                 .max_src_len(kMaxSrc)
                                 .max_tgt_len(kMaxTgt),
                             init);
    if (!to_translate.empty()) {
      load_checkpoint(ckpt, model, nullptr);
      const auto out = translate_texts(model, to_translate, beam);
      for (std::size_t i = 0; i < out.size(); ++i) std::cout << to_translate[i] << " -> " << out[i] << "\n";
      return 0;
    }

    std::filesystem::create_directories(opt.out);
    AdamW optimizer(model.named_parameters(), AdamWOptions(lr).betas(0.9, 0.98).eps(1e-9).weight_decay(0.01));
    const DateSplit split(opt.seed);
    Rng heldout_rng(opt.seed + 1000003);
    const std::vector<Example> heldout = heldout_examples(split, heldout_rng, heldout_size);
    std::vector<std::string> heldout_texts;
    for (const auto& e : heldout) heldout_texts.push_back(e.text);
    auto data_at = [&](long step) {
      Rng rng(opt.seed * 1000003 + std::uint64_t(step));  // the data of a step depends only on (seed, step)
      return training_examples(split, rng, batch_size);
    };
    auto loss_at = [&](long step) {
      const Batch b = make_batch(data_at(step));
      return cross_entropy(model.forward(b.src, b.tgt_in, b.src_padding), b.tgt_out);
    };
    auto evaluate = [&] { return exact_match(translate_texts(model, heldout_texts, 1), heldout); };
    const auto result = examples::train(opt, run, opt.steps, lr, model, optimizer, loss_at, evaluate);

    // No held-out input is a training input of this run (reserved dates; counted to show it).
    const std::unordered_set<std::string> heldout_set(heldout_texts.begin(), heldout_texts.end());
    std::size_t overlap = 0;
    for (long s = 0; s < result.steps; ++s)
      for (const auto& e : data_at(s)) overlap += heldout_set.count(e.text);

    // Final figures: greedy with and without the cache (same tokens; time), beam search.
    const std::size_t final_beam = beam == 1 ? 4 : beam;  // the held-out beam width (4 when --beam is 1)
    auto timed = [&](std::size_t width, bool cached, std::size_t n) {
      const auto t0 = std::chrono::steady_clock::now();
      auto out = translate_texts(model, std::vector<std::string>(heldout_texts.begin(), heldout_texts.begin() + long(n)),
                                 width, cached);
      return std::make_pair(out, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    };
    const std::size_t n_uncached = std::min<std::size_t>(heldout_size, 500);
    const auto [greedy, greedy_s] = timed(1, true, heldout_size);
    const auto [uncached, uncached_s] = timed(1, false, n_uncached);
    const bool same_tokens = std::equal(uncached.begin(), uncached.end(), greedy.begin());
    const auto [beamed, beam_s] = timed(final_beam, true, heldout_size);
    const double greedy_acc = exact_match(greedy, heldout), beam_acc = exact_match(beamed, heldout);
    std::vector<std::size_t> per_format_n(kFormats), per_format_ok(kFormats);
    nlohmann::json errors = nlohmann::json::array();
    for (std::size_t i = 0; i < heldout.size(); ++i) {
      ++per_format_n[heldout[i].format];
      const bool ok = greedy[i] == iso(heldout[i].day);
      per_format_ok[heldout[i].format] += ok;
      if (!ok && errors.size() < 20) errors.push_back({{"input", heldout[i].text}, {"expected", iso(heldout[i].day)}, {"got", greedy[i]}});
    }
    nlohmann::json per_format = nlohmann::json::object();
    for (std::size_t f = 0; f < kFormats; ++f)
      per_format[kFormatNames[f]] = per_format_n[f] ? double(per_format_ok[f]) / double(per_format_n[f]) : 0.0;

    // Pictures: the loss / accuracy curves, and the cross-attention of three held-out inputs
    // (teacher-forced on the model's own greedy output; rows: output characters + end).
    examples::Plots plots(!opt.no_plots);
    plots.draw(opt.out + "/loss.png", examples::curves_script(opt.out + "/loss.png", result.curve, result.accuracies));
    for (std::size_t k = 0; k < 3 && k < heldout.size(); ++k) {
      const std::size_t i = k * heldout.size() / 3;
      const std::string& text = heldout[i].text;
      std::vector<std::int64_t> in{kBos};
      for (char c : greedy[i].substr(0, kOutLen)) in.push_back(tgt_id(c));
      std::vector<std::string> rows, cols;
      for (char c : greedy[i].substr(0, kOutLen)) rows.push_back(label(c));
      rows.resize(in.size(), "end");
      for (char c : text) cols.push_back(label(c));
      {
        NoGradGuard no_grad;
        model.eval();
        const auto [src, pad] = encode_sources({text});
        model.decode(index_tensor(in, {1, in.size()}), model.encode(src, pad), pad, Tensor(), /*need_weights=*/true);
        model.train();
      }
      const std::string png = opt.out + "/cross_attention_" + std::to_string(k) + ".png";
      plots.draw(png, examples::attention_script(png, model.cross_attention_weights(), rows, cols,
                                                 "translate: cross-attention, \"" + text + "\" -> \"" + greedy[i] +
                                                     "\" (rows: output, columns: input; _ = space)"));
    }

    examples::write_metrics(
        opt.out + "/metrics.json",
        {{"example", "translate"},
         {"config", {{"seed", opt.seed}, {"batch", batch_size}, {"lr", lr}, {"max_steps", opt.steps},
                     {"layers", layers}, {"d_model", dim}, {"heads", heads}, {"dim_feedforward", ff},
                     {"norm_first", true}, {"threads", num_threads()}, {"parameters", model.parameter_count()}}},
         {"data", {{"formats", kFormats}, {"train_days", split.train_days()}, {"heldout_days", split.heldout_days()},
                   {"heldout_size", heldout_size}, {"training_inputs_seen", result.steps * long(batch_size)},
                   {"heldout_inputs_seen_in_training", overlap}}},
         {"evaluations", result.history},
         {"final_heldout_exact_match", result.accuracy},
         {"heldout_exact_match_greedy", greedy_acc},
         {"heldout_exact_match_beam", beam_acc},
         {"beam_width", final_beam},
         {"heldout_exact_match_per_format", per_format},
         {"heldout_errors", errors},
         {"decode", {{"greedy_cached_seconds", greedy_s}, {"greedy_cached_inputs", heldout_size},
                     {"greedy_uncached_seconds", uncached_s}, {"greedy_uncached_inputs", n_uncached},
                     {"cached_and_uncached_tokens_identical", same_tokens}, {"beam_seconds", beam_s}}},
         {"steps", result.steps},
         {"wall_time_seconds_total", result.total_seconds},
         {"wall_time_seconds_this_run", result.seconds}});
    std::cout << "translate: " << result.steps << " steps, held-out exact match " << 100 * result.accuracy << "%"
              << examples::evaluated_at(result) << " on " << heldout_size << " inputs (greedy; beam "
              << final_beam << ": " << 100 * beam_acc << "%), " << overlap
              << " of them seen in training; " << examples::seconds_text(result) << "; "
              << examples::outputs_line(opt.out, plots.written(), result) << "\n";
    std::cout << "decoding " << heldout_size << " inputs greedily: " << greedy_s << " s with the KV cache; "
              << n_uncached << " without it: " << uncached_s << " s (same tokens: " << (same_tokens ? "yes" : "NO")
              << ")\n";
    std::cout << "ran on: " << runtime_summary() << "\n";
    return plots.ok() && same_tokens ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "translate: error: " << e.what() << "\n";
    return 2;
  }
}
