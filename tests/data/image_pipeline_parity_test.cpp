// The image pipeline against independent references (tests/python/image_pipeline_ref.py, on
// PyPI's Pillow and torchvision in the project venv), on images that script generates now:
// - decoding: every pixel within ±1 per channel of Pillow's, at full size and, for JPEGs, at
//   1/2, 1/4 and 1/8 in the DCT domain against Pillow's draft() (the path the loader takes);
//   ±1 because IDCT implementations and versions may round differently (Pillow's wheel bundles
//   its own libjpeg-turbo; Debian's is another release);
// - resize / centre crop / resized crop / normalise against transforms.v2 (antialiased
//   bilinear) on the same decoded pixels, within kResizeBound, and end to end from the file
//   (decode + transform) within ±1 pixel level more, since the resize's weights are
//   non-negative and sum to 1 and so pass the decoder's ±1 through unamplified;
// - RandomResizedCrop's boxes: 10,000 draws against torchvision's get_params by a two-sample
//   Kolmogorov-Smirnov test on area share and aspect ratio, with a mis-sampled variant as a
//   control that the test rejects.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "ckpt/tensor_file.h"
#include "core/file_util.h"
#include "data/image_augment.h"
#include "data/image_codec.h"
#include "data/image_transform.h"
#include "support/process.h"

namespace {

// Both sides apply the same triangle-filter weights in float32 to the same pixels; they differ
// in summation order (Cadre's loops are vectorised at build time, ATen's kernels at run time by
// CPU) and in torchvision working on [0, 1] instead of 0..255. Each float32 multiply-add
// rounds by at most 2^-24 of values up to 255; the test's largest shrink (375 -> 64, 5.9x) has
// 13 taps per direction, so each side accumulates at most 26 * 255 * 2^-24 = 4e-4 pixel levels,
// and the weights' own rounding (normalised to sum 1) adds as much again: 2 x 2 x 4e-4 < 2e-3.
// A real difference (a half-pixel shift, a wrong support or rounding of the crop) moves values
// by whole pixel levels. Measured: at most 5e-4.
constexpr double kResizeBound = 2e-3;

struct Refs {
  cadre::test::TempDir dir{"image-pipeline"};
  cadre::TensorDict t;
  std::vector<std::string> files;
  cadre::ImageTransform tf;
  Refs() {
    auto py = cadre::test::run_process({CADRE_VENV_PYTHON, CADRE_SOURCE_DIR "/tests/python/image_pipeline_ref.py", dir.path()});
    EXPECT_EQ(py.exit_code, 0) << py.output;
    t = cadre::tensor_file_load(dir / "refs.pt");
    std::istringstream list(cadre::file_read(dir / "files.txt"));
    for (std::string line; std::getline(list, line);)
      if (!line.empty()) files.push_back(line);
    at::Tensor c = t.at("config");
    tf.train = false;
    tf.resize = static_cast<int>(c[0].item<double>());
    tf.size = static_cast<int>(c[1].item<double>());
    for (int k = 0; k < 3; ++k) {
      tf.mean[k] = static_cast<float>(c[2 + k].item<double>());
      tf.std[k] = static_cast<float>(c[5 + k].item<double>());
    }
  }
  std::string bytes(size_t i) const { return cadre::file_read(dir / files[i]); }
};

Refs& refs() {
  static Refs r;
  return r;
}

cadre::RgbImage as_image(const at::Tensor& hwc) {
  cadre::RgbImage im;
  im.height = static_cast<int>(hwc.size(0));
  im.width = static_cast<int>(hwc.size(1));
  at::Tensor c = hwc.contiguous();
  im.pixels.assign(c.data_ptr<uint8_t>(), c.data_ptr<uint8_t>() + c.numel());
  return im;
}

at::Tensor run_finish(const cadre::RgbImage& im, const cadre::ResizePlan& plan, const cadre::ImageTransform& tf) {
  at::Tensor out = at::empty({3, tf.size, tf.size}, tf.uint8_out ? at::kByte : at::kFloat);
  cadre::finish_sample(im, plan, false, tf, out.data_ptr());
  return out;
}

// The largest difference in pixel levels (0..255): normalised units times 255 * std.
double pixel_levels(const at::Tensor& got, const at::Tensor& want, const cadre::ImageTransform& tf) {
  at::Tensor std = at::tensor(at::ArrayRef<float>(tf.std, 3)).view({3, 1, 1});
  return ((got.to(at::kDouble) - want.to(at::kDouble)) * std.to(at::kDouble) * 255.0).abs().max().item<double>();
}

TEST(ImagePipelineParity, DecodedPixelsMatchPillowWithinOneIncludingDctScaledDecodes) {
  Refs& r = refs();
  int compared = 0;
  for (size_t i = 0; i < r.files.size(); ++i)
    for (int d : {1, 2, 4, 8}) {
      const std::string key = "decoded." + std::to_string(i) + "." + std::to_string(d);
      if (!r.t.count(key)) continue;
      const std::string bytes = r.bytes(i);
      cadre::RgbImage im = cadre::image_decode(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), d, r.files[i]);
      const at::Tensor& want = r.t.at(key);
      ASSERT_EQ(im.height, want.size(0)) << key;
      ASSERT_EQ(im.width, want.size(1)) << key;
      at::Tensor got = at::from_blob(im.pixels.data(), {im.height, im.width, 3}, at::kByte);
      at::Tensor diff = (got.to(at::kInt) - want.to(at::kInt)).abs();
      const int worst = diff.max().item<int>();
      std::printf("[decode] %s 1/%d: %dx%d, max |diff| %d, %.3f%% of values differ\n", r.files[i].c_str(), d, im.width,
                  im.height, worst, 100.0 * diff.gt(0).sum().item<double>() / double(diff.numel()));
      EXPECT_LE(worst, 1) << key;
      ++compared;
    }
  EXPECT_EQ(compared, 4 * 4 + 2);  // four JPEGs at four scales, two PNGs
}

