// Labelled images in the IDX format of the original MNIST files: `<prefix>images-idx3-ubyte`
// (magic 0x00000803, count, rows, columns, then uint8 pixels) beside
// `<prefix>labels-idx1-ubyte` (magic 0x00000801, count, then uint8 labels); big-endian counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cadre {

struct IdxImagePair {
  std::string images, labels;  // paths
};

// The IDX pairs in `dir`, sorted by path; empty when it holds none. A `*images-idx3-ubyte` file
// without its labels file is a ConfigError naming the missing file.
std::vector<IdxImagePair> idx_pairs_in(const std::string& dir);

// Appends the pair's labels and pixels (height*width bytes per image, row-major). Checks magic
// numbers, shape against height x width, equal counts and file sizes: ConfigError naming the file.
void idx_read_pair(const IdxImagePair& pair, uint32_t height, uint32_t width, std::vector<uint8_t>& labels,
                   std::vector<uint8_t>& pixels);

}  // namespace cadre
