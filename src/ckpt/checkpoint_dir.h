// The layout of a checkpoint directory and its life cycle on disk:
//   <dir>/step-00000040/            a complete checkpoint: rank files, manifest.json, COMMITTED
//   <dir>/.step-00000060.partial/   being written; never loaded, removed when found stale
// A checkpoint counts only once COMMITTED exists, which is written after the directory was
// renamed into place, so a crash at any moment leaves every older checkpoint loadable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cadre {

std::string checkpoint_name(int64_t step);           // "step-00000040"
std::string checkpoint_partial_name(int64_t step);   // ".step-00000040.partial"
std::string checkpoint_rank_file(int64_t rank, int64_t world);  // "rank-00001-of-00004.bin"
std::string checkpoint_rank_index(int64_t rank);     // "rank-00001.index.json"
inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr const char* kCommittedFile = "COMMITTED";

struct CheckpointEntry {
  int64_t step = 0;
  std::string path;
  bool committed = false;
};

// step-* directories of `dir`, newest first (none when `dir` does not exist).
std::vector<CheckpointEntry> checkpoint_list(const std::string& dir);
// Committed ones only, newest first.
std::vector<CheckpointEntry> checkpoint_list_complete(const std::string& dir);

// Removes partial directories and step directories without COMMITTED (left by a crash).
// Returns what it removed.
std::vector<std::string> checkpoint_remove_incomplete(const std::string& dir);

// COMMITTED records the step and the CRC-32C of manifest.json ("40\nmanifest_crc32c=1a2b3c4d\n"),
// so an edited or damaged manifest is refused before any of its pieces is trusted.
std::string committed_marker_text(int64_t step, uint32_t manifest_crc32c);
// The manifest checksum a marker records; nullopt for a marker of an older Cadre (the step
// alone). CheckpointError naming `source` when the marker is malformed.
std::optional<uint32_t> committed_manifest_crc32c(const std::string& marker_text, const std::string& source);

// Publishes a fully written partial directory as step `step`: manifest already inside and
// synced; rename into place (replacing an older directory of the same step), write COMMITTED
// with the manifest's checksum, sync the parent. Then deletes all but the newest `keep`
// complete checkpoints, never the one just published (a run resumed from an older step
// publishes below newer ones).
void checkpoint_publish(const std::string& dir, int64_t step, int64_t keep);

// The directory holding a run's step-* checkpoints: a run directory's checkpoint.dir (default
// <run>/checkpoints), or `path` itself when it is not a run directory.
std::string checkpoint_dir_of(const std::string& path);

// The checkpoint `path` names: a checkpoint directory itself, or the newest complete one in a
// checkpoint directory, or in a run directory's checkpoint.dir (default <run>/checkpoints).
// ConfigError saying what was looked at when there is none.
std::string checkpoint_locate(const std::string& path);

// fsync of a directory, so renames and new entries in it survive a power loss.
void fsync_directory(const std::string& path);

}  // namespace cadre
