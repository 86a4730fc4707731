// `cadre doctor` with 2 ranks: passes on a healthy setup (floors relaxed: tests assert no
// speeds), names the rank whose BLAS is the reference one, and names a rank that shares its core
// with busy loops.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <thread>

#include "core/file_util.h"
#include "support/process.h"
#include "support/rank_processes.h"

namespace {

using cadre::testing::describe;
using cadre::testing::run_ranks;
namespace fs = std::filesystem;

const char* kReferenceBlas = "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3";

std::vector<std::string> doctor(std::vector<std::string> extra) {
  std::vector<std::string> argv = {CADRE_BIN, "doctor", "--matmul-size", "512"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

TEST(Doctor, HealthyRanksPassEveryCheckAndReportJson) {
  auto results = run_ranks(2, doctor({"--json", "--fp32-gflops-floor", "0", "--bf16-gflops-floor", "0", "--busbw-floor",
                                      "0", "--latency-ceiling-us", "1e9", "--straggler-ratio", "1e6"}));
  ASSERT_EQ(results[0].exit_code, 0) << describe(results);
  ASSERT_EQ(results[1].exit_code, 0) << describe(results);
  auto json_start = results[0].output.find('{');
  ASSERT_NE(json_start, std::string::npos) << describe(results);
  auto report = nlohmann::json::parse(results[0].output.substr(json_start, results[0].output.rfind('}') - json_start + 1));
  EXPECT_TRUE(report.at("ok").get<bool>());
  std::set<std::string> names;
  for (const auto& c : report.at("checks")) {
    names.insert(c.at("name").get<std::string>());
    EXPECT_TRUE(c.at("ok").get<bool>()) << c.dump();
  }
  for (const char* n : {"tensor_sanity", "fp32_matmul", "bf16_matmul", "memory_available", "collectives_float",
                        "collectives_bfloat16", "collectives_half", "collectives_int64", "allreduce_busbw",
                        "allreduce_latency", "straggler"})
    EXPECT_TRUE(names.count(n)) << n << " missing\n" << report.dump(2);
}

// The reference BLAS behind libblas.so.3 (as on a machine without OpenBLAS) on rank 1 only.
TEST(Doctor, ReferenceBlasOnOneRankFailsNamingTheCheckAndRank) {
  ASSERT_TRUE(fs::exists(kReferenceBlas)) << "scripts/setup.sh installs libblas3";
  fs::path dir = fs::temp_directory_path() / ("cadre_refblas_" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::remove(dir / "libblas.so.3");
  fs::create_symlink(kReferenceBlas, dir / "libblas.so.3");
  cadre::testing::RankOptions options;
  options.env = [&](int rank) {
    return rank == 1 ? std::vector<std::string>{"LD_LIBRARY_PATH=" + dir.string()} : std::vector<std::string>{};
  };
  auto results = run_ranks(2, doctor({"--straggler-ratio", "1e6", "--busbw-floor", "0", "--latency-ceiling-us", "1e9"}), options);
  cadre::remove_tree(dir);
  EXPECT_EQ(results[0].exit_code, 1) << describe(results);
  EXPECT_EQ(results[1].exit_code, 1) << describe(results);
  EXPECT_NE(results[0].output.find("fp32_matmul on rank 1"), std::string::npos) << describe(results);
  EXPECT_NE(results[0].output.find("/blas/libblas.so.3"), std::string::npos) << describe(results);
}

// Rank 1 shares core 1 with three busy loops; rank 0 has core 0 at a raised priority, so other
// work on this machine (parallel builds) cannot slow it as much and blur the comparison.
TEST(Doctor, RankSharingItsCoreIsNamedAsStraggler) {
  ASSERT_GE(std::thread::hardware_concurrency(), 2u);
  cadre::testing::ChildGuard busy;
  for (int i = 0; i < 3; ++i)
    busy.pids.push_back(cadre::testing::spawn({"taskset", "-c", "1", "sh", "-c", "while :; do :; done"},
                                              cadre::testing::base_environment({}), "/dev/null"));
  cadre::testing::RankOptions options;
  options.prefix = [](int rank) {
    if (rank == 0) return std::vector<std::string>{"nice", "-n", "-10", "taskset", "-c", "0"};
    return std::vector<std::string>{"taskset", "-c", "1"};
  };
  auto results = run_ranks(2, doctor({"--straggler-ratio", "1.3", "--fp32-gflops-floor", "0", "--bf16-gflops-floor", "0",
                                      "--busbw-floor", "0", "--latency-ceiling-us", "1e9"}), options);
  EXPECT_EQ(results[0].exit_code, 1) << describe(results);
  EXPECT_NE(results[0].output.find("doctor: FAILED: straggler"), std::string::npos) << describe(results);
  EXPECT_NE(results[0].output.find("rank 1 is slow"), std::string::npos) << describe(results);
}

// With every GPU hidden (any machine, any build), --device cuda stops before any check, naming
// the flag and what is missing; no launcher environment is needed for that.
TEST(Doctor, CudaWithoutAVisibleGpuExits2NamingTheFlag) {
  auto r = cadre::test::run_process(doctor({"--device", "cuda"}), {"CUDA_VISIBLE_DEVICES="}, 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--device: cuda was asked for, but"), std::string::npos) << r.output;
}

}  // namespace
