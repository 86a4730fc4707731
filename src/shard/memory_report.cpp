// Model-state memory: measured bytes next to the ZeRO/FSDP formula.
#include "shard/memory_report.h"

#include "core/error.h"
#include "core/sysinfo.h"

namespace cadre {

StateFormula state_formula(Strategy strategy, const ShardMemory& m, int64_t c, int64_t k) {
  const int64_t psi = m.padded_numel, n = m.shard_size;
  const std::string params = str(double(psi) / 1e6, "M params"), sharded = str(params, ", N = ", n);
  // Float32 masters 4 and gradients 4, plus the optimizer's k.
  const int64_t state = 8 + k;
  switch (strategy) {
    case Strategy::NoShard:
      if (c == 4) return {state * psi, str(state, " x ", params)};
      return {(state + c) * psi, str("(", state, " + ", c, ") x ", params)};
    case Strategy::Zero1:
      if (c == 4) return {8 * psi + k * psi / n, str("(8 + ", k, "/N) x ", sharded)};
      return {2 * c * psi + (4 + k) * psi / n, str("(", 2 * c, " + ", 4 + k, "/N) x ", sharded)};
    default: return {state * psi / n, str(state, "/N x ", sharded)};
  }
}

MemoryReport memory_report(const ShardMemory& measured, int64_t optimizer_bytes, const StateFormula& formula) {
  MemoryReport r;
  r.measured = measured;
  r.measured.optimizer = optimizer_bytes;
  r.formula = formula;
  r.peak_rss = process_peak_rss_bytes();
  return r;
}

nlohmann::json MemoryReport::to_json() const {
  nlohmann::json j = {{"param_bytes", measured.params},
          {"grad_bytes", measured.grads},
          {"optimizer_bytes", measured.optimizer},
          {"state_bytes", measured.params + measured.grads + measured.optimizer},
          {"frozen_bytes", measured.frozen},
          {"formula_state_bytes", formula.bytes},
          {"formula", formula.text},
          {"params_on_rank", measured.padded_numel},
          {"peak_working_bytes", measured.peak_working},
          {"peak_whole_grad_bytes", measured.peak_whole_grads},
          {"shard_size", measured.shard_size},
          {"units", measured.units},
          {"flat_params", measured.flat_params},
          {"peak_rss_bytes", peak_rss}};
  if (!device.empty()) j["peak_device_bytes"] = peak_device;
  return j;
}

std::string MemoryReport::to_text() const {
  auto mib = [](int64_t b) { return double(b) / (1 << 20); };
  char line[400];
  std::snprintf(line, sizeof line,
                "memory per rank: params %.2f MiB, grads %.2f MiB, optimizer %.2f MiB = state %.2f MiB "
                "(formula %.2f MiB: %s); gathered working set peak %.2f MiB; peak RSS %.1f MiB",
                mib(measured.params), mib(measured.grads), mib(measured.optimizer),
                mib(measured.params + measured.grads + measured.optimizer), mib(formula.bytes), formula.text.c_str(),
                mib(measured.peak_working), mib(peak_rss));
  std::string text = line;
  if (measured.frozen > 0) text += str("; frozen parameters ", mib(measured.frozen), " MiB");
  if (device.empty()) return text;
  char gpu[160];
  std::snprintf(gpu, sizeof gpu, "; peak %s memory %.1f MiB (caching allocator)", device.c_str(), mib(peak_device));
  return text + gpu;
}

}  // namespace cadre
