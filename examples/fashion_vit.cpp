// fashion_vit: a Vision Transformer classifies Fashion-MNIST (Debian's dataset-fashion-mnist).
//
// The model (examples/vit_model.hpp, shared with gradexp): image (28, 28) -> P x P patches ->
// Linear(P*P, D) -> [class token] + learned positions -> pre-LayerNorm Transformer blocks ->
// LayerNorm -> class token (or the mean over patches) -> Linear(D, 10).
// Trained on the 60,000 training images (a seeded permutation per epoch, drop_last batches,
// optional horizontal flips), evaluated on the 10,000 test images. Writes metrics.json,
// loss.png (loss and accuracy curves), confusion.png (test confusion matrix with class names),
// attention.png (the class token's attention over the image patches for a few test images,
// per layer) and checkpoint.safetensors to --out; --resume continues a run bit for bit.
#include <sstream>

#include "common.hpp"
#include "vit_options.hpp"

using namespace xgrad;

namespace {

using examples::gather_images;
using examples::ImageBatch;
using examples::VisionTransformer;
using examples::VitConfig;

struct TestResult {
  double accuracy = 0, loss = 0;
  std::vector<std::vector<long>> confusion;  // [true][predicted]
};

TestResult evaluate(VisionTransformer& model, const Tensor& images, const Tensor& labels, std::size_t n) {
  NoGradGuard no_grad;
  model.eval();
  TestResult r;
  r.confusion.assign(10, std::vector<long>(10, 0));
  long correct = 0;
  double loss_sum = 0;
  const std::size_t chunk = 500;
  for (std::size_t b = 0; b < n; b += chunk) {
    std::vector<std::size_t> rows;
    for (std::size_t i = b; i < std::min(n, b + chunk); ++i) rows.push_back(i);
    ImageBatch batch = gather_images(images, labels, rows);
    Tensor logits = model.forward(batch.images);
    loss_sum += cross_entropy(logits, batch.labels).item() * double(rows.size());
    const Tensor predicted = argmax(logits, 1);  // (chunk) int64
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const long pred = long(predicted.data<std::int64_t>()[i]);
      const long truth = long(batch.labels.data<std::int64_t>()[i]);
      ++r.confusion[std::size_t(truth)][std::size_t(pred)];
      correct += pred == truth;
    }
  }
  model.train();
  r.accuracy = double(correct) / double(n);
  r.loss = loss_sum / double(n);
  return r;
}

std::string quoted_tics(const std::vector<std::string>& labels) {
  std::string t = "(";
  for (std::size_t i = 0; i < labels.size(); ++i) t += (i ? ", " : "") + examples::gp_quote(labels[i]) + " " + std::to_string(i);
  return t + ")";
}

std::string confusion_script(const std::string& png, const TestResult& r, const std::vector<std::string>& names) {
  std::string s = "set terminal pngcairo size 900,800\nset output " + examples::gp_quote(png) +
                  "\nset termoption noenhanced\nset title " +
                  examples::gp_quote("Fashion-MNIST test confusion matrix (accuracy " +
                                     std::to_string(r.accuracy * 100).substr(0, 5) + "%)") +
                  "\nset xlabel 'predicted'\nset ylabel 'true class'\nset xtics " + quoted_tics(names) +
                  " rotate by 45 right\nset ytics " + quoted_tics(names) +
                  "\nset yrange [9.5:-0.5]\nset xrange [-0.5:9.5]\nset palette defined (0 'white', 1 '#3060c0')\n"
                  "set logscale cb\nset cbrange [1:1000]\nset cblabel 'images'\n"
                  "plot '-' matrix with image notitle, '-' matrix using 1:2:(sprintf('%d', $3)) with labels notitle\n";
  for (int rep = 0; rep < 2; ++rep) {
    for (const auto& row : r.confusion) {
      for (long v : row) s += std::to_string(rep == 0 ? std::max(v, 1L) : v) + " ";
      s += "\n";
    }
    s += "e\n";
  }
  return s;
}

