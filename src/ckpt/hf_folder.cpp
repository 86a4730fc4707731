// Hugging Face folder reading: safetensors headers checked against their files, tensors (or
// ranges of their elements) read with pread and widened to float32.
#include "ckpt/hf_folder.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ckpt/safetensors_header.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kSingleFile = "model.safetensors";
constexpr int64_t kWidenChunk = int64_t{1} << 20;  // elements read and widened at a time (2 MiB of bf16)
std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CADRE_CONFIG_CHECK(in, "cannot read '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void pread_all(int fd, char* out, uint64_t n, uint64_t offset, const std::string& path, const std::string& what) {
  uint64_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, out + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw ConfigError(str("cannot read ", what, " from '", path, "': ", std::strerror(errno)));
    if (r == 0) throw ConfigError(str("'", path, "' ends at byte ", offset + done, " inside ", what, " (truncated?)"));
    done += static_cast<uint64_t>(r);
  }
}

}  // namespace

int64_t hf_float_dtype_size(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  return 0;
}

bool hf_folder_detect(const std::string& dir) {
  return fs::is_regular_file(fs::path(dir) / "config.json") &&
         (fs::is_regular_file(fs::path(dir) / kSingleFile) || fs::is_regular_file(fs::path(dir) / kIndexFile));
}

HfFolder::HfFolder(std::string dir) : dir_(std::move(dir)) {
  CADRE_CONFIG_CHECK(fs::is_directory(dir_), "'", dir_, "' is not a directory (a Hugging Face model folder)");
  const fs::path root(dir_);
  CADRE_CONFIG_CHECK(fs::is_regular_file(root / "config.json"), "Hugging Face folder '", dir_, "' has no config.json");
  config_json_ = read_text((root / "config.json").string());
  try {
    if (fs::is_regular_file(root / kIndexFile)) {
      const std::string index_path = (root / kIndexFile).string();
      nlohmann::json index = nlohmann::json::parse(read_text(index_path), nullptr, /*allow_exceptions=*/false);
      CADRE_CONFIG_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
                         "'", index_path, "' is not a safetensors index (no \"weight_map\" object)");
      std::map<std::string, std::string> wanted;
      for (const auto& [name, file] : index["weight_map"].items()) {
        CADRE_CONFIG_CHECK(file.is_string(), "'", index_path, "': tensor '", name, "' maps to ", file.dump(),
                           ", not a file name");
        const std::string f = file.get<std::string>();
        CADRE_CONFIG_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..", "'", index_path,
                           "': tensor '", name, "' maps to '", f, "', which is not a file name in the folder");
        wanted[name] = f;
        if (!fds_.count(f)) open_file(f);
      }
      for (const auto& [name, file] : wanted) {
        auto it = tensors_.find(name);
        CADRE_CONFIG_CHECK(it != tensors_.end() && it->second.file == file, "'", index_path, "' puts tensor '", name,
                           "' in '", file, "', whose header does not list it");
      }
    } else {
      CADRE_CONFIG_CHECK(fs::is_regular_file(root / kSingleFile), "Hugging Face folder '", dir_, "' has neither ",
                         kSingleFile, " nor ", kIndexFile);
      open_file(kSingleFile);
    }
  } catch (...) {
    for (auto& [name, fd] : fds_) ::close(fd);
    throw;
  }
}

HfFolder::HfFolder(std::string dir, const std::string& config_file, const std::string& weights_file)
    : dir_(std::move(dir)) {
  CADRE_CONFIG_CHECK(fs::is_directory(dir_), "'", dir_, "' is not a directory");
  const fs::path root(dir_);
  for (const auto& file : {config_file, weights_file})
    CADRE_CONFIG_CHECK(fs::is_regular_file(root / file), "'", dir_, "' has no ", file);
  config_json_ = read_text((root / config_file).string());
  open_file(weights_file);
}

HfFolder::~HfFolder() {
  for (auto& [name, fd] : fds_) ::close(fd);
}

void HfFolder::open_file(const std::string& name) {
  const std::string path = dir_ + "/" + name;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ConfigError(str("cannot open safetensors file '", path, "': ", std::strerror(errno)));
  fds_[name] = fd;
  files_.push_back(name);
  struct stat st{};
  CADRE_CONFIG_CHECK(::fstat(fd, &st) == 0, "cannot stat '", path, "': ", std::strerror(errno));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  char prefix[8] = {};
  pread_all(fd, prefix, std::min<uint64_t>(8, size), 0, path, "the header length");
  std::string text(safetensors_header_length(prefix, size, path), '\0');
  pread_all(fd, text.data(), text.size(), 8, path, "the header");
  for (SafetensorsEntry& e : safetensors_parse_header_text(text, size, path)) {
    const std::string& tname = e.name;
    auto [it, fresh] = tensors_.emplace(tname, HfTensor{tname, name, std::move(e.dtype), std::move(e.shape), e.begin, e.end});
    CADRE_CONFIG_CHECK(fresh, "tensor '", tname, "' is in both '", it->second.file, "' and '", name, "' of '", dir_, "'");
  }
}

void HfFolder::read_float32(const HfTensor& t, float* out) const {
  const int64_t elem = hf_float_dtype_size(t.dtype);
  read_float32_range(t, 0, elem > 0 ? static_cast<int64_t>((t.end - t.begin) / static_cast<uint64_t>(elem)) : 0, out);
}

void HfFolder::read_float32_range(const HfTensor& t, int64_t start, int64_t count, float* out) const {
  const int64_t elem = hf_float_dtype_size(t.dtype);
  CADRE_CONFIG_CHECK(elem > 0, "tensor '", t.name, "' in '", dir_, "/", t.file, "' has dtype ", t.dtype,
                     "; Cadre reads F32, BF16 and F16");
  const uint64_t numel = (t.end - t.begin) / static_cast<uint64_t>(elem);
  CADRE_CHECK(start >= 0 && count >= 0 && static_cast<uint64_t>(start + count) <= numel, "tensor '", t.name,
              "': elements [", start, ", ", start + count, ") asked of ", numel);
  const uint64_t bytes = static_cast<uint64_t>(count * elem), offset = t.begin + static_cast<uint64_t>(start * elem);
  const std::string path = dir_ + "/" + t.file;
  const std::string what = str("tensor '", t.name, "'");
  bytes_read_ += bytes;
  if (t.dtype == "F32") {
    pread_all(fds_.at(t.file), reinterpret_cast<char*>(out), bytes, offset, path, what);
    return;
  }
  // Through a bounded buffer: a rank's part of a large tensor never sits in memory twice.
  const int64_t chunk = std::min<int64_t>(count, kWidenChunk);
  at::Tensor raw = at::empty({chunk}, t.dtype == "BF16" ? at::kBFloat16 : at::kHalf);
  for (int64_t done = 0; done < count; done += chunk) {
    const int64_t n = std::min(chunk, count - done);
    pread_all(fds_.at(t.file), static_cast<char*>(raw.data_ptr()), static_cast<uint64_t>(n * elem),
              offset + static_cast<uint64_t>(done * elem), path, what);
    at::from_blob(out + done, {n}, at::kFloat).copy_(raw.narrow(0, 0, n));
  }
}

}  // namespace cadre
