// Slice reads with checksums over the rank files of a checkpoint (pread on kept descriptors).
#include "ckpt/checkpoint_reader.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_error.h"
#include "ckpt/checksum.h"
#include "core/checked_math.h"
#include "core/file_util.h"

namespace cadre {

CheckpointReader::CheckpointReader(std::string dir) : dir_(std::move(dir)) {
  struct stat st{};
  const std::string marker_path = dir_ + "/" + kCommittedFile;
  if (::stat(marker_path.c_str(), &st) != 0)
    throw CheckpointError(str("checkpoint '", dir_, "' is incomplete: no ", kCommittedFile, " marker"));
  const std::string manifest_path = dir_ + "/" + kManifestFile;
  std::string marker, manifest;
  try {
    marker = file_read(marker_path);
    manifest = file_read(manifest_path);
  } catch (const Error& e) {
    throw CheckpointError(str("checkpoint '", dir_, "': ", e.what()));
  }
  // The pieces carry their own checksums; the manifest that places them is checked against
  // the one COMMITTED recorded, so an edited step, offset or data position is caught too.
  if (auto expected = committed_manifest_crc32c(marker, marker_path)) {
    const uint32_t actual = crc32c(manifest.data(), manifest.size());
    if (actual != *expected)
      throw CheckpointError(str("checkpoint '", dir_, "': ", kManifestFile, " does not match the checksum in ",
                                kCommittedFile, " (edited or damaged after the checkpoint was committed)"));
  }
  manifest_ = manifest_parse(manifest, manifest_path);
  try {
    open_files();
  } catch (...) {
    for (int fd : fds_) ::close(fd);
    throw;
  }
}

void CheckpointReader::open_files() {
  struct stat st{};
  for (const FileRecord& f : manifest_.files) {
    const std::string path = dir_ + "/" + f.name;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      throw CheckpointError(str("checkpoint '", dir_, "': shard file ", f.name, " of rank ", f.rank, " is missing (",
                                std::strerror(err), ")"));
    }
    fds_.push_back(fd);
    if (::fstat(fd, &st) != 0 || st.st_size != f.bytes)
      throw CheckpointError(str("checkpoint '", dir_, "': shard file ", f.name, " has ", st.st_size, " bytes, the manifest says ",
                                f.bytes, " (truncated or replaced)"));
  }
}

CheckpointReader::~CheckpointReader() {
  for (int fd : fds_) ::close(fd);
}

const TensorRecord& CheckpointReader::tensor(const std::string& name) const {
  auto it = manifest_.tensors.find(name);
  if (it == manifest_.tensors.end()) throw CheckpointError(str("checkpoint '", dir_, "' has no tensor '", name, "'"));
  return it->second;
}

void CheckpointReader::read_piece(const std::string& name, const TensorRecord& t, const PieceRecord& p,
                                  std::vector<char>& buf) const {
  const size_t n = static_cast<size_t>(p.numel() * dtype_element_size(t.dtype));
  buf.resize(n);
  const FileRecord& f = manifest_.files[p.file];
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fds_[p.file], buf.data() + done, n - done, static_cast<off_t>(p.offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      throw CheckpointError(str("checkpoint '", dir_, "': cannot read ", f.name, " bytes ", p.offset, "..", p.offset + n,
                                " (tensor '", name, "'): ", r == 0 ? "unexpected end of file" : std::strerror(errno)));
    done += static_cast<size_t>(r);
  }
  bytes_read_ += static_cast<int64_t>(n);
  if (crc32c(buf.data(), n) != p.crc32c)
    throw CheckpointError(str("checkpoint '", dir_, "': checksum mismatch in ", f.name, " bytes ", p.offset, "..",
                              p.offset + n, " (tensor '", name, "' ",
                              p.flat ? str("elements ", p.box.offsets[0], "..", p.box.offsets[0] + p.box.sizes[0])
                                     : "box " + box_text(p.box),
                              ")"));
}

void CheckpointReader::read(const std::string& name, int64_t start, int64_t count, void* out) const {
  const TensorRecord& t = tensor(name);
  const auto end = checked_add(start, count);
  if (start < 0 || count < 0 || !end || *end > t.numel())
    throw CheckpointError(str("checkpoint '", dir_, "': elements ", start, "..", start + count, " are outside tensor '",
                              name, "' of ", t.numel()));
  // A range of the flattened tensor is a range of it as one box of [numel] elements.
  read_runs(name, t, {{start, start, count}}, start, count, out);
}

void CheckpointReader::read(const std::string& name, const Box& box, int64_t start, int64_t count, void* out) const {
  const TensorRecord& t = tensor(name);
  if (!box_fits(box, t.shape) || start < 0 || count < 0 || start + count > box.numel())
    throw CheckpointError(str("checkpoint '", dir_, "': elements ", start, "..", start + count, " of box ",
                              box_text(box), " are outside tensor '", name, "' of ", t.shape.size(), " dimension(s)"));
  read_runs(name, t, box_runs(t.shape, box, start, count), start, count, out);
}

void CheckpointReader::read_runs(const std::string& name, const TensorRecord& t, const std::vector<Run>& wanted,
                                 int64_t start, int64_t count, void* out) const {
  const int64_t elem = dtype_element_size(t.dtype);
  char* dst = static_cast<char*>(out);
  std::vector<char> buf;
  int64_t covered = 0;
  for (const PieceRecord& p : t.pieces) {
    const std::vector<Run> stored = t.runs(p);
    // Only pieces holding wanted elements are read (each whole, for its checksum).
    if (runs_intersect(wanted, stored, [](int64_t, int64_t, int64_t) {}) == 0) continue;
    read_piece(name, t, p, buf);
    covered += runs_intersect(wanted, stored, [&](int64_t to, int64_t from, int64_t n) {
      std::memcpy(dst + (to - start) * elem, buf.data() + from * elem, static_cast<size_t>(n * elem));
    });
  }
  if (covered != count)
    throw CheckpointError(str("checkpoint '", dir_, "': tensor '", name, "': ", count - covered, " of the ", count,
                              " elements asked for are not stored"));
}

int64_t CheckpointReader::bytes_total() const {
  int64_t total = 0;
  for (const auto& f : manifest_.files) total += f.bytes;
  return total;
}

at::Tensor CheckpointReader::read_tensor(const std::string& name) const {
  const TensorRecord& t = tensor(name);
  at::ScalarType type = t.dtype == "float32" ? at::kFloat : t.dtype == "bfloat16" ? at::kBFloat16
                      : t.dtype == "float16" ? at::kHalf : t.dtype == "int64" ? at::kLong
                      : t.dtype == "int32" ? at::kInt : t.dtype == "float64" ? at::kDouble : at::kByte;
  at::Tensor out = at::empty(t.shape, type);
  read(name, 0, t.numel(), out.data_ptr());
  return out;
}

std::vector<std::string> CheckpointReader::verify(int64_t* bytes_read) const {
  std::vector<std::string> problems;
  std::vector<char> buf;
  int64_t bytes = 0;
  for (const auto& [name, t] : manifest_.tensors) {
    for (const PieceRecord& p : t.pieces) {
      try {
        read_piece(name, t, p, buf);
        bytes += static_cast<int64_t>(buf.size());
      } catch (const CheckpointError& e) {
        problems.push_back(e.what());
      }
    }
  }
  if (bytes_read) *bytes_read = bytes;
  return problems;
}

}  // namespace cadre
