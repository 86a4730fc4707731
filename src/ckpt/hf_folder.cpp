// Hugging Face folder reading: safetensors headers checked against their files, tensors read
// with pread and widened to float32.
#include "ckpt/hf_folder.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kSingleFile = "model.safetensors";
// A header bigger than this is damage, not a model (real ones are a few hundred KB).
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CADRE_CONFIG_CHECK(in, "cannot read '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every integer element size safetensors defines, so that sizes can be checked for tensors
// Cadre never converts.
int64_t any_dtype_size(const std::string& dtype) {
  if (int64_t n = hf_float_dtype_size(dtype)) return n;
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
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
  CADRE_CONFIG_CHECK(size >= 8, "safetensors file '", path, "' is truncated: ", size,
                     " bytes, the header length alone takes 8");
  uint64_t n = 0;
  pread_all(fd, reinterpret_cast<char*>(&n), 8, 0, path, "the header length");  // little-endian host
  CADRE_CONFIG_CHECK(n <= size - 8, "safetensors file '", path, "': its header claims ", n,
                     " bytes but the file has only ", size - 8, " after the length (truncated or not safetensors)");
  CADRE_CONFIG_CHECK(n <= kMaxHeaderBytes, "safetensors file '", path, "': a header of ", n, " bytes is not plausible");
  std::string text(n, '\0');
  pread_all(fd, text.data(), n, 8, path, "the header");
  nlohmann::json header = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  CADRE_CONFIG_CHECK(header.is_object(), "safetensors file '", path, "': the header is not a JSON object");
  const uint64_t data = 8 + n;
  for (const auto& [tname, info] : header.items()) {
    if (tname == "__metadata__") continue;
    HfTensor t;
    t.name = tname;
    t.file = name;
    const std::string where = str("safetensors file '", path, "': tensor '", tname, "'");
    try {
      t.dtype = info.at("dtype").get<std::string>();
      t.shape = info.at("shape").get<std::vector<int64_t>>();
      auto range = info.at("data_offsets").get<std::vector<uint64_t>>();
      CADRE_CONFIG_CHECK(range.size() == 2, where, ": data_offsets must be [begin, end]");
      t.begin = range[0];
      t.end = range[1];
    } catch (const nlohmann::json::exception& e) {
      throw ConfigError(str(where, ": malformed header entry (", e.what(), ")"));
    }
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      CADRE_CONFIG_CHECK(d >= 0 && !__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel), where,
                         ": shape has a negative or overflowing dimension");
    }
    CADRE_CONFIG_CHECK(t.begin <= t.end && t.end <= size - data, where, " claims bytes ", t.begin, "..", t.end,
                       " of the data section, but the file holds only ", size - data, " (truncated?)");
    if (const int64_t elem = any_dtype_size(t.dtype)) {
      uint64_t bytes = 0;
      CADRE_CONFIG_CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(elem), &bytes) && bytes == t.end - t.begin,
                         where, ": ", t.end - t.begin, " bytes do not hold its shape of ", numel, " ", t.dtype,
                         " elements");
    }
    t.begin += data;
    t.end += data;
    auto [it, fresh] = tensors_.emplace(tname, t);
    CADRE_CONFIG_CHECK(fresh, "tensor '", tname, "' is in both '", it->second.file, "' and '", name, "' of '", dir_, "'");
  }
}

void HfFolder::read_float32(const HfTensor& t, float* out) const {
  const int64_t elem = hf_float_dtype_size(t.dtype);
  CADRE_CONFIG_CHECK(elem > 0, "tensor '", t.name, "' in '", dir_, "/", t.file, "' has dtype ", t.dtype,
                     "; Cadre reads F32, BF16 and F16");
  const uint64_t bytes = t.end - t.begin;
  const int64_t numel = static_cast<int64_t>(bytes / static_cast<uint64_t>(elem));
  const std::string path = dir_ + "/" + t.file;
  const std::string what = str("tensor '", t.name, "'");
  if (t.dtype == "F32") {
    pread_all(fds_.at(t.file), reinterpret_cast<char*>(out), bytes, t.begin, path, what);
    return;
  }
  at::Tensor raw = at::empty({numel}, t.dtype == "BF16" ? at::kBFloat16 : at::kHalf);
  pread_all(fds_.at(t.file), static_cast<char*>(raw.data_ptr()), bytes, t.begin, path, what);
  at::from_blob(out, {numel}, at::kFloat).copy_(raw);
}

}  // namespace cadre
