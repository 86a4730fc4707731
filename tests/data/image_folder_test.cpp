// ImageFolder preparation and the encoded-image loader, on JPEGs and PNGs encoded here at
// test time (TurboJPEG, libpng) with a class-dependent colour: prepare's index and split,
// corrupt files listed and skipped with a count, an empty class and a non-image file named;
// the loader's batches the same for any number of decode threads, resume exact, shards read
// in a permuted order with windowed shuffling, a new order each epoch.
#include <gtest/gtest.h>
#include <png.h>
#include <turbojpeg.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "core/file_util.h"
#include "data/encoded_image_loader.h"
#include "data/image_augment.h"
#include "data/image_prepare.h"
#include "data/shard_window_order.h"
#include "support/process.h"

namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> class_pixels(int h, int w, int label) {
  std::vector<uint8_t> px(size_t(h) * w * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) px[(size_t(y) * w + x) * 3 + c] = static_cast<uint8_t>((c == label % 3 ? 200 : 40) + (x + y) % 16);
  return px;
}

std::string encode_jpeg(const std::vector<uint8_t>& px, int h, int w) {
  tjhandle tj = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(tj, px.data(), w, 0, h, TJPF_RGB, &out, &size, TJSAMP_420, 90, 0), 0);
  std::string bytes(reinterpret_cast<char*>(out), size);
  tjFree(out);
  tjDestroy(tj);
  return bytes;
}

std::string encode_png(const std::vector<uint8_t>& px, int h, int w) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(w);
  image.height = static_cast<png_uint_32>(h);
  image.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  EXPECT_TRUE(png_image_write_to_memory(&image, nullptr, &size, 0, px.data(), 0, nullptr));
  std::string bytes(size, '\0');
  EXPECT_TRUE(png_image_write_to_memory(&image, bytes.data(), &size, 0, px.data(), 0, nullptr));
  return bytes;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// root/<class>/: per class, JPEGs and PNGs of several sizes.
void make_folder(const std::string& root, int classes, int per_class) {
  const int sizes[][2] = {{48, 64}, {80, 60}, {33, 47}};
  for (int c = 0; c < classes; ++c) {
    const std::string dir = root + "/cls_" + std::to_string(c);
    fs::create_directories(dir);
    for (int i = 0; i < per_class; ++i) {
      const int h = sizes[i % 3][0], w = sizes[i % 3][1];
      const auto px = class_pixels(h, w, c);
      if (i % 4 == 3) write_file(dir + "/" + std::to_string(i) + ".png", encode_png(px, h, w));
      else write_file(dir + "/" + std::to_string(i) + ".jpg", encode_jpeg(px, h, w));
    }
  }
}

cadre::DatasetManifest prepare(const std::string& root, const std::string& out) {
  cadre::ImagePrepareOptions o;
  o.inputs = {root};
  o.out = out;
  o.val_fraction = 0.2;
  o.shard_mb = 1;
  return cadre::images_prepare(o);
}

cadre::EncodedLoaderOptions loader_options(int workers) {
  cadre::EncodedLoaderOptions o;
  o.workers = workers;
  o.transform.size = 24;
  o.transform.resize = 28;
  o.window = 8;
  return o;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const cadre::ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

TEST(ImageFolder, PrepareListsAndSkipsCorruptFilesAndIndexesTheRest) {
  cadre::test::TempDir dir("image-folder");
  make_folder(dir / "root", 3, 8);
  const std::string good = encode_jpeg(class_pixels(40, 40, 1), 40, 40);
  write_file(dir / "root/cls_1/truncated.jpg", good.substr(0, good.size() / 2));
  write_file(dir / "root/cls_2/garbage.png", "this is not a png");
  testing::internal::CaptureStderr();
  cadre::DatasetManifest m = prepare(dir / "root", dir / "data");
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("skipped 2 corrupt"), std::string::npos) << log;
  EXPECT_NE(log.find("truncated.jpg"), std::string::npos) << log;
  EXPECT_NE(log.find("garbage.png"), std::string::npos) << log;
  EXPECT_EQ(m.kind, "encoded_images");
  EXPECT_EQ(m.skipped, 2u);
  EXPECT_EQ(m.classes, (std::vector<std::string>{"cls_0", "cls_1", "cls_2"}));
  uint64_t train = 0, val = 0;
  for (const auto& e : m.train) train += e.samples;
  for (const auto& e : m.val) val += e.samples;
  EXPECT_EQ(train + val, 24u);
  EXPECT_EQ(val, 5u);  // round(0.2 * 24)
  // The index holds each image's label and original size.
  cadre::EncodedShardReader shard(dir / ("data/" + m.train[0].file), true);
  std::set<std::pair<uint32_t, uint32_t>> shapes;
  for (uint64_t i = 0; i < shard.size(); ++i) {
    EXPECT_LT(shard.entry(i).label, 3u);
    shapes.insert({shard.entry(i).height, shard.entry(i).width});
  }
  EXPECT_EQ(shapes, (std::set<std::pair<uint32_t, uint32_t>>{{48, 64}, {80, 60}, {33, 47}}));
}