TEST(ImagePipelineParity, EvalResizeCentreCropNormaliseMatchTorchvisionV2) {
  Refs& r = refs();
  int compared = 0;
  for (size_t i = 0; i < r.files.size(); ++i)
    for (int d : {1, 2, 4, 8}) {
      const std::string key = std::to_string(i) + "." + std::to_string(d);
      if (!r.t.count("decoded." + key)) continue;
      cadre::RgbImage im = as_image(r.t.at("decoded." + key));
      at::Tensor got = run_finish(im, cadre::eval_plan(im.height, im.width, r.tf), r.tf);
      const double worst = pixel_levels(got, r.t.at("eval." + key), r.tf);
      std::printf("[eval] %s 1/%d: max |diff| %.2e pixel levels\n", r.files[i].c_str(), d, worst);
      EXPECT_LE(worst, kResizeBound) << key;
      // The uint8 option: the same values rounded, so within half a level (and the bound).
      cadre::ImageTransform bytes_tf = r.tf;
      bytes_tf.uint8_out = true;
      at::Tensor u8 = run_finish(im, cadre::eval_plan(im.height, im.width, bytes_tf), bytes_tf);
      at::Tensor mean = at::tensor(at::ArrayRef<float>(r.tf.mean, 3)).view({3, 1, 1}).to(at::kDouble);
      at::Tensor std = at::tensor(at::ArrayRef<float>(r.tf.std, 3)).view({3, 1, 1}).to(at::kDouble);
      at::Tensor want_levels = (r.t.at("eval." + key).to(at::kDouble) * std + mean) * 255.0;
      EXPECT_LE((u8.to(at::kDouble) - want_levels).abs().max().item<double>(), 0.5 + kResizeBound) << key;
      ++compared;
    }
  EXPECT_EQ(compared, 18);
}

TEST(ImagePipelineParity, ResizedCropOfABoxMatchesTorchvisionV2) {
  Refs& r = refs();
  for (size_t i = 0; i < r.files.size(); ++i) {
    const std::string key = std::to_string(i);
    cadre::RgbImage im = as_image(r.t.at("decoded." + key + ".1"));
    at::Tensor box = r.t.at("box." + key);
    const int top = static_cast<int>(box[0].item<int64_t>()), left = static_cast<int>(box[1].item<int64_t>());
    const int h = static_cast<int>(box[2].item<int64_t>()), w = static_cast<int>(box[3].item<int64_t>());
    cadre::ResizePlan plan{double(top), double(left), double(h), double(w), r.tf.size, r.tf.size, 0, 0, r.tf.size, r.tf.size};
    const double worst = pixel_levels(run_finish(im, plan, r.tf), r.t.at("crop." + key), r.tf);
    std::printf("[crop] %s box %d,%d %dx%d: max |diff| %.2e pixel levels\n", r.files[i].c_str(), top, left, h, w, worst);
    EXPECT_LE(worst, kResizeBound) << key;
  }
}

