// The per-sample transform: choose the decode scale from the crop, decode, resize, flip, normalise.
#include "data/image_transform.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace cadre {

int dct_denominator(int crop_h, int crop_w, int size) {
  for (int d : {8, 4, 2})
    if (crop_h / d >= size && crop_w / d >= size) return d;
  return 1;
}

ResizePlan eval_plan(int height, int width, const ImageTransform& t) {
  int rh = 0, rw = 0;
  resize_shorter_side(height, width, t.resize, rh, rw);
  const CropBox c = center_crop_box(rh, rw, t.size);
  return {0, 0, double(height), double(width), rh, rw, c.top, c.left, t.size, t.size};
}

void finish_sample(const RgbImage& image, const ResizePlan& plan, bool flip, const ImageTransform& t, void* out) {
  const int S = t.size;
  thread_local std::vector<float> hwc;  // reused: see image_decode_into
  hwc.resize(size_t(S) * S * 3);
  resize_region_aa(image.pixels.data(), image.height, image.width, plan, hwc.data());
  const size_t plane = size_t(S) * S;
  // (p / 255 - mean) / std as one multiply-add per value.
  float scale[3], shift[3];
  for (int c = 0; c < 3; ++c) {
    scale[c] = 1.0f / (255.0f * t.std[c]);
    shift[c] = -t.mean[c] / t.std[c];
  }
  for (int y = 0; y < S; ++y) {
    const float* row = &hwc[size_t(y) * S * 3];
    for (int c = 0; c < 3; ++c) {
      const size_t base = c * plane + size_t(y) * S;
      if (t.uint8_out) {
        uint8_t* o = static_cast<uint8_t*>(out) + base;
        for (int x = 0; x < S; ++x) {
          const float v = row[(flip ? S - 1 - x : x) * 3 + c];
          o[x] = static_cast<uint8_t>(std::lround(std::min(255.0f, std::max(0.0f, v))));
        }
      } else {
        float* o = static_cast<float*>(out) + base;
        for (int x = 0; x < S; ++x) o[x] = row[(flip ? S - 1 - x : x) * 3 + c] * scale[c] + shift[c];
      }
    }
  }
}

void transform_image(const uint8_t* bytes, size_t n, const ImageTransform& t, SampleRng& rng, void* out,
                     const std::string& what) {
  const ImageInfo info = image_probe(bytes, n);
  CADRE_CHECK(info.format != ImageFormat::Unknown, "'", what, "': neither a readable JPEG nor a PNG");
  const bool jpeg = info.format == ImageFormat::Jpeg && t.dct_scaling;
  if (t.train) {
    const CropBox box = random_resized_crop_box(info.height, info.width, t.crop, rng);
    const bool flip = rng.uniform(0, 1) < t.flip_p;
    const int d = jpeg ? dct_denominator(box.height, box.width, t.size) : 1;
    thread_local RgbImage image;
    image_decode_into(bytes, n, d, what, image);
    // The box in the scaled image's pixels: libjpeg's 1/d decode maps pixel x to x / d.
    const ResizePlan plan{box.top / double(d), box.left / double(d), box.height / double(d), box.width / double(d),
                          t.size, t.size, 0, 0, t.size, t.size};
    finish_sample(image, plan, flip, t, out);
  } else {
    const int short_side = std::min(info.height, info.width);
    const int d = jpeg ? dct_denominator(short_side, short_side, t.resize) : 1;
    thread_local RgbImage image;
    image_decode_into(bytes, n, d, what, image);
    finish_sample(image, eval_plan(image.height, image.width, t), false, t, out);
  }
}

}  // namespace cadre
