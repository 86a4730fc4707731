// Reading IDX image/label pairs (see idx_images.h) with every size checked against the header.
#include "data/idx_images.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

constexpr uint32_t kIdxImagesMagic = 0x00000803, kIdxLabelsMagic = 0x00000801;
const std::string kImagesSuffix = "images-idx3-ubyte", kLabelsSuffix = "labels-idx1-ubyte";

uint32_t read_big_endian(std::ifstream& in, const std::string& path) {
  unsigned char b[4];
  in.read(reinterpret_cast<char*>(b), 4);
  CADRE_CONFIG_CHECK(in.gcount() == 4, "'", path, "': truncated IDX header");
  return uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | b[3];
}

// Opens an IDX file, checks its magic, and returns the stream positioned after the header with
// the header's dimensions.
std::vector<uint32_t> open_idx(std::ifstream& in, const std::string& path, uint32_t magic, int dims) {
  in.open(path, std::ios::binary);
  CADRE_CONFIG_CHECK(in, "cannot read '", path, "'");
  uint32_t got = read_big_endian(in, path);
  CADRE_CONFIG_CHECK(got == magic, "'", path, "': IDX magic 0x", std::hex, got, " is not 0x", magic,
                     " (", dims == 3 ? "uint8 images" : "uint8 labels", ")");
  std::vector<uint32_t> shape;
  for (int d = 0; d < dims; ++d) shape.push_back(read_big_endian(in, path));
  return shape;
}

// Reads exactly `bytes` more bytes and checks that the file ends there.
void read_body(std::ifstream& in, const std::string& path, uint64_t bytes, std::vector<uint8_t>& out) {
  const size_t at = out.size();
  out.resize(at + bytes);
  in.read(reinterpret_cast<char*>(out.data() + at), static_cast<std::streamsize>(bytes));
  CADRE_CONFIG_CHECK(static_cast<uint64_t>(in.gcount()) == bytes, "'", path, "': ", in.gcount(),
                     " bytes of data where the header says ", bytes);
  CADRE_CONFIG_CHECK(in.peek() == std::char_traits<char>::eof(), "'", path,
                     "': bytes after the data the header describes");
}

}  // namespace

std::vector<IdxImagePair> idx_pairs_in(const std::string& dir) {
  std::vector<IdxImagePair> pairs;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() < kImagesSuffix.size() || name.compare(name.size() - kImagesSuffix.size(), kImagesSuffix.size(), kImagesSuffix) != 0)
      continue;
    const std::string prefix = name.substr(0, name.size() - kImagesSuffix.size());
    IdxImagePair pair{entry.path().string(), (entry.path().parent_path() / (prefix + kLabelsSuffix)).string()};
    CADRE_CONFIG_CHECK(fs::is_regular_file(pair.labels), "'", pair.images, "' has no labels file '", pair.labels, "'");
    pairs.push_back(pair);
  }
  std::sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) { return a.images < b.images; });
  return pairs;
}

void idx_read_pair(const IdxImagePair& pair, uint32_t height, uint32_t width, std::vector<uint8_t>& labels,
                   std::vector<uint8_t>& pixels) {
  std::ifstream images, label_file;
  const auto image_shape = open_idx(images, pair.images, kIdxImagesMagic, 3);
  CADRE_CONFIG_CHECK(image_shape[1] == height && image_shape[2] == width, "'", pair.images, "': images are ",
                     image_shape[1], "x", image_shape[2], ", not ", height, "x", width, " (check --height/--width)");
  const auto label_shape = open_idx(label_file, pair.labels, kIdxLabelsMagic, 1);
  CADRE_CONFIG_CHECK(label_shape[0] == image_shape[0], "'", pair.labels, "' holds ", label_shape[0],
                     " labels, '", pair.images, "' ", image_shape[0], " images");
  CADRE_CONFIG_CHECK(image_shape[0] > 0, "'", pair.images, "' holds no images");
  read_body(images, pair.images, uint64_t{image_shape[0]} * height * width, pixels);
  read_body(label_file, pair.labels, label_shape[0], labels);
}

}  // namespace cadre
