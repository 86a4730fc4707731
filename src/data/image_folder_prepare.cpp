// ImageFolder -> encoded image shards: scan, check by decoding (in parallel), shuffle with the
// seed, split, write shards of about shard_mb each.
#include "data/image_folder_prepare.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/file_util.h"
#include "core/log.h"
#include "core/progress.h"
#include "data/encoded_shard.h"
#include "data/image_codec.h"
#include "data/permutation.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

struct FolderFile {
  std::string path;
  uint32_t label = 0;
  uint32_t height = 0, width = 0;
  std::string problem;  // why it cannot be used; empty when it decodes
};

bool has_image_extension(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

std::vector<std::string> sorted_entries(const std::string& dir, bool directories) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() == directories) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Classes are the sub-directories, sorted by name; every file in them must be an image, and
// every class must hold one (ConfigError naming the class or the files otherwise).
std::vector<FolderFile> scan(const std::string& root, std::vector<std::string>& classes) {
  classes = sorted_entries(root, true);
  CADRE_CONFIG_CHECK(!classes.empty(), "--input '", root, "' has no class sub-directories");
  std::vector<FolderFile> files;
  std::vector<std::string> not_images;
  for (size_t c = 0; c < classes.size(); ++c) {
    const std::string dir = root + "/" + classes[c];
    size_t found = 0;
    for (const auto& name : sorted_entries(dir, false)) {
      if (!has_image_extension(name)) {
        not_images.push_back(dir + "/" + name);
        continue;
      }
      files.push_back({dir + "/" + name, static_cast<uint32_t>(c), 0, 0, ""});
      ++found;
    }
    CADRE_CONFIG_CHECK(found > 0, "class '", classes[c], "' (", dir, ") holds no .jpg, .jpeg or .png file");
  }
  if (!not_images.empty()) {
    std::string list;
    for (size_t i = 0; i < std::min<size_t>(not_images.size(), 10); ++i) list += "\n  " + not_images[i];
    throw ConfigError(str(not_images.size(), " file(s) under '", root, "' are not .jpg, .jpeg or .png images (move them out):",
                          list, not_images.size() > 10 ? "\n  ..." : ""));
  }
  return files;
}

// Decodes every file (JPEGs at 1/8: the entropy decoding, where corruption shows, is whole).
void check_files(std::vector<FolderFile>& files) {
  Progress progress("check images", static_cast<int64_t>(files.size()), "img");
  std::atomic<size_t> next{0}, done{0};
  std::mutex progress_mutex;
  auto work = [&] {
    for (size_t i; (i = next++) < files.size();) {
      FolderFile& f = files[i];
      try {
        const std::string bytes = file_read(f.path);
        const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
        const ImageInfo info = image_probe(data, bytes.size());
        if (info.format == ImageFormat::Unknown) {
          f.problem = "neither a readable JPEG nor a PNG";
        } else {
          image_decode(data, bytes.size(), info.format == ImageFormat::Jpeg ? 8 : 1, f.path);
          f.height = static_cast<uint32_t>(info.height);
          f.width = static_cast<uint32_t>(info.width);
        }
      } catch (const Error& e) {
        f.problem = e.what();
      }
      const size_t d = ++done;
      if (d % 64 == 0 || d == files.size()) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        progress.update(static_cast<int64_t>(d));
      }
    }
  };
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  progress.finish();
}

std::vector<ShardEntry> write_split(const std::string& out, const std::string& split, const std::vector<FolderFile>& files,
                                    const std::vector<size_t>& order, int64_t shard_bytes) {
  std::vector<ShardEntry> entries;
  std::vector<EncodedImage> part;
  uint64_t part_bytes = 0;
  Progress progress("write " + split, static_cast<int64_t>(order.size()), "img");
  auto flush = [&] {
    char name[40];
    std::snprintf(name, sizeof name, "%s_%05zu.enc", split.c_str(), entries.size());
    const uint64_t sum = encoded_shard_write(out + "/" + name, part);
    entries.push_back({name, part.size(), sum});
    part.clear();
    part_bytes = 0;
  };
  for (size_t k = 0; k < order.size(); ++k) {
    const FolderFile& f = files[order[k]];
    part.push_back({f.label, f.height, f.width, file_read(f.path)});
    part_bytes += part.back().bytes.size();
    if (part_bytes >= static_cast<uint64_t>(shard_bytes)) flush();
    progress.update(static_cast<int64_t>(k + 1));
  }
  if (!part.empty()) flush();
  progress.finish();
  return entries;
}

}  // namespace

bool is_image_folder(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory()) return true;
  return false;
}

DatasetManifest image_folder_prepare(const ImagePrepareOptions& o) {
  CADRE_CONFIG_CHECK(o.inputs.size() == 1, "an ImageFolder is one --input directory, got ", o.inputs.size());
  CADRE_CONFIG_CHECK(o.shard_mb > 0, "--shard-mb must be positive");
  const std::string& root = o.inputs[0];
  std::vector<std::string> classes;
  std::vector<FolderFile> files = scan(root, classes);
  check_files(files);
  std::vector<size_t> good;
  std::vector<const FolderFile*> bad;
  for (size_t i = 0; i < files.size(); ++i) {
    if (files[i].problem.empty()) good.push_back(i);
    else bad.push_back(&files[i]);
  }
  if (!bad.empty()) {
    std::string list;
    for (const FolderFile* f : bad) list += "\n  " + f->path + ": " + f->problem;
    log::warn(str("data: skipped ", bad.size(), " corrupt or unreadable image(s) of ", files.size(), ":", list));
  }
  CADRE_CONFIG_CHECK(good.size() >= 2, "--input '", root, "': ", good.size(), " readable image(s); need at least 2");
  const std::vector<uint64_t> perm = permutation(good.size(), static_cast<uint64_t>(o.seed), 0);
  const size_t n = good.size();
  const size_t n_val = std::max<size_t>(1, static_cast<size_t>(std::llround(o.val_fraction * double(n))));
  CADRE_CONFIG_CHECK(n_val < n, "--val-fraction leaves no training images");
  std::vector<size_t> val, train;
  for (size_t k = 0; k < n; ++k) (k < n_val ? val : train).push_back(good[perm[k]]);

  fs::create_directories(o.out);
  DatasetManifest m;
  m.kind = "encoded_images";
  m.channels = 3;
  m.num_classes = static_cast<int64_t>(classes.size());
  m.classes = classes;
  m.skipped = bad.size();
  const int64_t shard_bytes = o.shard_mb << 20;
  m.val = write_split(o.out, "val", files, val, shard_bytes);
  m.train = write_split(o.out, "train", files, train, shard_bytes);
  manifest_write(o.out, m);
  log::info(str("data: ", n, " images (", classes.size(), " classes) from ", root, ": ", train.size(), " train, ", n_val,
                " validation in ", m.train.size() + m.val.size(), " shard(s); ", bad.size(), " skipped as corrupt"));
  return m;
}

}  // namespace cadre