// Row i: test image i, then per layer the attention that the class token (mean pooling: every
// patch, averaged) pays to each patch, averaged over heads, on the patch grid.
std::string attention_map_script(const std::string& png, const ImageBatch& shown, const std::vector<Tensor>& weights,
                                 const VitConfig& c, const std::vector<long>& predicted,
                                 const std::vector<std::string>& names, double mean, double stddev) {
  const std::size_t n = shown.labels.numel(), L = weights.size(), H = c.heads, g = c.grid();
  const std::size_t T = weights[0].shape()[2], first = c.mean_pool ? 0 : 1;
  std::string s = "set terminal pngcairo size " + std::to_string(200 * (L + 1)) + "," + std::to_string(210 * n + 40) +
                  "\nset output " + examples::gp_quote(png) + "\nset termoption noenhanced\nset multiplot layout " +
                  std::to_string(n) + "," + std::to_string(L + 1) + " title " +
                  examples::gp_quote(std::string("fashion_vit: ") + (c.mean_pool ? "mean attention paid to" : "class token's attention over") +
                                     " the " + std::to_string(g) + "x" + std::to_string(g) + " patches, per layer (mean over heads)") +
                  "\nunset colorbox\nunset xtics\nunset ytics\nset size ratio -1\nset yrange [] reverse\n";
  for (std::size_t i = 0; i < n; ++i) {
    const long truth = long(shown.labels.data<std::int64_t>()[i]);
    s += "set title " + examples::gp_quote(names[std::size_t(truth)] + " (pred. " + names[std::size_t(predicted[i])] + ")") +
         " font ',9'\nset palette gray\nset autoscale cb\nplot '-' matrix with image notitle\n";
    const float* img = shown.images.data<float>() + i * 784;
    for (std::size_t r = 0; r < 28; ++r) {
      for (std::size_t col = 0; col < 28; ++col) s += std::to_string(img[r * 28 + col] * stddev + mean) + " ";
      s += "\n";
    }
    s += "e\n";
    for (std::size_t l = 0; l < L; ++l) {
      const auto w = weights[l].to_vector();  // (n, H, T, T)
      std::vector<double> patch(g * g, 0.0);
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t q = 0; q < (c.mean_pool ? T : 1); ++q)
          for (std::size_t k = 0; k < g * g; ++k) patch[k] += w[((i * H + h) * T + q) * T + first + k];
      s += "set title 'layer " + std::to_string(l + 1) + "' font ',9'\nset palette defined (0 'white', 1 '#c03020')\n"
           "set autoscale cb\nplot '-' matrix with image notitle\n";
      for (std::size_t r = 0; r < g; ++r) {
        for (std::size_t col = 0; col < g; ++col) s += std::to_string(patch[r * g + col]) + " ";
        s += "\n";
      }
      s += "e\n";
    }
  }
  return s + "unset multiplot\n";
}

