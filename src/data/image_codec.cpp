// TurboJPEG and libpng decoders. One TurboJPEG handle per thread: handles are not thread safe
// and cost an allocation each. A handle that reported an error or a warning is replaced: in
// libjpeg-turbo 2.1 its warning flag outlives the call, and the next header read on it fails.
#include "data/image_codec.h"

#include <png.h>
#include <turbojpeg.h>

#include <cstring>
#include <memory>

#include "core/error.h"

namespace cadre {
namespace {

struct TjHandle {
  tjhandle h = tjInitDecompress();
  ~TjHandle() {
    if (h) tjDestroy(h);
  }
};

TjHandle& thread_handle() {
  thread_local TjHandle handle;
  return handle;
}

tjhandle thread_decompressor() {
  TjHandle& handle = thread_handle();
  CADRE_CHECK(handle.h, "TurboJPEG: cannot create a decompressor: ", tjGetErrorStr2(nullptr));
  return handle.h;
}

// The handle's error text, then a fresh handle for the next image.
std::string fail_and_reset(tjhandle tj) {
  std::string message = tjGetErrorStr2(tj);
  TjHandle& handle = thread_handle();
  tjDestroy(handle.h);
  handle.h = tjInitDecompress();
  return message;
}

bool is_png(const uint8_t* data, size_t size) { return size >= 8 && png_sig_cmp(data, 0, 8) == 0; }
bool is_jpeg(const uint8_t* data, size_t size) { return size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF; }

uint32_t big_endian32(const uint8_t* p) { return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3]; }

void decode_jpeg(const uint8_t* data, size_t size, int denom, const std::string& what, RgbImage& out) {
  tjhandle tj = thread_decompressor();
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj, data, static_cast<unsigned long>(size), &width, &height, &subsamp, &colorspace) != 0)
    throw Error(str("'", what, "': not a readable JPEG (", fail_and_reset(tj), ")"));
  out.width = scaled_dim(width, denom);
  out.height = scaled_dim(height, denom);
  out.pixels.resize(size_t(out.width) * out.height * 3);
  // flags 0: the accurate integer IDCT and fancy upsampling, Pillow's defaults.
  const int rc = tjDecompress2(tj, data, static_cast<unsigned long>(size), out.pixels.data(), out.width, 0, out.height,
                               TJPF_RGB, 0);
  if (rc != 0) throw Error(str("'", what, "': corrupt JPEG (", fail_and_reset(tj), ")"));
}

RgbImage decode_png(const uint8_t* data, size_t size, const std::string& what) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  CADRE_CHECK(png_image_begin_read_from_memory(&image, data, size), "'", what, "': not a readable PNG (",
              image.message, ")");
  // Alpha is dropped, not composited, as Pillow's convert("RGB") does.
  image.format = (image.format & PNG_FORMAT_FLAG_ALPHA) ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB;
  const int channels = (image.format & PNG_FORMAT_FLAG_ALPHA) ? 4 : 3;
  std::vector<uint8_t> buffer(PNG_IMAGE_SIZE(image));
  const bool ok = png_image_finish_read(&image, nullptr, buffer.data(), 0, nullptr);
  std::string message = image.message;
  png_image_free(&image);
  if (!ok) throw Error(str("'", what, "': corrupt PNG (", message, ")"));
  RgbImage out;
  out.width = static_cast<int>(image.width);
  out.height = static_cast<int>(image.height);
  if (channels == 3) {
    out.pixels = std::move(buffer);
  } else {
    out.pixels.resize(size_t(out.width) * out.height * 3);
    for (size_t i = 0, n = size_t(out.width) * out.height; i < n; ++i) std::memcpy(&out.pixels[i * 3], &buffer[i * 4], 3);
  }
  return out;
}

}  // namespace

ImageInfo image_probe(const uint8_t* data, size_t size) {
  ImageInfo info;
  if (is_png(data, size)) {
    // The IHDR chunk comes first: length, "IHDR", width, height.
    if (size < 24 || std::memcmp(data + 12, "IHDR", 4) != 0) return info;
    info.width = static_cast<int>(big_endian32(data + 16));
    info.height = static_cast<int>(big_endian32(data + 20));
    if (info.width > 0 && info.height > 0) info.format = ImageFormat::Png;
    return info;
  }
  if (is_jpeg(data, size)) {
    int width = 0, height = 0, subsamp = 0, colorspace = 0;
    tjhandle tj = thread_decompressor();
    if (tjDecompressHeader3(tj, data, static_cast<unsigned long>(size), &width, &height, &subsamp, &colorspace) != 0)
      fail_and_reset(tj);
    else if (width > 0 && height > 0)
      info = {ImageFormat::Jpeg, height, width};
  }
  return info;
}

void image_decode_into(const uint8_t* data, size_t size, int denom, const std::string& what, RgbImage& out) {
  CADRE_CHECK(denom == 1 || denom == 2 || denom == 4 || denom == 8, "decode scale 1/", denom, " is not 1, 1/2, 1/4 or 1/8");
  if (is_jpeg(data, size)) return decode_jpeg(data, size, denom, what, out);
  if (is_png(data, size)) {
    CADRE_CHECK(denom == 1, "'", what, "': PNGs decode at full size only, not 1/", denom);
    out = decode_png(data, size, what);
    return;
  }
  throw Error(str("'", what, "': neither a JPEG nor a PNG"));
}

RgbImage image_decode(const uint8_t* data, size_t size, int denom, const std::string& what) {
  RgbImage out;
  image_decode_into(data, size, denom, what, out);
  return out;
}

}  // namespace cadre
