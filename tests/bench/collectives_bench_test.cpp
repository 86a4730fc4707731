// `cadre bench collectives` with 2 ranks: a table for every collective, dtype and reduction,
// no wrong elements, the nccl-tests columns and footer; timed with the cross-rank check on.
#include <gtest/gtest.h>

#include <sstream>

#include "support/process.h"
#include "support/rank_processes.h"

namespace {

using cadre::testing::describe;
using cadre::testing::run_ranks;

TEST(BenchCollectives, PrintsEveryOpAndDtypeWithNoWrongResults) {
  auto results = run_ranks(2, {CADRE_BIN, "bench", "collectives", "all", "-b", "64", "-e", "64K", "-f", "1024", "-n", "2",
                               "-w", "1", "-d", "all", "-o", "all"});
  ASSERT_EQ(results[0].exit_code, 0) << describe(results);
  ASSERT_EQ(results[1].exit_code, 0) << describe(results);
  const std::string& out = results[0].output;
  EXPECT_NE(out.find("#wrong"), std::string::npos);
  EXPECT_NE(out.find("algbw"), std::string::npos);
  EXPECT_NE(out.find(", buffers on cpu;"), std::string::npos) << out;  // --device's default
  for (const char* dtype : {"float", "bfloat16", "half", "int64"}) {
    for (const char* op : {"sum", "avg", "max"}) {
      for (const char* coll : {"all_reduce", "reduce_scatter"})
        EXPECT_NE(out.find(std::string("# Collective test: ") + coll + "  dtype " + dtype + "  redop " + op), std::string::npos)
            << coll << " " << dtype << " " << op << "\n" << out;
    }
    for (const char* coll : {"all_gather", "broadcast"})
      EXPECT_NE(out.find(std::string("# Collective test: ") + coll + "  dtype " + dtype + "\n"), std::string::npos) << out;
  }
  EXPECT_NE(out.find("# Collective test: c10d_all_reduce  dtype float  redop sum"), std::string::npos);
  // libtorch's Gloo all_gather_into_tensor / reduce_scatter_tensor, where it has them (2.3+).
  const bool tensor_ops = CADRE_GLOO_TENSOR_COLLECTIVES;
  EXPECT_EQ(out.find("# Collective test: c10d_all_gather  dtype float\n") != std::string::npos, tensor_ops) << out;
  EXPECT_EQ(out.find("# Collective test: c10d_reduce_scatter  dtype float  redop max") != std::string::npos, tensor_ops)
      << out;
  EXPECT_EQ(out.find("# c10d_reduce_scatter float sum: skipped (this libtorch's ProcessGroupGloo has no") !=
                std::string::npos,
            !tensor_ops)
      << out;
  // Data rows: size count type redop root, then (time algbw busbw #wrong) twice.
  std::istringstream lines(out);
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string x; fields >> x;) f.push_back(x);
    ASSERT_EQ(f.size(), 13u) << line;
    EXPECT_EQ(f[8], "0") << line;
    EXPECT_EQ(f[12], "0") << line;
    ++rows;
  }
  // 4 dtypes x (2 reducing collectives x 3 ops + 2 others) + c10d float: all-reduce sum/max, and
  // (2.x) reduce-scatter sum/max and all-gather; 2 sizes each.
  EXPECT_EQ(rows, 2 * (4 * (2 * 3 + 2) + 2 + (tensor_ops ? 3 : 0))) << out;
  EXPECT_NE(out.find("# Avg bus bandwidth"), std::string::npos);
}

// What training pays: ops timed with the cross-rank check on, one at a time; the header says so
// and every result is right.
TEST(BenchCollectives, ValidatedBlockingRunSaysWhatItTimed) {
  auto results = run_ranks(2, {CADRE_BIN, "bench", "collectives", "all_reduce", "all_gather", "reduce_scatter",
                               "broadcast", "-b", "8", "-e", "64K", "-f", "8192", "-n", "3", "-w", "1", "--validate",
                               "1", "--blocking", "1"});
  ASSERT_EQ(results[0].exit_code, 0) << describe(results);
  ASSERT_EQ(results[1].exit_code, 0) << describe(results);
  const std::string& out = results[0].output;
  EXPECT_NE(out.find("# timed ops: cross-rank check on (--validate 1); each waited before the next is issued, time = median"),
            std::string::npos) << out;
  EXPECT_EQ(out.find("FAILED"), std::string::npos) << out;
  EXPECT_NE(out.find("# Out of bounds values : 0 OK"), std::string::npos) << out;
}

TEST(BenchCollectives, BadFlagIsAConfigError) {
  auto results = run_ranks(1, {CADRE_BIN, "bench", "collectives", "-b", "12Q"});
  EXPECT_EQ(results[0].exit_code, 2) << describe(results);
  EXPECT_NE(results[0].output.find("-b"), std::string::npos) << describe(results);
  results = run_ranks(1, {CADRE_BIN, "bench", "collectives", "--validate", "2"});
  EXPECT_EQ(results[0].exit_code, 2) << describe(results);
  EXPECT_NE(results[0].output.find("--validate takes 0 or 1"), std::string::npos) << describe(results);
}

// With every GPU hidden (any machine, any build), --device cuda is refused naming the flag.
TEST(BenchCollectives, CudaWithoutAVisibleGpuExits2NamingTheFlag) {
  auto r = cadre::test::run_process({CADRE_BIN, "bench", "collectives", "all_reduce", "--device", "cuda"},
                                    {"CUDA_VISIBLE_DEVICES="}, 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--device: cuda was asked for, but"), std::string::npos) << r.output;
}

}  // namespace
