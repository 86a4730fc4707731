// `cadre bench gemm`: one JSON line with each layer shape's three training GEMMs (forward, input
// gradient, weight gradient) and their FLOP-weighted total, which the per-shape rates must
// reproduce; bad shapes are a usage error (exit 2) naming --linears.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "support/process.h"

namespace {

TEST(BenchGemm, TheTotalIsTheFlopWeightedRateOfEveryShapesThreeGemms) {
  for (const char* dtype : {"float32", "bfloat16"}) {
    const auto r = cadre::test::run_process({CADRE_BIN, "bench", "gemm", "--linears", "64:32x3,32:96", "--tokens", "128",
                                             "--dtype", dtype, "--threads", "1", "--repeats", "3", "--warmup", "1"},
                                            {}, 120);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json out = nlohmann::json::parse(r.output.substr(r.output.rfind('{', r.output.find("\"linears\""))));
    EXPECT_EQ(out["dtype"], dtype);
    EXPECT_EQ(out["kernel"], std::string(dtype) == "float32" ? "oneDNN sgemm" : "libtorch") << r.output;
    ASSERT_EQ(out["linears"].size(), 2u) << r.output;
    EXPECT_EQ(out["linears"][0]["in"], 64);
    EXPECT_EQ(out["linears"][0]["out"], 32);
    EXPECT_EQ(out["linears"][0]["count"], 3);
    EXPECT_EQ(out["linears"][1]["count"], 1);
    // Total FLOPs over total time: each GEMM's time is its FLOPs over its rate.
    double flops = 0, seconds = 0;
    for (const auto& l : out["linears"]) {
      const double one = 2.0 * 128 * l["in"].get<double>() * l["out"].get<double>() * 1e-9, count = l["count"];
      for (const char* gemm : {"forward_gflops", "input_grad_gflops", "weight_grad_gflops"}) {
        ASSERT_GT(l[gemm].get<double>(), 0) << gemm << " " << r.output;
        flops += one * count;
        seconds += one / l[gemm].get<double>() * count;
      }
    }
    EXPECT_NEAR(out["gflops"].get<double>(), flops / seconds, 1e-9 * flops / seconds) << r.output;
  }
}

TEST(BenchGemm, BadShapesAreAUsageErrorNamingLinears) {
  for (const char* bad : {"64", "64:0", "64:32x", "a:32", "64:32x-1"}) {
    const auto r = cadre::test::run_process({CADRE_BIN, "bench", "gemm", "--linears", bad}, {}, 60);
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.output;
    EXPECT_NE(r.output.find("--linears: '" + std::string(bad) + "'"), std::string::npos) << r.output;
  }
}

}  // namespace
