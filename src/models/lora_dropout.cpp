// Counter-based dropout masks for LoRA adapters (lora_dropout.h).
#include "models/lora_dropout.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <mutex>

#include "core/counter_rng.h"
#include "core/error.h"

namespace cadre {
namespace {

std::mutex g_draw_mutex;
std::optional<DropoutDraw> g_draw;

std::optional<DropoutDraw> current_draw() {
  std::lock_guard<std::mutex> lock(g_draw_mutex);
  return g_draw;
}

}  // namespace

void set_dropout_draw(const std::optional<DropoutDraw>& draw) {
  std::lock_guard<std::mutex> lock(g_draw_mutex);
  g_draw = draw;
}

at::Tensor lora_dropout_keep(const DropoutDraw& draw, double p, const std::string& layer, int64_t samples,
                             int64_t positions, int64_t columns, int64_t column_offset, int64_t total_columns) {
  CADRE_CHECK(p >= 0 && p < 1 && column_offset >= 0 && column_offset + columns <= total_columns,
              "lora_dropout: p ", p, ", columns ", column_offset, "..", column_offset + columns, " of ", total_columns);
  // Element i of a sample's stream is dropped when its 32-bit word is below p * 2^32.
  const auto threshold = static_cast<uint64_t>(p * 4294967296.0);
  const uint64_t step_key =
      counter_rng::substream(counter_rng::stream_key(draw.seed, layer), draw.step);
  at::Tensor keep = at::empty({samples, positions, columns}, at::kBool);
  bool* out = keep.data_ptr<bool>();
  at::parallel_for(0, samples * positions, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t s = r / positions, t = r % positions;
      const uint64_t key = counter_rng::substream(step_key, uint64_t(draw.sample(s)));
      const uint64_t first = uint64_t(t) * uint64_t(total_columns) + uint64_t(column_offset);
      counter_rng::Block block = counter_rng::philox(key, first / 4);
      for (int64_t c = 0; c < columns; ++c) {
        const uint64_t i = first + uint64_t(c);
        if (c > 0 && i % 4 == 0) block = counter_rng::philox(key, i / 4);
        out[r * columns + c] = block.x[i % 4] >= threshold;
      }
    }
  });
  return keep;
}

at::Tensor lora_dropout(const at::Tensor& x, double p, const std::string& layer, int64_t column_offset,
                        int64_t total_columns) {
  const std::optional<DropoutDraw> draw = current_draw();
  if (!draw) return at::dropout(x, p, /*train=*/true);
  CADRE_CHECK(x.dim() >= 2, "lora_dropout: layer ", layer, "'s input is ", x.sizes(), ", not [samples, ..., columns]");
  const int64_t samples = x.size(0), columns = x.size(-1);
  const int64_t positions = samples * columns == 0 ? 0 : x.numel() / (samples * columns);
  const at::Tensor keep =
      lora_dropout_keep(*draw, p, layer, samples, positions, columns, column_offset, total_columns).to(x.device());
  return x * keep.view(x.sizes()) * (1.0 / (1.0 - p));
}

}  // namespace cadre
