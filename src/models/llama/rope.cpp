// RoPE frequencies and their scalings. Computed in float64 (the tables are rounded to float32
// once, after the angles), so the scaled frequencies carry no float32 rounding of their own.
#include "models/llama/rope.h"

#include <ATen/ATen.h>

#include <cmath>

namespace cadre {
namespace {

// Llama 3.1: by wavelength 2*pi/f against the context RoPE was trained on (original): long
// wavelengths (> original / low_freq_factor) are divided by factor, short ones (< original /
// high_freq_factor) kept, and those between blended linearly in original / wavelength.
at::Tensor llama3_scaled(const at::Tensor& inv_freq, const LlamaConfig& c) {
  const double original = static_cast<double>(c.rope_original_max_seq_len);
  const double low = c.rope_low_freq_factor, high = c.rope_high_freq_factor, factor = c.rope_factor;
  const at::Tensor wavelen = (2 * M_PI) / inv_freq;
  const at::Tensor smooth = (original / wavelen - low) / (high - low);
  const at::Tensor blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq;
  at::Tensor out = at::where(wavelen > original / low, inv_freq / factor, inv_freq);
  const at::Tensor medium = (wavelen >= original / high).logical_and(wavelen <= original / low);
  return at::where(medium, blended, out);
}

}  // namespace

at::Tensor rope_inv_freq(const LlamaConfig& c, int64_t head_dim) {
  const at::Tensor inv_freq =
      at::pow(c.rope_theta, -at::arange(0, head_dim, 2, at::kDouble) / static_cast<double>(head_dim));
  if (c.rope_scaling == "linear") return inv_freq / c.rope_factor;
  if (c.rope_scaling == "llama3") return llama3_scaled(inv_freq, c);
  return inv_freq;  // "none"; llama_config refuses any other name
}

}  // namespace cadre
