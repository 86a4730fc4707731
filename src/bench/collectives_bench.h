// `cadre bench collectives`: times every collective of the Communicator (and libtorch's c10d
// Gloo all-reduce as the baseline) over a range of sizes, printed in the nccl-tests layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cadre::bench {

struct CollectivesBenchOptions {
  int64_t min_bytes = 32 << 20;   // -b
  int64_t max_bytes = 32 << 20;   // -e
  int64_t step_factor = 2;        // -f
  int64_t iters = 20;             // -n
  int64_t warmup = 5;             // -w
  bool check = true;              // -c
  std::vector<std::string> dtypes{"float"};      // -d (or "all")
  std::vector<std::string> redops{"sum"};        // -o (or "all")
  std::vector<std::string> collectives{"all"};   // positional
  int64_t timeout_s = 120;
  // --validate: time ops with the cross-rank header check on (what training pays); off, the
  // figure is the data movement alone.
  bool validate = false;
  // --blocking: wait for each op before issuing the next (latency, as the c10d rows are timed)
  // and report the median op; off, the timed ops are all issued at once, run back to back, and
  // the mean is reported.
  bool blocking = false;
  std::string device = "cpu";  // --device: where the buffers live (cpu | cuda | auto); cuda goes through NCCL
};

// Parses "8", "64K", "16M", "1G" (powers of 1024). ConfigError on anything else.
int64_t parse_byte_size(const std::string& text, const std::string& flag);

// Runs under any launcher that sets RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (one process
// alone when unset). Rank 0 prints the tables; returns non-zero if any result was wrong.
int run_collectives_bench(const CollectivesBenchOptions& options);

}  // namespace cadre::bench
