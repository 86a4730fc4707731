// BatchSource on the CPU (the device-generic path a GPU run takes too): encoded images shipped
// as bytes (data.uint8) and normalised after the loader, with the per-channel mean and std made
// once, equal the loader's own float normalisation over several batches, and the labels arrive
// as int64 in the loader's order.
#include <gtest/gtest.h>
#include <png.h>

#include <filesystem>
#include <fstream>

#include "data/encoded_image_loader.h"
#include "data/image_prepare.h"
#include "support/process.h"
#include "train/batch_source.h"

namespace fs = std::filesystem;

namespace {

void write_png(const std::string& path, int h, int w, int seed) {
  std::vector<uint8_t> px(size_t(h) * w * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>((i * 37 + size_t(seed) * 91) % 256);
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(w);
  image.height = static_cast<png_uint_32>(h);
  image.format = PNG_FORMAT_RGB;
  ASSERT_TRUE(png_image_write_to_file(&image, path.c_str(), 0, px.data(), 0, nullptr)) << path;
}

// root/cls_<c>/<i>.png, then `cadre data prepare --images`.
void make_dataset(const std::string& root, const std::string& out) {
  for (int c = 0; c < 3; ++c) {
    fs::create_directories(root + "/cls_" + std::to_string(c));
    for (int i = 0; i < 8; ++i) write_png(root + "/cls_" + std::to_string(c) + "/" + std::to_string(i) + ".png", 30, 36, c * 8 + i);
  }
  cadre::ImagePrepareOptions o;
  o.inputs = {root};
  o.out = out;
  o.val_fraction = 0.25;
  o.shard_mb = 1;
  cadre::images_prepare(o);
}

cadre::DataConfig data_config(bool uint8) {
  cadre::DataConfig d;
  d.image_size = 24;
  d.resize_size = 28;
  d.workers = 2;
  d.shuffle_window = 8;
  d.mean = "0.5,0.25,0.75";
  d.stddev = "0.2,0.4,0.3";
  d.uint8 = uint8;
  return d;
}

// The same bytes normalised as (p / 255 - mean) / std in two float32 orders: values below 4 in
// magnitude, a few roundings of at most 2^-22 each.
constexpr double kTol = 1e-5;
// Against the loader's own floats, the bytes also carry the rounding of the resampled pixel to a
// byte: half a level, 0.5 / 255 / std for the smallest std (0.2).
constexpr double kByteTol = 0.5 / 255.0 / 0.2 + kTol;

TEST(BatchSource, BytesNormalisedAfterTheLoaderEqualTheLoadersFloatsBatchAfterBatch) {
  cadre::test::TempDir dir("batch-source");
  make_dataset(dir / "root", dir / "data");
  const c10::Device cpu(c10::kCPU);
  auto bytes = cadre::BatchSource::open(dir / "data", cadre::Split::Train, 5, data_config(true), 1, cpu);
  auto floats = cadre::BatchSource::open(dir / "data", cadre::Split::Train, 5, data_config(false), 1, cpu);
  for (int b = 0; b < 3; ++b) {
    const cadre::Batch x = bytes->next(6, 0, 6), y = floats->next(6, 0, 6);
    ASSERT_EQ(x.input.sizes(), (at::IntArrayRef{6, 3, 24, 24}));
    EXPECT_EQ(x.input.scalar_type(), at::kFloat);
    EXPECT_TRUE(x.input.device().is_cpu());
    EXPECT_LE((x.input - y.input).abs().max().item<double>(), kByteTol) << "batch " << b;
    EXPECT_EQ(x.target.scalar_type(), at::kLong);
    EXPECT_TRUE(at::equal(x.target, y.target)) << "batch " << b;
    EXPECT_LE(x.target.max().item<int64_t>(), 2);
  }
  // Validation samples by index: the loader's bytes, normalised here per channel, and its labels.
  auto val = cadre::BatchSource::open(dir / "data", cadre::Split::Val, 0, data_config(true), 1, cpu);
  cadre::EncodedLoaderOptions o;
  o.workers = 1;
  o.transform.train = false;
  o.transform.size = 24;
  o.transform.resize = 28;
  o.transform.uint8_out = true;
  cadre::EncodedImageLoader loader(dir / "data", cadre::Split::Val, 0, o);
  const cadre::ImageBatch want = loader.at({0, 1, 2, 3});
  const cadre::Batch got = val->at({0, 1, 2, 3});
  const at::Tensor pixels = at::from_blob(want.pixels.data, {4, 3, 24, 24}, at::kByte).to(at::kFloat);
  const at::Tensor mean = at::tensor({0.5f, 0.25f, 0.75f}).view({1, 3, 1, 1}), std = at::tensor({0.2f, 0.4f, 0.3f}).view({1, 3, 1, 1});
  EXPECT_LE((got.input - (pixels / 255.0 - mean) / std).abs().max().item<double>(), kTol);
  ASSERT_EQ(got.target.numel(), 4);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(got.target[i].item<int64_t>(), want.labels[size_t(i)]) << "sample " << i;
}

}  // namespace
