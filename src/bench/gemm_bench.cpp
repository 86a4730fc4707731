// `cadre bench gemm` (gemm_bench.h).
#include "bench/gemm_bench.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "models/dnnl_linear.h"

namespace cadre::bench {
namespace {

int64_t positive_number(const std::string& text, const std::string& item) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  CADRE_CONFIG_CHECK(used == text.size() && used > 0 && value > 0, "--linears: '", item,
                     "' is not in:out or in:outxcount with positive numbers");
  return value;
}

// Median seconds of `op` over `repeats` runs after `warmup`.
double median_seconds(const std::function<at::Tensor()>& op, int64_t warmup, int64_t repeats) {
  for (int64_t i = 0; i < warmup; ++i) op();
  std::vector<double> times;
  for (int64_t i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    op();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

at::ScalarType parse_dtype(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  throw ConfigError(str("--dtype: '", name, "' (float32 or bfloat16)"));
}

}  // namespace

std::vector<LinearShape> parse_linear_shapes(const std::string& text) {
  std::vector<LinearShape> shapes;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const size_t colon = item.find(':'), times = item.find('x');
    CADRE_CONFIG_CHECK(colon != std::string::npos, "--linears: '", item, "' is not in:out or in:outxcount");
    LinearShape s;
    s.in = positive_number(item.substr(0, colon), item);
    const std::string out = times == std::string::npos ? item.substr(colon + 1) : item.substr(colon + 1, times - colon - 1);
    s.out = positive_number(out, item);
    if (times != std::string::npos) s.count = positive_number(item.substr(times + 1), item);
    shapes.push_back(s);
  }
  CADRE_CONFIG_CHECK(!shapes.empty(), "--linears: no layer shapes given");
  return shapes;
}

int run_gemm_bench(const GemmBenchOptions& o) {
  CADRE_CONFIG_CHECK(o.tokens > 0 && o.threads > 0 && o.repeats > 0 && o.warmup >= 0,
                     "--tokens, --threads and --repeats must be positive, --warmup not negative");
  const at::ScalarType dtype = parse_dtype(o.dtype);
  at::set_num_threads(static_cast<int>(o.threads));
  c10::NoGradGuard no_grad;
  const auto options = at::TensorOptions().dtype(dtype);
  nlohmann::json layers = nlohmann::json::array();
  double flops = 0, seconds = 0;
  for (const LinearShape& s : o.linears) {
    const at::Tensor x = at::randn({o.tokens, s.in}).to(options), w = at::randn({s.out, s.in}).to(options),
                     g = at::randn({o.tokens, s.out}).to(options);
    // The three GEMMs of a training step's linear, as Cadre's linears run them.
    const double forward = median_seconds([&] { return linear_no_bias(x, w); }, o.warmup, o.repeats);
    const double input_grad = median_seconds([&] { return linear_input_grad(g, w); }, o.warmup, o.repeats);
    const double weight_grad = median_seconds([&] { return linear_weight_grad(g, x); }, o.warmup, o.repeats);
    const double one = 2.0 * double(o.tokens) * double(s.in) * double(s.out);
    flops += 3 * one * double(s.count);
    seconds += (forward + input_grad + weight_grad) * double(s.count);
    layers.push_back({{"in", s.in}, {"out", s.out}, {"count", s.count}, {"forward_gflops", one / forward / 1e9},
                      {"input_grad_gflops", one / input_grad / 1e9}, {"weight_grad_gflops", one / weight_grad / 1e9}});
  }
  const bool dnnl = dtype == at::kFloat && dnnl_linear_enabled();
  const nlohmann::json result = {{"dtype", o.dtype},
                                 {"tokens", o.tokens},
                                 {"threads", o.threads},
                                 {"kernel", dnnl ? "oneDNN sgemm" : "libtorch"},
                                 {"linears", layers},
                                 {"gflops", flops / seconds / 1e9}};
  std::printf("%s\n", result.dump().c_str());
  return 0;
}

}  // namespace cadre::bench
