// Resume: clean up after a crash, pick the checkpoint, load it on every rank, agree.
#include "train/resume.h"

#include <ATen/ATen.h>

#include <chrono>
#include <filesystem>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_error.h"
#include "ckpt/checkpoint_reader.h"
#include "core/error.h"
#include "core/log.h"
#include "obs/progress_heartbeat.h"
#include "train/adapter_checkpoint.h"
#include "train/checkpointing.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

// An explicit resume of an older step, while this run's checkpoint directory holds newer
// ones, would start a second history beside the first: the next `--resume auto` would jump
// back to the old line, and pruning would delete the new line's saves. Refused (ConfigError:
// every rank sees the same directory, so all stop) rather than guessed at.
void refuse_newer_checkpoints(const std::string& dir, const std::string& path, int64_t step) {
  std::string newer;
  for (const auto& e : checkpoint_list_complete(dir))
    if (e.step > step) newer += (newer.empty() ? "" : ", ") + fs::path(e.path).filename().string();
  CADRE_CONFIG_CHECK(newer.empty(), "checkpoint.resume: '", path, "' is step ", step, " but checkpoint.dir '", dir,
                     "' holds newer checkpoints (", newer, "); training on from it would mix two histories there. "
                     "Move the newer ones away, or train into another run.dir");
}

}  // namespace

Resumed resume_training(const Config& c, const std::string& dir, FSDPModule& model, Optimizer& optimizer,
                        BatchSource& train_data, int rank, comm::Communicator* group,
                        std::optional<uint64_t> base_fingerprint, const std::set<std::string>* held_elsewhere) {
  const auto t0 = std::chrono::steady_clock::now();
  // A crash mid-save leaves partial directories; only the lead removes them, and nobody
  // looks at the directory before it is done.
  if (rank == 0)
    for (const auto& path : checkpoint_remove_incomplete(dir)) log::warn("resume: removed incomplete checkpoint " + path);
  if (group) group->barrier();

  std::vector<std::string> candidates;
  const std::string& mode = c.checkpoint.resume;
  if (mode == "none") {
    auto existing = checkpoint_list_complete(dir);
    CADRE_CONFIG_CHECK(existing.empty(), "checkpoint.dir '", dir, "' already holds checkpoints (newest ",
                       fs::path(existing.empty() ? "" : existing.front().path).filename().string(),
                       "): resume them with --resume auto, or train into another run.dir");
    return {};
  }
  if (mode == "auto") {
    for (const auto& e : checkpoint_list_complete(dir)) candidates.push_back(e.path);
    if (candidates.empty()) {
      if (rank == 0) log::info("resume: no checkpoint in " + dir + "; starting from step 0");
      return {};
    }
  } else {
    CADRE_CONFIG_CHECK(fs::is_directory(mode), "checkpoint.resume: '", mode, "' is not a checkpoint directory");
    candidates.push_back(mode);
  }

  Resumed out;
  for (const std::string& path : candidates) {
    std::string error;
    int64_t step = 0, position = 0;
    try {
      CheckpointReader reader(path);
      check_adapter_base(reader, c, base_fingerprint);   // ConfigError: the same on every rank, so all stop
      check_checkpoint_fits(reader, model, &optimizer, held_elsewhere);
      const auto& m = reader.manifest();
      if (mode != "auto") refuse_newer_checkpoints(dir, path, m.step);
      CADRE_CONFIG_CHECK(m.step <= c.train.steps, "checkpoint '", path, "' is at step ", m.step, ", beyond train.steps ",
                         c.train.steps);
      auto pos = m.state.find("data_position");
      if (pos == m.state.end()) throw CheckpointError(str("checkpoint '", path, "' has no data_position in its state"));
      {
        obs::ProgressHeartbeat busy;  // reading a large checkpoint is no hang
        load_train_state(reader, model, optimizer, rank);
      }
      // Each rank reads only the stored pieces overlapping its shard (logged: tests check it).
      log::info(str("resume: rank ", rank, " read ", reader.bytes_read(), " of ", reader.bytes_total(), " bytes of ", path));
      step = m.step;
      position = pos->second;
    } catch (const CheckpointError& e) {
      error = e.what();
      log::warn("resume: " + error);
    }
    if (comm::all_ranks_agree(group, error.empty())) {
      train_data.set_position(static_cast<uint64_t>(position));
      out.step = step;
      out.path = path;
      break;
    }
    ++out.skipped;
    CADRE_CHECK(mode == "auto", "checkpoint.resume: '", path, "' cannot be loaded: ",
                error.empty() ? "another rank failed to read it (its log says why)" : error);
    if (rank == 0) {
      // Renamed, not deleted: the bytes may matter to whoever investigates, and a later save
      // of the same step must not collide with it.
      std::error_code ec;
      fs::rename(path, path + ".corrupt", ec);
      log::warn(str("resume: skipping damaged checkpoint ", path,
                    ec ? " (could not rename it: " + ec.message() + ")" : " (renamed to *.corrupt)"));
    }
    if (group) group->barrier();
  }
  CADRE_CHECK(!out.path.empty(), "resume: none of the ", candidates.size(), " checkpoints in '", dir,
              "' could be loaded (see the warnings above); move them away to start fresh");
  out.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (rank == 0)
    log::info(str("train: resumed from ", out.path, " at step ", out.step, " (data position ", train_data.position(),
                  ", loaded in ", out.load_s, " s)"));
  return out;
}

}  // namespace cadre
