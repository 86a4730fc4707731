// Checkpoint throughput and the cost of saving to training: save, load and verify in MB/s
// against a raw sequential write (write + fsync) of the same bytes to the same disk, and the
// step time while an asynchronous save runs against steps without one.
// Usage: checkpoint_io <config.yaml> <dir on the disk to measure> [repeats]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/checkpoint_saver.h"
#include "core/config.h"
#include "core/file_util.h"
#include "models/llama/config.h"
#include "core/error.h"
#include "models/registry.h"
#include "optim/adamw.h"
#include "shard/fully_shard.h"
#include "train/checkpointing.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The disk's own speed: `bytes` written sequentially in 8 MiB writes, then fsync.
double raw_write_s(const std::string& path, size_t bytes) {
  std::vector<char> block(8 << 20, 'x');
  auto t0 = Clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CADRE_CHECK(fd >= 0, "cannot create ", path);
  for (size_t done = 0; done < bytes;) {
    size_t n = std::min(block.size(), bytes - done);
    CADRE_CHECK(::write(fd, block.data(), n) == static_cast<ssize_t>(n), "write ", path);
    done += n;
  }
  CADRE_CHECK(::fsync(fd) == 0, "fsync ", path);
  ::close(fd);
  double s = since(t0);
  fs::remove(path);
  return s;
}

// Drops the page cache so a load reads from the disk (root only); false when not allowed.
bool drop_page_cache() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (!f) return false;
  f << "3\n";
  return static_cast<bool>(f.flush());
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 3) {
    std::fprintf(stderr, "usage: checkpoint_io <config.yaml> <dir> [repeats]\n");
    return 2;
  }
  cadre::Config c = cadre::config_load(argv[1], {});
  const std::string dir = std::string(argv[2]) + "/checkpoint_io_bench";
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 3;
  cadre::remove_tree(dir);
  fs::create_directories(dir);
  at::set_num_threads(static_cast<int>(c.train.threads));

  cadre::model_config_resolve(c);
  const cadre::LlamaConfig llama = cadre::llama_config(c.model);
  auto model = cadre::model_build(c);
  model->init_weights(1);
  cadre::FullyShardOptions options;
  options.strategy = cadre::Strategy::NoShard;
  options.mixed_precision.param_dtype =
      c.parallel.mixed_precision.param_dtype == "bfloat16" ? at::kBFloat16 : at::kFloat;
  const cadre::DeviceMesh mesh({}, 1, {});  // one rank
  cadre::FSDPModule sharded = model->parallelize(mesh, options, c.parallel);
  cadre::AdamW optimizer(sharded.parameters(), sharded.decay_mask(), {});
  const int64_t T = llama.max_seq_len;
  at::Tensor tokens = at::randint(llama.vocab_size, {c.data.batch_size, T + 1}, at::kLong);
  auto step = [&] {
    sharded.zero_grad();
    model->loss({tokens.narrow(1, 0, T), tokens.narrow(1, 1, T)}).loss.backward();
    optimizer.step(1e-4);
    sharded.mark_updated();
  };
  step();  // moments become non-zero, buffers are allocated

  auto header = [&](int64_t s) {
    cadre::CheckpointManifest h;
    h.step = s;
    h.strategy = "NO_SHARD";
    h.state = {{"data_position", 0}, {"optimizer_steps", optimizer.steps()}};
    h.config_yaml = cadre::config_to_yaml(c);
    return h;
  };
  auto no_agree = [](bool ok) { return ok; };

  // Synchronous saves: staging copy + write + fsync + manifest + publish.
  std::vector<double> save_s, stage_s, raw_s, load_warm_s, load_cold_s, verify_s;
  size_t bytes = 0;
  cadre::CheckpointSaver sync_saver({dir, 0, 1, 2, /*async=*/false}, no_agree);
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    cadre::Snapshot& snap = sync_saver.stage();
    cadre::stage_train_state(snap, sharded, optimizer, 0);
    stage_s.push_back(since(t0));
    sync_saver.submit(header(r + 1));
    save_s.push_back(since(t0));
    bytes = snap.size();
    raw_s.push_back(raw_write_s(dir + "/raw.bin", bytes));
  }
  const std::string newest = dir + "/" + cadre::checkpoint_name(repeats);
  bool cold = true;
  for (int r = 0; r < repeats; ++r) {
    for (bool warm : {true, false}) {
      if (!warm) cold = cold && drop_page_cache();
      auto t0 = Clock::now();
      cadre::CheckpointReader reader(newest);
      cadre::load_train_state(reader, sharded, optimizer, 0);
      (warm ? load_warm_s : load_cold_s).push_back(since(t0));
    }
    auto t0 = Clock::now();
    cadre::CheckpointReader reader(newest);
    CADRE_CHECK(reader.verify().empty(), "verify found damage in ", newest);
    verify_s.push_back(since(t0));
  }

  // Step time: plain steps, then steps while an asynchronous save of the same state runs,
  // alternating so that any other load on the machine hits both alike.
  std::vector<double> plain, during;
  double async_total = 0, async_stage = 0;
  {
    cadre::CheckpointSaver saver({dir, 0, 1, 2, /*async=*/true}, no_agree);
    for (int r = 0; r < repeats; ++r) {
      for (int i = 0; i < 2; ++i) {
        auto t0 = Clock::now();
        step();
        plain.push_back(since(t0));
      }
      auto t0 = Clock::now();
      cadre::Snapshot& snap = saver.stage();
      cadre::stage_train_state(snap, sharded, optimizer, 0);
      saver.submit(header(100 + r));
      async_stage += since(t0);
      // Steps until the save is done (at least one).
      do {
        auto ts = Clock::now();
        step();
        during.push_back(since(ts));
        saver.check();  // a failed save would otherwise keep this loop going
      } while (saver.last_stats().step != 100 + r);
      async_total += saver.last_stats().total_s;
    }
    saver.wait();
  }
  cadre::remove_tree(dir);

  const double mb = bytes / 1e6;
  std::printf("checkpoint of %s: %.1f MB per save (float32 model + AdamW moments), %d repeats, medians\n", argv[1], mb,
              repeats);
  std::printf("%-40s %10s %10s %8s\n", "", "seconds", "MB/s", "vs raw");
  const double raw = median(raw_s);
  auto row = [&](const char* what, double s) { std::printf("%-40s %10.3f %10.0f %7.2fx\n", what, s, mb / s, raw / s); };
  row("raw sequential write + fsync", raw);
  row("save (stage + write + fsync + commit)", median(save_s));
  row("load, page cache warm", median(load_warm_s));
  if (cold) row("load, page cache dropped", median(load_cold_s));
  else std::printf("load, page cache dropped: not measured (needs root to write /proc/sys/vm/drop_caches)\n");
  row("verify (read + CRC-32C)", median(verify_s));
  std::printf("async save: training blocked %.3f s per save (the staging copy, %.0f MB/s); the write took %.2f s in the "
              "background\n",
              async_stage / repeats, mb / (async_stage / repeats), async_total / repeats);
  const double base = median(plain), slowed = median(during);
  std::printf("step time: %.3f s without a save, %.3f s while one is written (%.2fx, %zu steps measured)\n", base, slowed,
              slowed / base, during.size());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "checkpoint_io: %s\n", e.what());
  return 1;
}
