// Image datasets: `cadre data prepare --images` turns IDX pairs or <label>.json files into checksummed
// image shards with a seeded train/validation split; the loader reads them back exactly, in a
// seeded order that resumes from one number, and refuses damaged or mislabelled input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "core/error.h"
#include "data/image_loader.h"
#include "data/image_prepare.h"
#include "support/process.h"

namespace {

using cadre::ImageLoader;
using cadre::Split;

// `per_label` 2x3 images per label 0..2; pixel k of image i of label l is ((l*50 + i*7 + k) % 256) / 255.
void write_digits(const std::string& dir, int per_label) {
  std::filesystem::create_directories(dir);
  for (int label = 0; label < 3; ++label) {
    std::string data;
    for (int i = 0; i < per_label; ++i)
      for (int k = 0; k < 6; ++k) {
        if (!data.empty()) data += ",";
        data += std::to_string(((label * 50 + i * 7 + k) % 256) / 255.0);
      }
    cadre::test::write_text(dir + "/" + std::to_string(label) + ".json", "{\"data\": [" + data + "]}");
  }
}

// The images of write_digits as an IDX pair (`prefix`images-idx3-ubyte + labels), same order.
void write_idx_digits(const std::string& dir, int per_label, const std::string& prefix = "") {
  std::filesystem::create_directories(dir);
  auto be32 = [](uint32_t v) {
    return std::string{char(v >> 24), char(v >> 16 & 0xff), char(v >> 8 & 0xff), char(v & 0xff)};
  };
  const uint32_t count = 3 * per_label;
  std::string images = be32(0x803) + be32(count) + be32(2) + be32(3), labels = be32(0x801) + be32(count);
  for (int label = 0; label < 3; ++label)
    for (int i = 0; i < per_label; ++i) {
      labels += char(label);
      for (int k = 0; k < 6; ++k) images += char((label * 50 + i * 7 + k) % 256);
    }
  cadre::test::write_text(dir + "/" + prefix + "images-idx3-ubyte", images);
  cadre::test::write_text(dir + "/" + prefix + "labels-idx1-ubyte", labels);
}

cadre::ImagePrepareOptions options(const std::string& in, const std::string& out) {
  cadre::ImagePrepareOptions o;
  o.inputs = {in};
  o.out = out;
  o.height = 2;
  o.width = 3;
  o.val_fraction = 0.2;
  o.shard_samples = 7;  // several shards per split
  return o;
}

TEST(ImageData, PrepareSplitsEveryImageOnceWithItsLabel) {
  cadre::test::TempDir dir("images");
  write_digits(dir / "in", 10);
  auto m = cadre::images_prepare(options(dir / "in", dir / "out"));
  EXPECT_EQ(m.kind, "images");
  EXPECT_EQ(m.num_classes, 3);
  ImageLoader train(dir / "out", Split::Train, 1), val(dir / "out", Split::Val, 0);
  EXPECT_EQ(train.num_samples() + val.num_samples(), 30u);
  EXPECT_EQ(val.num_samples(), 6u);
  // Every (label, image) comes back exactly once across both splits, pixels intact.
  std::set<std::pair<int, int>> seen;
  uint8_t px[6];
  for (auto* loader : {&train, &val})
    for (uint64_t s = 0; s < loader->num_samples(); ++s) {
      int label = loader->sample(s, px);
      int i = -1;
      for (int cand = 0; cand < 10; ++cand)
        if (px[0] == (label * 50 + cand * 7) % 256) i = cand;
      ASSERT_GE(i, 0) << "sample " << s << " label " << label;
      for (int k = 0; k < 6; ++k) EXPECT_EQ(px[k], (label * 50 + i * 7 + k) % 256);
      EXPECT_TRUE(seen.insert({label, i}).second) << "duplicate image " << label << "/" << i;
    }
  EXPECT_EQ(seen.size(), 30u);
}

TEST(ImageData, OrderIsSeededAndResumesFromItsPosition) {
  cadre::test::TempDir dir("images-order");
  write_digits(dir / "in", 10);
  cadre::images_prepare(options(dir / "in", dir / "out"));
  auto labels = [&](ImageLoader& l, int batches) {
    std::vector<int> out;
    uint8_t lab[4], px[24];
    for (int b = 0; b < batches; ++b) {
      l.next(4, 0, 4, lab, px);
      out.insert(out.end(), lab, lab + 4);
    }
    return out;
  };
  ImageLoader a(dir / "out", Split::Train, 5), b(dir / "out", Split::Train, 5), c(dir / "out", Split::Train, 6);
  auto la = labels(a, 12), lb = labels(b, 12), lc = labels(c, 12);
  EXPECT_EQ(la, lb);
  EXPECT_NE(la, lc);
  // A loader set to the position of the first 5 batches continues identically.
  ImageLoader resumed(dir / "out", Split::Train, 5);
  resumed.set_position(20);
  auto rest = labels(resumed, 7);
  EXPECT_EQ(rest, std::vector<int>(la.begin() + 20, la.end()));
  // Two ranks taking halves of each global batch read what one rank reads.
  ImageLoader r0(dir / "out", Split::Train, 5), r1(dir / "out", Split::Train, 5);
  uint8_t l0[2], l1[2], px[12];
  r0.next(4, 0, 2, l0, px);
  r1.next(4, 2, 2, l1, px);
  EXPECT_EQ((std::vector<int>{l0[0], l0[1], l1[0], l1[1]}), std::vector<int>(la.begin(), la.begin() + 4));
}

TEST(ImageData, DamagedShardAndBadInputAreRefused) {
  cadre::test::TempDir dir("images-bad");
  write_digits(dir / "in", 10);
  cadre::images_prepare(options(dir / "in", dir / "out"));
  {
    std::fstream f(dir / "out/train_00000.img", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(70);
    f.put('\x7f');
  }
  try {
    ImageLoader l(dir / "out", Split::Train, 1);
    FAIL() << "a flipped byte was not noticed";
  } catch (const cadre::Error& e) {
    EXPECT_NE(std::string(e.what()).find("train_00000.img"), std::string::npos) << e.what();
  }
  auto message = [&](const std::string& json, int64_t height) {
    write_digits(dir / "in2", 2);
    cadre::test::write_text(dir / "in2/1.json", json);
    auto o = options(dir / "in2", dir / "out2");
    o.height = height;
    try {
      cadre::images_prepare(o);
    } catch (const cadre::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message("{\"data\": [0.5, 2.0, 0, 0, 0, 0]}", 2).find("outside [0, 1]"), std::string::npos);
  EXPECT_NE(message("{\"data\": [0.5, 0.5]}", 2).find("1.json"), std::string::npos);
  EXPECT_NE(message("not json", 2).find("not valid JSON"), std::string::npos);
}

TEST(ImageData, AnIdxPairPreparesTheSameDatasetAsDigitJson) {
  cadre::test::TempDir dir("images-idx");
  write_digits(dir / "json", 10);
  write_idx_digits(dir / "idx", 10);
  auto from_json = cadre::images_prepare(options(dir / "json", dir / "out-json"));
  auto from_idx = cadre::images_prepare(options(dir / "idx", dir / "out-idx"));
  EXPECT_EQ(from_idx.num_classes, 3);
  ASSERT_EQ(from_idx.train.size(), from_json.train.size());
  ASSERT_EQ(from_idx.val.size(), from_json.val.size());
  for (size_t i = 0; i < from_idx.train.size(); ++i) EXPECT_EQ(from_idx.train[i].checksum, from_json.train[i].checksum);
  for (size_t i = 0; i < from_idx.val.size(); ++i) EXPECT_EQ(from_idx.val[i].checksum, from_json.val[i].checksum);
  EXPECT_DOUBLE_EQ(from_idx.pixel_mean, from_json.pixel_mean);
}

TEST(ImageData, DamagedIdxPairsAreRefusedNamingTheFile) {
  cadre::test::TempDir dir("images-idx-bad");
  auto message = [&](const std::function<void(const std::string&)>& damage) {
    std::filesystem::remove_all(dir / "in");
    write_idx_digits(dir / "in", 4, "train-");
    damage(dir / "in");
    try {
      cadre::images_prepare(options(dir / "in", dir / "out"));
    } catch (const cadre::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  auto edit = [](const std::string& path, size_t at, char byte) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(byte);
  };
  const std::string images = "train-images-idx3-ubyte", labels = "train-labels-idx1-ubyte";
  std::string m = message([&](const std::string& in) { edit(in + "/" + images, 3, 0x01); });
  EXPECT_NE(m.find("IDX magic"), std::string::npos) << m;
  EXPECT_NE(m.find(images), std::string::npos) << m;
  m = message([&](const std::string& in) { edit(in + "/" + images, 11, 5); });  // 5 rows, not 2
  EXPECT_NE(m.find("not 2x3"), std::string::npos) << m;
  m = message([&](const std::string& in) { edit(in + "/" + labels, 7, 11); });  // 11 labels for 12 images
  EXPECT_NE(m.find("11 labels"), std::string::npos) << m;
  m = message([&](const std::string& in) { std::filesystem::resize_file(in + "/" + images, 16 + 6 * 12 - 1); });
  EXPECT_NE(m.find("bytes of data where the header says 72"), std::string::npos) << m;
  m = message([&](const std::string& in) { std::ofstream(in + "/" + labels, std::ios::app) << 'x'; });
  EXPECT_NE(m.find("bytes after the data"), std::string::npos) << m;
  EXPECT_NE(m.find(labels), std::string::npos) << m;
  m = message([&](const std::string& in) { std::filesystem::remove(in + "/" + labels); });
  EXPECT_NE(m.find("has no labels file"), std::string::npos) << m;
}

}  // namespace
