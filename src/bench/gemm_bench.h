// `cadre bench gemm`: the throughput of a model's linear layers in training, through the kernels
// Cadre's linears call (oneDNN's sgemm for float32 unless CADRE_DNNL_LINEAR=0, libtorch's
// otherwise): for each layer shape, the forward x W^T, the input gradient g W and the weight
// gradient g^T x over `tokens` rows, and their FLOP-weighted total. That total is the matmul peak
// at the model's own shapes, the MFU denominator bench/gemm_peak.py sets beside `cadre doctor`'s
// 1024^3 one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cadre::bench {

struct LinearShape {
  int64_t in = 0, out = 0, count = 1;  // a [out, in] weight, used `count` times a step
};

struct GemmBenchOptions {
  std::vector<LinearShape> linears;  // --linears
  int64_t tokens = 2048;             // rows of x: batch x sequence of one micro-batch
  std::string dtype = "float32";     // float32 | bfloat16
  int64_t threads = 2;
  int64_t repeats = 10;  // timed runs of each GEMM; the median counts
  int64_t warmup = 2;
};

// "512:512x4,512:1536x2" -> {{512, 512, 4}, {512, 1536, 2}} ("xN" optional). ConfigError naming
// --linears and the bad item otherwise.
std::vector<LinearShape> parse_linear_shapes(const std::string& text);

// Prints one JSON line: per shape the three GEMMs' GFLOP/s, and the total. Returns 0.
int run_gemm_bench(const GemmBenchOptions& options);

}  // namespace cadre::bench
