// Box sampling and the antialiased resize.
#include "data/image_augment.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace cadre {
namespace {

// The taps of one output sample: source indices [first, first + weights.size()).
struct Taps {
  int first = 0;
  std::vector<float> weights;
};

// ATen's _compute_weights_aa for the bilinear (triangle) filter: the support widens by the
// shrink factor so every source pixel contributes (antialiasing); weights are normalised.
std::vector<Taps> filter_taps(double start, double length, int out_size, int win_start, int win_size, int lo, int hi) {
  const double scale = length / out_size;
  const double support = scale >= 1.0 ? scale : 1.0;
  const double inv = scale >= 1.0 ? 1.0 / scale : 1.0;
  std::vector<Taps> taps(static_cast<size_t>(win_size));
  for (int k = 0; k < win_size; ++k) {
    const double center = start + scale * (win_start + k + 0.5);
    const int xmin = std::max(static_cast<int>(std::floor(center - support + 0.5)), lo);
    const int xmax = std::min(static_cast<int>(std::floor(center + support + 0.5)), hi);
    Taps& t = taps[static_cast<size_t>(k)];
    t.first = xmin;
    double total = 0;
    for (int j = xmin; j < xmax; ++j) {
      const double w = std::max(0.0, 1.0 - std::abs((j - center + 0.5) * inv));
      t.weights.push_back(static_cast<float>(w));
      total += w;
    }
    CADRE_CHECK(total > 0, "resize: an output pixel has no source pixels (region ", start, "+", length, ")");
    for (float& w : t.weights) w = static_cast<float>(w / total);
  }
  return taps;
}

}  // namespace

CropBox random_resized_crop_box(int height, int width, const CropRange& r, SampleRng& rng) {
  const double area = double(height) * width;
  const double log_lo = std::log(r.ratio_lo), log_hi = std::log(r.ratio_hi);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * rng.uniform(r.scale_lo, r.scale_hi);
    const double ratio = std::exp(rng.uniform(log_lo, log_hi));
    // Python's round() rounds halves to even, as nearbyint does in the default rounding mode.
    const int w = static_cast<int>(std::nearbyint(std::sqrt(target * ratio)));
    const int h = static_cast<int>(std::nearbyint(std::sqrt(target / ratio)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int top = static_cast<int>(rng.below(height - h + 1));
      const int left = static_cast<int>(rng.below(width - w + 1));
      return {top, left, h, w};
    }
  }
  const double in_ratio = double(width) / height;
  int w = width, h = height;
  if (in_ratio < r.ratio_lo) {
    h = static_cast<int>(std::nearbyint(w / r.ratio_lo));
  } else if (in_ratio > r.ratio_hi) {
    w = static_cast<int>(std::nearbyint(h * r.ratio_hi));
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

CropBox center_crop_box(int height, int width, int size) {
  CADRE_CHECK(height >= size && width >= size, "centre crop of ", size, " from a ", height, "x", width, " image");
  return {static_cast<int>(std::nearbyint((height - size) / 2.0)), static_cast<int>(std::nearbyint((width - size) / 2.0)),
          size, size};
}

void resize_shorter_side(int height, int width, int size, int& out_height, int& out_width) {
  if (height <= width) {
    out_height = size;
    out_width = static_cast<int>(int64_t{size} * width / height);
  } else {
    out_width = size;
    out_height = static_cast<int>(int64_t{size} * height / width);
  }
}

void resize_region_aa(const uint8_t* src, int src_h, int src_w, const ResizePlan& p, float* out) {
  const int row_lo = std::max(0, static_cast<int>(std::floor(p.top)));
  const int row_hi = std::min(src_h, static_cast<int>(std::ceil(p.top + p.height)));
  const int col_lo = std::max(0, static_cast<int>(std::floor(p.left)));
  const int col_hi = std::min(src_w, static_cast<int>(std::ceil(p.left + p.width)));
  const auto rows = filter_taps(p.top, p.height, p.out_h, p.win_top, p.win_h, row_lo, row_hi);
  const auto cols = filter_taps(p.left, p.width, p.out_w, p.win_left, p.win_w, col_lo, col_hi);
  // Vertical pass first, over the source columns the horizontal taps reach: its inner loop runs
  // along a row of bytes, which the compiler vectorises; then the horizontal pass. (ATen and PIL
  // go horizontal first; the order changes only float rounding, far inside the tests' bound.)
  const int first_col = cols.front().first;
  const int last_col = cols.back().first + static_cast<int>(cols.back().weights.size());
  const size_t span = size_t(last_col - first_col) * 3;
  std::vector<float> mid(span);
  const size_t stride = size_t(src_w) * 3;
  for (int y = 0; y < p.win_h; ++y) {
    const Taps& t = rows[static_cast<size_t>(y)];
    std::fill(mid.begin(), mid.end(), 0.0f);
    float* m = mid.data();
    for (size_t k = 0; k < t.weights.size(); ++k) {
      const float w = t.weights[k];
      const uint8_t* in = src + size_t(t.first + static_cast<int>(k)) * stride + size_t(first_col) * 3;
      for (size_t i = 0; i < span; ++i) m[i] += w * static_cast<float>(in[i]);
    }
    float* o = out + size_t(y) * p.win_w * 3;
    for (int x = 0; x < p.win_w; ++x) {
      const Taps& c = cols[static_cast<size_t>(x)];
      const float* px = m + size_t(c.first - first_col) * 3;
      float r = 0, g = 0, b = 0;
      for (size_t k = 0; k < c.weights.size(); ++k, px += 3) {
        r += c.weights[k] * px[0];
        g += c.weights[k] * px[1];
        b += c.weights[k] * px[2];
      }
      o[x * 3] = r;
      o[x * 3 + 1] = g;
      o[x * 3 + 2] = b;
    }
  }
}

}  // namespace cadre
