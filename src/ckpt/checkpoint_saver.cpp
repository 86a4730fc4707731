// The save protocol (write, agree, merge, publish, agree) and the background thread running it.
#include "ckpt/checkpoint_saver.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/rank_writer.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/log.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

using Clock = std::chrono::steady_clock;

// Writing is not urgent and training is: on a machine whose cores the compute threads fill,
// the writer should run on what they leave idle (their waits in collectives, the data reads)
// rather than preempt them, since a rank held up at a synchronisation point holds up every
// rank. SCHED_IDLE gives the thread the least weight there is (3, against a normal thread's
// 1024 and nice 10's 110); where that is refused, nice 10. Both are per thread on Linux.
void lower_writer_priority() {
  const sched_param param{};  // SCHED_IDLE takes priority 0
  if (::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &param) == 0) return;
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10) != 0)
    log::debug(str("checkpoint: could not lower the writer thread's priority: ", std::strerror(errno)));
}

}  // namespace

CheckpointSaver::CheckpointSaver(SaverOptions options, AgreeFn agree)
    : options_(std::move(options)), agree_(std::move(agree)) {
  if (options_.async) thread_ = std::thread([this] { run(); });
}

CheckpointSaver::~CheckpointSaver() {
  if (!thread_.joinable()) return;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return !pending_ && !busy_; });
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (error_) {
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      log::error(str("checkpoint: ", e.what()));
    }
  }
}

Snapshot& CheckpointSaver::stage() {
  auto t0 = Clock::now();
  wait();
  last_stage_wait_s_ = seconds_since(t0);
  snapshot_.clear();
  return snapshot_;
}

void CheckpointSaver::submit(CheckpointManifest header) {
  if (!options_.async) {
    save(header);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    CADRE_CHECK(!pending_ && !busy_, "checkpoint: submit() without stage() while a save is running");
    header_ = std::move(header);
    pending_ = true;
  }
  cv_.notify_all();
}

void CheckpointSaver::check() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_) {
    auto e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void CheckpointSaver::wait() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return !pending_ && !busy_; });
  }
  check();
}

int64_t CheckpointSaver::in_flight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pending_ || busy_ ? header_.step : -1;
}

SaveStats CheckpointSaver::last_stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CheckpointSaver::run() {
  lower_writer_priority();
  for (;;) {
    CheckpointManifest header;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return pending_ || stopping_; });
      if (!pending_) return;
      header = header_;
      pending_ = false;
      busy_ = true;
    }
    std::exception_ptr error;
    try {
      save(header);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_ = false;
      if (error) error_ = error;
    }
    cv_.notify_all();
  }
}

void CheckpointSaver::save(const CheckpointManifest& header) {
  const auto t0 = Clock::now();
  const std::string partial = options_.dir + "/" + checkpoint_partial_name(header.step);
  std::string error;
  SaveStats stats;
  stats.step = header.step;
  try {
    fs::create_directories(partial);
    snapshot_.finish();  // device copies started by staging land here, off the training thread
    CheckpointManifest index = rank_write(partial, options_.rank, snapshot_, header);
    stats.bytes = index.files.at(0).bytes;
    stats.write_s = seconds_since(t0);
  } catch (const std::exception& e) {
    error = e.what();
  }
  snapshot_.release_pages();  // written or failed: the copy is not needed until the next stage()
  if (!agree_(error.empty())) {
    std::error_code ec;
    if (options_.rank == 0) remove_tree(partial, ec);  // every rank is past writing
    throw Error(str("checkpoint step ", header.step, " was not saved: ",
                    error.empty() ? "another rank failed to write its part (its log says why)" : error,
                    "; earlier checkpoints in ", options_.dir, " are intact"));
  }
  if (options_.rank == 0) {
    try {
      commit(header);
    } catch (const std::exception& e) {
      error = e.what();
      std::error_code ec;
      remove_tree(partial, ec);
    }
  }
  if (!agree_(error.empty())) {
    throw Error(str("checkpoint step ", header.step, " was not committed: ",
                    error.empty() ? "the lead rank failed to publish it (its log says why)" : error,
                    "; earlier checkpoints in ", options_.dir, " are intact"));
  }
  stats.total_s = seconds_since(t0);
  std::lock_guard<std::mutex> lock(mutex_);
  stats_ = stats;
}

void CheckpointSaver::commit(const CheckpointManifest& header) {
  checkpoint_commit(options_.dir, header.step, options_.world_size, options_.keep);
}

void checkpoint_commit(const std::string& dir, int64_t step, int64_t world_size, int64_t keep) {
  const fs::path partial = fs::path(dir) / checkpoint_partial_name(step);
  std::vector<CheckpointManifest> indexes;
  for (int64_t r = 0; r < world_size; ++r) {
    const fs::path path = partial / checkpoint_rank_index(r);
    indexes.push_back(manifest_parse(file_read(path.string()), path.string(), PieceCoverage::Partial));
  }
  CheckpointManifest manifest = manifest_merge(indexes);
  file_write_atomic((partial / kManifestFile).string(), manifest_to_json(manifest));
  for (int64_t r = 0; r < world_size; ++r) fs::remove(partial / checkpoint_rank_index(r));
  fsync_directory(partial.string());
  checkpoint_publish(dir, step, keep);
}

}  // namespace cadre
