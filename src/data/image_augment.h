// The geometric part of the image transforms, as torchvision defines them: RandomResizedCrop's
// box sampling, the centre crop, and the antialiased bilinear resize (PIL's and ATen's
// separable triangle filter, widened by the shrink factor) of a box of the source onto an
// output grid, into float pixels. Works on 8-bit RGB, interleaved (HWC).
#pragma once

#include <cstdint>

#include "data/permutation.h"

namespace cadre {

// Uniform draws from a SplitMix64 stream: one per sample, seeded from (seed, epoch, index).
class SampleRng {
 public:
  explicit SampleRng(uint64_t seed) : state_(seed) {}
  double uniform(double lo, double hi) {  // [lo, hi), 53 random bits
    return lo + (hi - lo) * double(splitmix64(state_) >> 11) * 0x1.0p-53;
  }
  int64_t below(int64_t n) {  // [0, n)
    return static_cast<int64_t>((static_cast<unsigned __int128>(splitmix64(state_)) * uint64_t(n)) >> 64);
  }

 private:
  uint64_t state_;
};

struct CropBox {
  int top = 0, left = 0, height = 0, width = 0;
};

struct CropRange {
  double scale_lo = 0.08, scale_hi = 1.0;           // of the image's area
  double ratio_lo = 3.0 / 4.0, ratio_hi = 4.0 / 3.0;  // width / height
};

// torchvision's RandomResizedCrop.get_params: up to 10 tries of an area share uniform in the
// scale range and a log-uniform aspect ratio, rounded to whole pixels; if none fits, the
// whole image clamped to the ratio range, centred.
CropBox random_resized_crop_box(int height, int width, const CropRange& range, SampleRng& rng);

// torchvision's center_crop offsets: round((dim - size) / 2), halves to even as Python rounds.
CropBox center_crop_box(int height, int width, int size);

// torchvision's Resize(size) for an int: the shorter side becomes `size`, the longer
// int(size * long / short).
void resize_shorter_side(int height, int width, int size, int& out_height, int& out_width);

// A source region (fractional, in source pixels) resized onto a virtual out_h x out_w grid, of
// which the window [win_top, win_top + win_h) x [win_left, win_left + win_w) is computed. The
// filter reads source pixels only inside the region rounded outwards (cropping first, then
// resizing, as torchvision does). `out` gets win_h * win_w * 3 floats in 0..255, HWC.
struct ResizePlan {
  double top = 0, left = 0, height = 0, width = 0;  // source region
  int out_h = 0, out_w = 0;                         // the full resized grid
  int win_top = 0, win_left = 0, win_h = 0, win_w = 0;
};
void resize_region_aa(const uint8_t* src, int src_h, int src_w, const ResizePlan& plan, float* out);

}  // namespace cadre