// The README table rows just below and above `accuracy`, and how many lie below.
std::string baselines_text(const std::vector<PublishedBaseline>& rows, double accuracy) {
  const PublishedBaseline *below = nullptr, *above = nullptr;
  std::size_t beaten = 0;
  for (const auto& r : rows) {
    if (r.accuracy < accuracy) {
      ++beaten;
      if (!below || r.accuracy > below->accuracy) below = &r;
    } else if (!above || r.accuracy < above->accuracy) {
      above = &r;
    }
  }
  std::ostringstream o;
  o << "above " << beaten << " of the " << rows.size() << " results published in " << kFashionMnistDocDir << "/README.md.gz";
  if (below) o << "; next below: " << below->classifier << " " << below->accuracy;
  if (above) o << "; next above: " << above->classifier << " " << above->accuracy;
  return o.str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fashion_vit: a Vision Transformer trained on Fashion-MNIST (apt-get install dataset-fashion-mnist)"};
  examples::CommonOptions opt;
  opt.steps = 4680;  // 10 epochs of 468 batches of 128
  opt.eval_every = 468;
  examples::RunConfig run("fashion_vit");
  std::size_t batch_size = 128, train_subset = 60000, test_subset = 10000, attention_images = 4;
  double lr = 2e-3, weight_decay = 0.05, label_smoothing = 0.1;
  bool flip = false;
  std::string pool = "cls", data_dir = kFashionMnistDir;
  VitConfig cfg;
  examples::add_common_options(app, opt, run);
  run.add(app, "--batch", batch_size, "images per step", examples::whole_number(1, 60000));
  run.add(app, "--lr", lr, "peak learning rate (AdamW, warmup + cosine)", examples::positive_number());
  run.add(app, "--weight-decay", weight_decay, "AdamW weight decay", examples::non_negative_number());
  run.add(app, "--label-smoothing", label_smoothing, "label smoothing of the training loss (0 to < 1)",
          examples::fraction_below_one());
  examples::add_vit_options(app, run, cfg, pool);
  run.add_flag(app, "--flip", flip, "augment: flip each training image left-right with probability 1/2");
  run.add(app, "--train-subset", train_subset, "train on the first N training images", examples::whole_number(1, 60000));
  run.add(app, "--test-subset", test_subset, "evaluate on the first N test images", examples::whole_number(1, 10000));
  app.add_option("--data-dir", data_dir, "directory of the four IDX .gz files")->capture_default_str();
  app.add_option("--attention-images", attention_images, "test images in attention.png")
      ->capture_default_str()
      ->transform(examples::whole_number(1, 16));
  CLI11_PARSE(app, argc, argv);

  try {
    if (examples::resolve_resume(opt, run)) return 0;
    examples::finish_vit_options(cfg, pool);
    cfg.seed = opt.seed;
    examples::setup_runtime(opt);
    FashionMnist data = load_fashion_mnist(data_dir);
    const std::size_t n_train = std::min(train_subset, data.train_images.shape()[0]);
    const std::size_t n_test = std::min(test_subset, data.test_images.shape()[0]);
    if (batch_size > n_train)
      throw ValueError("--batch " + std::to_string(batch_size) + " is larger than the " + std::to_string(n_train) +
                       " training images");
    // Pixel statistics of all training images (the same whatever the subset).
    const std::pair<double, double> pixels = examples::standardise_by_training_pixels(data);
    const double pixel_mean = pixels.first, pixel_std = pixels.second;
    std::filesystem::create_directories(opt.out);

    VisionTransformer model(cfg);
    // Weight decay on the matrices only: not on biases, LayerNorms, positions or the class token.
    AdamW optimizer(decay_groups(model, weight_decay, model.no_weight_decay()), AdamWOptions(lr).betas(0.9, 0.999));
    const long steps_per_epoch = long(n_train / batch_size);  // drop_last
    std::cerr << "fashion_vit: " << model.parameter_count() << " parameters, " << n_train << " training images, "
              << steps_per_epoch << " steps per epoch, " << double(opt.steps) / double(steps_per_epoch) << " epochs\n";

    // The data of step s depends only on (seed, s): epoch s / steps_per_epoch is a seeded
    // permutation, batch s % steps_per_epoch a slice of it.
    long cached_epoch = -1;
    std::vector<std::size_t> order;
    auto loss_at = [&](long step) {
      const long epoch = step / steps_per_epoch, k = step % steps_per_epoch;
      if (epoch != cached_epoch) {
        order.resize(n_train);
        for (std::size_t i = 0; i < n_train; ++i) order[i] = i;
        Rng perm(opt.seed * 1000003 + std::uint64_t(epoch) + 1);
        for (std::size_t i = n_train - 1; i > 0; --i) std::swap(order[i], order[std::size_t(perm.uniform_int(0, std::int64_t(i)))]);
        cached_epoch = epoch;
      }
      std::vector<std::size_t> rows(order.begin() + k * long(batch_size), order.begin() + (k + 1) * long(batch_size));
      std::vector<bool> flips(batch_size, false);
      if (flip) {
        Rng coin(opt.seed * 7919 + std::uint64_t(step) + 0x9e3779b9ull);
        for (std::size_t i = 0; i < batch_size; ++i) flips[i] = coin() & 1;
      }
      ImageBatch b = gather_images(data.train_images, data.train_labels, rows, flips);
      return cross_entropy(model.forward(b.images), b.labels, -100, label_smoothing);
    };
    auto eval = [&] {
      TestResult t = evaluate(model, data.test_images, data.test_labels, n_test);
      return examples::Evaluation{t.accuracy, {{"test_loss", t.loss}}};
    };
    auto result = examples::train(opt, run, opt.steps, lr, model, optimizer, loss_at, eval);
    const TestResult final_test = evaluate(model, data.test_images, data.test_labels, n_test);

    // Pictures.
    examples::Plots plots(!opt.no_plots);
    std::vector<std::pair<long, double>> test_loss;
    for (const auto& h : result.history) test_loss.emplace_back(h.at("step").get<long>(), h.at("test_loss").get<double>());
    plots.draw(opt.out + "/loss.png",
               examples::lines_script(opt.out + "/loss.png", "fashion_vit: Fashion-MNIST",
                                      {{"training loss (label smoothing " + std::to_string(label_smoothing).substr(0, 4) + ")", result.curve, false},
                                       {"test loss", test_loss, false},
                                       {"test accuracy", result.accuracies, true}},
                                      "cross-entropy (nats)", "test accuracy", true, "[0.5:1]"));
    plots.draw(opt.out + "/confusion.png", confusion_script(opt.out + "/confusion.png", final_test, data.class_names));
    std::vector<std::size_t> shown_rows;  // the first test image of each of the first classes
    for (std::size_t want = 0; want < attention_images; ++want)
      for (std::size_t i = 0; i < n_test; ++i)
        if (data.test_labels.data<std::int64_t>()[i] == std::int64_t(want % 10) &&
            std::find(shown_rows.begin(), shown_rows.end(), i) == shown_rows.end()) {
          shown_rows.push_back(i);
          break;
        }
    if (!shown_rows.empty()) {
      ImageBatch shown = gather_images(data.test_images, data.test_labels, shown_rows);
      std::vector<long> predicted;
      std::vector<Tensor> weights;
      {
        NoGradGuard no_grad;
        model.eval();
        Tensor logits = model.forward(shown.images, /*need_weights=*/true);
        for (auto& b : model.blocks) weights.push_back(b->last_weights);
        const Tensor best = argmax(logits, 1);
        for (std::size_t i = 0; i < shown_rows.size(); ++i) predicted.push_back(long(best.data<std::int64_t>()[i]));
      }
      plots.draw(opt.out + "/attention.png",
                 attention_map_script(opt.out + "/attention.png", shown, weights, cfg, predicted, data.class_names,
                                      pixel_mean, pixel_std));
    }

    nlohmann::json per_class = nlohmann::json::object();
    for (std::size_t c = 0; c < 10; ++c) {
      long row = 0;
      for (long v : final_test.confusion[c]) row += v;
      per_class[data.class_names[c]] = row ? double(final_test.confusion[c][c]) / double(row) : 0.0;
    }
    std::vector<PublishedBaseline> baselines;
    std::string baseline_line;
    try {
      baselines = fashion_mnist_baselines();
      baseline_line = baselines_text(baselines, final_test.accuracy);
    } catch (const IOError& e) {
      baseline_line = std::string("no published baselines: ") + e.what();
    }
    nlohmann::json published = nlohmann::json::array();
    for (const auto& b : baselines)
      published.push_back({{"classifier", b.classifier}, {"preprocessing", b.preprocessing}, {"accuracy", b.accuracy}});
    nlohmann::json metrics = {
        {"example", "fashion_vit"},
        {"config", {{"seed", opt.seed}, {"batch", batch_size}, {"lr", lr}, {"weight_decay", weight_decay},
                    {"label_smoothing", label_smoothing}, {"max_steps", opt.steps}, {"patch", cfg.patch},
                    {"dim", cfg.dim}, {"depth", cfg.depth}, {"heads", cfg.heads}, {"mlp", cfg.mlp}, {"pool", pool},
                    {"flip", flip}, {"train_images", n_train}, {"test_images", n_test},
                    {"steps_per_epoch", steps_per_epoch}, {"threads", num_threads()},
                    {"parameters", model.parameter_count()}}},
        {"evaluations", result.history},
        {"final_heldout_exact_match", final_test.accuracy},
        {"final_test_accuracy", final_test.accuracy},
        {"final_test_loss", final_test.loss},
        {"per_class_accuracy", per_class},
        {"confusion_matrix", final_test.confusion},
        {"class_names", data.class_names},
        {"published_baselines", published},
        {"epochs", double(result.steps) / double(steps_per_epoch)},
        {"steps", result.steps},
        {"wall_time_seconds_total", result.total_seconds},
        {"wall_time_seconds_this_run", result.seconds}};
    examples::write_metrics(opt.out + "/metrics.json", metrics);
    char acc[64];
    std::snprintf(acc, sizeof acc, "%.2f%%", 100 * final_test.accuracy);
    std::cout << "fashion_vit: " << result.steps << " steps (" << double(result.steps) / double(steps_per_epoch)
              << " epochs), test accuracy " << acc << " on " << n_test << " images, test loss " << final_test.loss
              << ", " << examples::seconds_text(result) << "; " << examples::outputs_line(opt.out, plots.written(), result)
              << "\n";
    std::cout << "published: " << baseline_line << "\n";
    std::cout << "ran on: " << runtime_summary() << "\n";
    return plots.ok() ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "fashion_vit: error: " << e.what() << "\n";
    return 2;
  }
}
