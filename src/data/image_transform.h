// One sample's way from encoded bytes to a training input: decode (DCT-scaled when the crop is
// shrunk by 2x or more anyway), then train: RandomResizedCrop + horizontal flip, or eval: resize
// the shorter side + centre crop; then normalise per channel, or round to uint8 for normalising
// on the device. Output is channel-major (CHW), size x size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/image_augment.h"
#include "data/image_codec.h"

namespace cadre {

struct ImageTransform {
  bool train = true;
  int size = 224;         // output side
  int resize = 256;       // eval: the shorter side before the centre crop
  CropRange crop;         // train: RandomResizedCrop's ranges
  double flip_p = 0.5;    // train: probability of a horizontal flip
  float mean[3] = {0.485f, 0.456f, 0.406f};
  float std[3] = {0.229f, 0.224f, 0.225f};
  bool uint8_out = false;  // ship rounded 0..255 bytes instead of normalised floats
  bool dct_scaling = true; // let JPEGs decode at 1/2..1/8 when the output allows it

  size_t bytes_per_sample() const { return size_t(size) * size * 3 * (uint8_out ? 1 : sizeof(float)); }
};

// The DCT scale (1, 2, 4 or 8) a JPEG of a crop this big decodes at: the largest denominator that
// leaves the crop at least `size` pixels on both sides, so the resize still shrinks (or keeps).
int dct_denominator(int crop_h, int crop_w, int size);

// Decodes `bytes` and writes the transformed sample into `out` (bytes_per_sample() bytes).
// `rng` draws the crop and flip (train); eval draws nothing. `what` names the sample in errors.
void transform_image(const uint8_t* bytes, size_t n, const ImageTransform& t, SampleRng& rng, void* out,
                     const std::string& what);

// The steps after decoding, on already decoded pixels (the parity tests feed Pillow's here):
// resize `plan` out of `image` into size x size, flip, then normalise or round into `out`.
void finish_sample(const RgbImage& image, const ResizePlan& plan, bool flip, const ImageTransform& t, void* out);

// The eval plan for a decoded image: shorter side to t.resize, centre crop t.size.
ResizePlan eval_plan(int height, int width, const ImageTransform& t);

}  // namespace cadre