TEST(ImagePipelineParity, EvalFromTheFileMatchesWithinTheDecodersOneLevel) {
  Refs& r = refs();
  for (size_t i = 0; i < r.files.size(); ++i) {
    const std::string bytes = r.bytes(i);
    const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
    const cadre::ImageInfo info = cadre::image_probe(data, bytes.size());
    ASSERT_NE(info.format, cadre::ImageFormat::Unknown) << r.files[i];
    const int short_side = std::min(info.height, info.width);
    const int d = info.format == cadre::ImageFormat::Jpeg ? cadre::dct_denominator(short_side, short_side, r.tf.resize) : 1;
    at::Tensor got = at::empty({3, r.tf.size, r.tf.size}, at::kFloat);
    cadre::SampleRng rng(1);
    cadre::transform_image(data, bytes.size(), r.tf, rng, got.data_ptr(), r.files[i]);
    const double worst = pixel_levels(got, r.t.at("eval." + std::to_string(i) + "." + std::to_string(d)), r.tf);
    std::printf("[file->eval] %s (decoded at 1/%d): max |diff| %.3f pixel levels\n", r.files[i].c_str(), d, worst);
    EXPECT_LE(worst, 1.0 + kResizeBound) << r.files[i];
  }
}

// Two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs.
double ks_statistic(std::vector<double> a, std::vector<double> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  size_t i = 0, j = 0;
  double d = 0;
  while (i < a.size() && j < b.size()) {
    const double x = std::min(a[i], b[j]);
    while (i < a.size() && a[i] <= x) ++i;
    while (j < b.size() && b[j] <= x) ++j;
    d = std::max(d, std::abs(double(i) / a.size() - double(j) / b.size()));
  }
  return d;
}

std::vector<double> as_vector(const at::Tensor& t) {
  at::Tensor c = t.to(at::kDouble).contiguous();
  return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

TEST(ImagePipelineParity, RandomResizedCropBoxesMatchTorchvisionByKolmogorovSmirnov) {
  Refs& r = refs();
  constexpr int kDraws = 10000;
  // Critical value at alpha = 0.001 for two samples of 10,000: 1.949 * sqrt(2 / 10000).
  const double critical = 1.949 * std::sqrt(2.0 / kDraws);
  for (auto [H, W] : std::vector<std::pair<int, int>>{{375, 500}, {500, 375}, {64, 400}}) {
    const std::string key = "rrc." + std::to_string(H) + "x" + std::to_string(W);
    auto draw = [&](const cadre::CropRange& range, std::vector<double>& scale, std::vector<double>& ratio) {
      for (int n = 0; n < kDraws; ++n) {
        cadre::SampleRng rng(0xC0FFEE + uint64_t(n));  // one stream per sample, as the loader seeds them
        cadre::CropBox b = cadre::random_resized_crop_box(H, W, range, rng);
        ASSERT_TRUE(b.top >= 0 && b.left >= 0 && b.top + b.height <= H && b.left + b.width <= W) << key;
        scale.push_back(double(b.height) * b.width / (double(H) * W));
        ratio.push_back(double(b.width) / b.height);
      }
    };
    std::vector<double> scale, ratio, bad_scale, bad_ratio;
    draw(cadre::CropRange{}, scale, ratio);
    const double d_scale = ks_statistic(scale, as_vector(r.t.at(key + ".scale")));
    const double d_ratio = ks_statistic(ratio, as_vector(r.t.at(key + ".ratio")));
    cadre::CropRange off;
    off.scale_lo = 0.15;  // a mis-sampled variant the test must reject
    draw(off, bad_scale, bad_ratio);
    const double d_bad = ks_statistic(bad_scale, as_vector(r.t.at(key + ".scale")));
    std::printf("[rrc] %dx%d: KS D scale %.4f, ratio %.4f (critical %.4f); scale_lo 0.15 control %.4f\n", H, W, d_scale,
                d_ratio, critical, d_bad);
    EXPECT_LT(d_scale, critical) << key;
    EXPECT_LT(d_ratio, critical) << key;
    EXPECT_GT(d_bad, critical) << key;
  }
}

}  // namespace
