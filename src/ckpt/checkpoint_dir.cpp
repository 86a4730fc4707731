// Naming, listing, publishing and pruning of checkpoint directories.
#include "ckpt/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "ckpt/checkpoint_error.h"
#include "ckpt/checksum.h"
#include "core/config.h"
#include "core/error.h"
#include "core/file_util.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

// "step-00000040" -> 40; -1 when the name is not a checkpoint's.
int64_t parse_step(const std::string& name) {
  if (name.size() != 13 || name.compare(0, 5, "step-") != 0) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

bool is_partial(const std::string& name) {
  return name.size() > 9 && name[0] == '.' && name.compare(name.size() - 8, 8, ".partial") == 0 &&
         name.compare(1, 5, "step-") == 0;
}

// Removes a step directory so that no crash mid-way leaves something that looks complete:
// the marker goes first.
void remove_checkpoint(const fs::path& path) {
  std::error_code ec;
  fs::remove(path / kCommittedFile, ec);
  fsync_directory(path.string());
  remove_tree(path, ec);
  if (ec) throw Error(str("cannot remove checkpoint '", path.string(), "': ", ec.message()));
}

}  // namespace

std::string checkpoint_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}
std::string checkpoint_partial_name(int64_t step) { return "." + checkpoint_name(step) + ".partial"; }
std::string checkpoint_rank_file(int64_t rank, int64_t world) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "rank-%05lld-of-%05lld.bin", static_cast<long long>(rank), static_cast<long long>(world));
  return buf;
}
std::string checkpoint_rank_index(int64_t rank) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "rank-%05lld.index.json", static_cast<long long>(rank));
  return buf;
}

void fsync_directory(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) throw Error(str("cannot open directory '", path, "': ", std::strerror(errno)));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) throw Error(str("cannot fsync directory '", path, "': ", std::strerror(err)));
}

std::vector<CheckpointEntry> checkpoint_list(const std::string& dir) {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    int64_t step = parse_step(e.path().filename().string());
    if (step < 0 || !e.is_directory()) continue;
    out.push_back({step, e.path().string(), fs::is_regular_file(e.path() / kCommittedFile)});
  }
  std::sort(out.begin(), out.end(), [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step > b.step; });
  return out;
}

std::vector<CheckpointEntry> checkpoint_list_complete(const std::string& dir) {
  auto all = checkpoint_list(dir);
  all.erase(std::remove_if(all.begin(), all.end(), [](const CheckpointEntry& e) { return !e.committed; }), all.end());
  return all;
}

std::vector<std::string> checkpoint_remove_incomplete(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return removed;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory()) continue;
    if (is_partial(name) || (parse_step(name) >= 0 && !fs::is_regular_file(e.path() / kCommittedFile))) {
      remove_tree(e.path(), ec);
      if (ec) throw Error(str("cannot remove incomplete checkpoint '", e.path().string(), "': ", ec.message()));
      removed.push_back(e.path().string());
    }
  }
  return removed;
}

std::string checkpoint_dir_of(const std::string& path) {
  if (!fs::is_regular_file(fs::path(path) / "config.yaml")) return path;
  // A run directory: its config says where the checkpoints went.
  Config config = config_load((fs::path(path) / "config.yaml").string(), {});
  return config.checkpoint.dir.empty() ? (fs::path(path) / "checkpoints").string() : config.checkpoint.dir;
}

std::string checkpoint_locate(const std::string& path) {
  CADRE_CONFIG_CHECK(fs::is_directory(path), "'", path, "' is not a directory (a run, checkpoint directory or checkpoint)");
  if (fs::is_regular_file(fs::path(path) / kManifestFile)) return path;
  const std::string dir = checkpoint_dir_of(path);
  auto complete = checkpoint_list_complete(dir);
  CADRE_CONFIG_CHECK(!complete.empty(), "no complete checkpoint in '", dir, "'",
                     dir == path ? "" : str(" (the checkpoint directory of run '", path, "')"));
  return complete.front().path;
}

std::string committed_marker_text(int64_t step, uint32_t manifest_crc32c) {
  char crc[16];
  std::snprintf(crc, sizeof crc, "%08x", manifest_crc32c);
  return str(step, "\nmanifest_crc32c=", crc, "\n");
}

std::optional<uint32_t> committed_manifest_crc32c(const std::string& text, const std::string& source) {
  const std::string key = "\nmanifest_crc32c=";
  const size_t at = text.find(key);
  if (at == std::string::npos) {
    // Only the exact marker of versions before manifests had checksums ("<step>\n") goes
    // unchecked: anything else without the line is a damaged marker, and damage must not turn
    // the manifest check off.
    const bool legacy = text.size() >= 2 && text.back() == '\n' &&
                        text.find_first_not_of("0123456789") == text.size() - 1;
    if (legacy) return std::nullopt;
    throw CheckpointError(str(source, ": malformed marker (no manifest_crc32c line, and not the step-only marker of "
                              "older versions)"));
  }
  const std::string hex = text.substr(at + key.size(), 8);
  const bool well_formed = hex.size() == 8 && hex.find_first_not_of("0123456789abcdef") == std::string::npos &&
                           text.compare(at + key.size() + 8, std::string::npos, "\n") == 0;
  if (!well_formed) throw CheckpointError(str(source, ": malformed marker (manifest_crc32c is not 8 hex digits)"));
  return static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
}

void checkpoint_publish(const std::string& dir, int64_t step, int64_t keep) {
  const fs::path partial = fs::path(dir) / checkpoint_partial_name(step);
  const fs::path final_path = fs::path(dir) / checkpoint_name(step);
  CADRE_CHECK(fs::is_regular_file(partial / kManifestFile), "checkpoint '", partial.string(), "' has no ", kManifestFile);
  const std::string manifest = file_read((partial / kManifestFile).string());
  if (fs::exists(final_path)) remove_checkpoint(final_path);  // e.g. a corrupt one resume skipped
  std::error_code ec;
  fs::rename(partial, final_path, ec);
  if (ec) throw Error(str("cannot rename '", partial.string(), "' to '", final_path.string(), "': ", ec.message()));
  fsync_directory(dir);
  file_write_atomic((final_path / kCommittedFile).string(),
                    committed_marker_text(step, crc32c(manifest.data(), manifest.size())));
  fsync_directory(final_path.string());

  auto complete = checkpoint_list_complete(dir);
  complete.erase(std::remove_if(complete.begin(), complete.end(), [&](const CheckpointEntry& e) { return e.step == step; }),
                 complete.end());
  // The one just published counts towards `keep` but is never a candidate for removal.
  for (size_t i = static_cast<size_t>(std::max<int64_t>(keep - 1, 0)); i < complete.size(); ++i)
    remove_checkpoint(complete[i].path);
}

}  // namespace cadre
