// The Vision Transformer of the Fashion-MNIST examples (fashion_vit, gradexp) and
// the image helpers both use: one definition, so the two train the same model.
//
// Image (28, 28) -> P x P patches (patchify), N = (28 / P)^2 of them, each flattened to P*P pixels
// -> Linear(P*P, D) -> [class token] + learned positions (N [+ 1], D) -> pre-LayerNorm
// Transformer blocks -> LayerNorm -> class token (or the mean over patches) -> Linear(D, 10).
// Parameter names: embed.{weight,bias}, pos_embed, cls_token (not with mean pooling),
// blocks.<i>.*, norm.{weight,bias}, head.{weight,bias}; initialised from Rng(seed) in that order.
#pragma once
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <xgrad/xgrad.hpp>

namespace examples {

struct VitConfig {
  std::size_t patch = 4, dim = 64, depth = 4, heads = 4, mlp = 128;
  bool mean_pool = false;
  std::uint64_t seed = 0;
  std::size_t grid() const { return 28 / patch; }
  std::size_t patches() const { return grid() * grid(); }
};

class VisionTransformer : public xgrad::Module {
 public:
  explicit VisionTransformer(const VitConfig& c)
      : cfg(c), rng(c.seed), embed(c.patch * c.patch, c.dim, true, rng), norm(c.dim), head(c.dim, 10, true, rng) {
    using namespace xgrad;
    register_module("embed", &embed);
    const std::size_t tokens = c.patches() + (c.mean_pool ? 0 : 1);
    // N(0, 0.02^2) as ViT's reference implementations (timm: trunc_normal_(std=.02)).
    pos = mul_scalar(randn({1, tokens, c.dim}, rng), 0.02);
    register_parameter("pos_embed", &pos);
    if (!c.mean_pool) {
      cls = mul_scalar(randn({1, 1, c.dim}, rng), 0.02);
      register_parameter("cls_token", &cls);
    }
    for (std::size_t i = 0; i < c.depth; ++i) {
      blocks.push_back(std::make_unique<TransformerBlock>(TransformerBlockOptions(c.dim, c.heads, c.mlp), rng));
      register_module("blocks." + std::to_string(i), blocks.back().get());
    }
    register_module("norm", &norm);
    register_module("head", &head);
  }

  // images (B, 28, 28) -> logits (B, 10). need_weights keeps each block's (B, H, T, T) weights.
  xgrad::Tensor forward(const xgrad::Tensor& images, bool need_weights = false) {
    using namespace xgrad;
    const std::size_t B = images.shape()[0];
    // (B, 1, 28, 28) -> (B, N, P*P): patches in row-major order over the grid, row-major inside.
    Tensor x = embed(patchify(reshape(images, {B, 1, 28, 28}), cfg.patch));  // (B, N, D)
    if (!cfg.mean_pool) x = concat({broadcast_to(cls, {B, 1, cfg.dim}), x}, 1);  // (B, N + 1, D)
    x = add(x, pos);
    AttentionOptions o;
    o.need_weights = need_weights;
    o.average_attn_weights = false;
    for (auto& b : blocks) x = b->forward(x, o);
    x = norm.forward(x);
    Tensor pooled = cfg.mean_pool ? mean(x, {1}) : reshape(narrow(x, 1, 0, 1), {B, cfg.dim});
    return head.forward(pooled);
  }

  // The parameters AdamW should not decay (positions and the class token), as timm's no_weight_decay().
  std::vector<std::string> no_weight_decay() const {
    return cfg.mean_pool ? std::vector<std::string>{"pos_embed"} : std::vector<std::string>{"pos_embed", "cls_token"};
  }

  VitConfig cfg;
  xgrad::Rng rng;
  xgrad::Linear embed;
  xgrad::Tensor pos, cls;
  std::vector<std::unique_ptr<xgrad::TransformerBlock>> blocks;
  xgrad::LayerNorm norm;
  xgrad::Linear head;
};

// Images and labels of some rows of a data set.
struct ImageBatch {
  xgrad::Tensor images;  // (B, 28, 28) float32
  xgrad::Tensor labels;  // (B) int64
};

// Rows `rows` of (N, 28, 28) images and (N) labels, flipped left-right where flip[i].
inline ImageBatch gather_images(const xgrad::Tensor& images, const xgrad::Tensor& labels,
                                const std::vector<std::size_t>& rows, const std::vector<bool>& flip = {}) {
  const std::size_t B = rows.size();
  ImageBatch b;
  b.images = xgrad::zeros({B, 28, 28});
  float* out = b.images.mutable_data<float>();
  const float* in = images.data<float>();
  std::vector<std::int64_t> lab(B);
  for (std::size_t i = 0; i < B; ++i) {
    const float* src = in + rows[i] * 784;
    float* dst = out + i * 784;
    if (!flip.empty() && flip[i])
      for (std::size_t r = 0; r < 28; ++r)
        for (std::size_t c = 0; c < 28; ++c) dst[r * 28 + c] = src[r * 28 + 27 - c];
    else
      std::copy(src, src + 784, dst);
    lab[i] = labels.data<std::int64_t>()[rows[i]];
  }
  b.labels = xgrad::index_tensor(lab, {B});
  return b;
}

// The mean and standard deviation of every pixel of `images` (summed in double, in order).
inline std::pair<double, double> pixel_statistics(const xgrad::Tensor& images) {
  double sum = 0, sq = 0;
  const float* px = images.data<float>();
  for (std::size_t i = 0; i < images.numel(); ++i) sum += px[i], sq += double(px[i]) * px[i];
  const double mean = sum / double(images.numel());
  return {mean, std::sqrt(sq / double(images.numel()) - mean * mean)};
}

// Standardises pixels in place: (p - mean) / stddev.
inline void standardise(xgrad::Tensor& images, double mean, double stddev) {
  float* p = images.mutable_data<float>();
  for (std::size_t i = 0; i < images.numel(); ++i) p[i] = float((p[i] - mean) / stddev);
}

// Standardises data's training and test images in place with the pixel statistics of all
// training images (whatever subset is used later); returns those (mean, stddev).
inline std::pair<double, double> standardise_by_training_pixels(xgrad::FashionMnist& data) {
  const std::pair<double, double> pixels = pixel_statistics(data.train_images);
  standardise(data.train_images, pixels.first, pixels.second);
  standardise(data.test_images, pixels.first, pixels.second);
  return pixels;
}

}  // namespace examples