TEST(ImageFolder, EmptyClassAndNonImageFileAreNamed) {
  cadre::test::TempDir dir("image-folder-bad");
  make_folder(dir / "root", 2, 4);
  fs::create_directories(dir / "root/cls_empty");
  EXPECT_NE(message_of([&] { prepare(dir / "root", dir / "data"); }).find("class 'cls_empty'"), std::string::npos);
  fs::remove(dir / "root/cls_empty");
  write_file(dir / "root/cls_1/notes.txt", "hello");
  const std::string msg = message_of([&] { prepare(dir / "root", dir / "data"); });
  EXPECT_NE(msg.find("cls_1/notes.txt"), std::string::npos) << msg;
}

TEST(ImageFolder, LoaderBatchesAreTheSameForAnyWorkerCountAndResumeExactly) {
  cadre::test::TempDir dir("image-folder-load");
  make_folder(dir / "root", 3, 10);
  cadre::DatasetManifest m = prepare(dir / "root", dir / "data");
  auto batches = [&](int workers, int n, uint64_t start) {
    cadre::EncodedImageLoader loader(dir / "data", cadre::Split::Train, 7, loader_options(workers));
    loader.set_position(start);
    std::vector<std::vector<float>> out;
    for (int b = 0; b < n; ++b) {
      cadre::ImageBatch batch = loader.next(8, 2, 4);  // rank 1 of 2, 4 samples each
      const auto* f = reinterpret_cast<const float*>(batch.pixels.data);
      std::vector<float> v(f, f + 4 * 3 * 24 * 24);
      for (int64_t l : batch.labels) v.push_back(static_cast<float>(l));
      out.push_back(v);
    }
    return out;
  };
  const auto one = batches(1, 6, 0), three = batches(3, 6, 0);
  EXPECT_EQ(one, three);
  // Resume at batch 4: the same two batches as the uninterrupted run.
  const auto resumed = batches(2, 2, 4 * 8);
  EXPECT_EQ(resumed[0], one[4]);
  EXPECT_EQ(resumed[1], one[5]);
  EXPECT_NE(one[0], one[1]);
  // Validation: file order, centre crops, and labels of the samples asked for.
  cadre::EncodedImageLoader val(dir / "data", cadre::Split::Val, 0, [] {
    auto o = loader_options(2);
    o.transform.train = false;
    return o;
  }());
  cadre::ImageBatch b = val.at({0, 1, 2});
  EXPECT_EQ(b.count, 3u);
  for (int64_t l : b.labels) EXPECT_LT(l, 3);
}

TEST(ImageFolder, CorruptShardIsRefusedNamingTheFile) {
  cadre::test::TempDir dir("image-folder-shard");
  make_folder(dir / "root", 2, 4);
  cadre::DatasetManifest m = prepare(dir / "root", dir / "data");
  const std::string path = dir / ("data/" + m.train[0].file);
  std::string bytes = cadre::file_read(path);
  bytes[bytes.size() - 10] ^= 0x55;
  write_file(path, bytes);
  try {
    cadre::EncodedImageLoader loader(dir / "data", cadre::Split::Train, 7, loader_options(1));
    FAIL() << "a corrupted shard was accepted";
  } catch (const cadre::Error& e) {
    EXPECT_NE(std::string(e.what()).find(m.train[0].file), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
}

TEST(ShardWindowOrder, EachEpochIsAPermutationReadingShardsInWindowsAndDiffersAcrossEpochs) {
  const std::vector<uint64_t> sizes = {5, 7, 3, 6, 4};
  cadre::ShardWindowOrder order(sizes, 42, cadre::Split::Train, 4), again(sizes, 42, cadre::Split::Train, 4);
  std::vector<std::vector<uint64_t>> epochs;
  for (uint64_t e = 0; e < 3; ++e) {
    std::set<std::pair<uint32_t, uint64_t>> seen;
    std::vector<uint64_t> flat;
    for (uint64_t i = 0; i < 25; ++i) {
      cadre::ShardRecord r = order.at(e * 25 + i);
      cadre::ShardRecord s = again.at(e * 25 + i);
      EXPECT_EQ(r.shard, s.shard);
      EXPECT_EQ(r.record, s.record);
      seen.insert({r.shard, r.record});
      flat.push_back(r.shard * 100 + r.record);
      // Window w holds positions [4w, 4w + 4): every sample in it comes from at most 2 shards.
    }
    EXPECT_EQ(seen.size(), 25u);
    for (size_t w = 0; w < 25; w += 4) {
      std::set<uint64_t> shards;
      for (size_t i = w; i < std::min<size_t>(w + 4, 25); ++i) shards.insert(flat[i] / 100);
      EXPECT_LE(shards.size(), 2u);
    }
    epochs.push_back(flat);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
}

TEST(RandomResizedCrop, BoxesStayInsideTheImageAndExtremeShapesFallBackToTheClampedCentre) {
  cadre::SampleRng rng(3);
  for (int n = 0; n < 2000; ++n) {
    cadre::CropBox b = cadre::random_resized_crop_box(37, 211, cadre::CropRange{}, rng);
    ASSERT_TRUE(b.top >= 0 && b.left >= 0 && b.height >= 1 && b.width >= 1 && b.top + b.height <= 37 && b.left + b.width <= 211);
  }
  // A 1x100 strip: no sampled box fits the ratio range; the fallback is the full height, width
  // height * 4/3 rounded, centred.
  cadre::CropBox b = cadre::random_resized_crop_box(1, 100, cadre::CropRange{}, rng);
  EXPECT_EQ(b.height, 1);
  EXPECT_EQ(b.width, 1);
  EXPECT_EQ(b.left, 49);
}

}  // namespace
