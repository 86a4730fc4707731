// Decoding of encoded images (JPEG through libjpeg-turbo's TurboJPEG API, PNG through libpng's
// simplified API) into 8-bit RGB, rows top to bottom, pixels interleaved (HWC). JPEGs can be
// decoded at 1/2, 1/4 or 1/8 of their size in the DCT domain (what Pillow's draft() does), which
// skips most of the inverse DCT and colour conversion when the crop is later shrunk anyway.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cadre {

enum class ImageFormat { Unknown, Jpeg, Png };

struct ImageInfo {
  ImageFormat format = ImageFormat::Unknown;
  int height = 0, width = 0;
};

struct RgbImage {
  int height = 0, width = 0;
  std::vector<uint8_t> pixels;  // height * width * 3
};

// The format (from the signature) and dimensions (from the header); ImageFormat::Unknown and 0x0
// when the bytes are neither a JPEG nor a PNG or the header does not parse.
ImageInfo image_probe(const uint8_t* data, size_t size);

// Dimensions of a JPEG decoded at 1/denom (1, 2, 4 or 8): ceil(dim / denom), as libjpeg and Pillow.
inline int scaled_dim(int dim, int denom) { return (dim + denom - 1) / denom; }

// Decodes the whole image to RGB; JPEGs at 1/denom of their size, PNGs only at denom 1.
// Throws Error naming `what` (a file, or a shard and record) on corrupt data, warnings included
// (a truncated JPEG "decodes" with grey rows; Pillow refuses it too).
RgbImage image_decode(const uint8_t* data, size_t size, int denom, const std::string& what);
// The same into `out`, reusing its memory (the loader's threads keep one each: a fresh 0.5 MB
// buffer per image costs page faults and zeroing comparable to the resize).
void image_decode_into(const uint8_t* data, size_t size, int denom, const std::string& what, RgbImage& out);

}  // namespace cadre
