// Model-state memory: measured bytes next to the ZeRO/FSDP formula.
#include "shard/memory_report.h"

#include "core/error.h"
#include "core/sysinfo.h"

namespace cadre {

MemoryReport memory_report(const ShardMemory& measured, int64_t optimizer_bytes, bool resident_compute_copy,
                           int64_t compute_bytes_per_param) {
  MemoryReport r;
  r.measured = measured;
  r.measured.optimizer = optimizer_bytes;
  const int64_t psi = measured.padded_numel;
  r.formula_state = 16 * psi / measured.shard_size + (resident_compute_copy ? compute_bytes_per_param * psi : 0);
  r.peak_rss = process_peak_rss_bytes();
  return r;
}

nlohmann::json MemoryReport::to_json() const {
  return {{"param_bytes", measured.params},
          {"grad_bytes", measured.grads},
          {"optimizer_bytes", measured.optimizer},
          {"state_bytes", measured.params + measured.grads + measured.optimizer},
          {"formula_state_bytes", formula_state},
          {"peak_working_bytes", measured.peak_working},
          {"shard_size", measured.shard_size},
          {"units", measured.units},
          {"flat_params", measured.flat_params},
          {"peak_rss_bytes", peak_rss}};
}

std::string MemoryReport::to_text() const {
  auto mib = [](int64_t b) { return double(b) / (1 << 20); };
  char line[320];
  std::snprintf(line, sizeof line,
                "memory per rank: params %.2f MiB, grads %.2f MiB, optimizer %.2f MiB = state %.2f MiB "
                "(formula %.2f MiB over %d rank(s)); gathered working set peak %.2f MiB; peak RSS %.1f MiB",
                mib(measured.params), mib(measured.grads), mib(measured.optimizer),
                mib(measured.params + measured.grads + measured.optimizer), mib(formula_state), measured.shard_size,
                mib(measured.peak_working), mib(peak_rss));
  return line;
}

}  // namespace cadre
