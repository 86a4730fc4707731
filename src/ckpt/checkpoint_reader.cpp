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

namespace {

// At most this many bytes of one piece are read (and held) at once: large enough for the disk,
// small beside a rank's shard (a load-only run's peak is its shard and this).
constexpr int64_t kMaxReadBytes = int64_t(16) << 20;

}  // namespace

int64_t CheckpointReader::block_bytes(const TensorRecord& t, const PieceRecord& p) const {
  return p.block_crc32c.empty() ? p.numel() * dtype_element_size(t.dtype) : manifest_.checksum_block_bytes;
}

int64_t CheckpointReader::read_blocks(const std::string& name, const TensorRecord& t, const PieceRecord& p,
                                      int64_t first, int64_t last, std::vector<char>& buf) const {
  const int64_t piece = p.numel() * dtype_element_size(t.dtype), block = block_bytes(t, p);
  const int64_t begin = first * block, end = std::min(piece, (last + 1) * block);
  const size_t n = static_cast<size_t>(end - begin);
  buf.resize(n);
  const FileRecord& f = manifest_.files[p.file];
  const int64_t at = p.offset + begin;
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fds_[p.file], buf.data() + done, n - done, static_cast<off_t>(at + int64_t(done)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      throw CheckpointError(str("checkpoint '", dir_, "': cannot read ", f.name, " bytes ", at, "..", at + int64_t(n),
                                " (tensor '", name, "'): ", r == 0 ? "unexpected end of file" : std::strerror(errno)));
    done += static_cast<size_t>(r);
  }
  bytes_read_ += static_cast<int64_t>(n);
  for (int64_t b = first; b <= last; ++b) {
    const int64_t lo = b * block - begin, hi = std::min(end, (b + 1) * block) - begin;
    const uint32_t want = p.block_crc32c.empty() ? p.crc32c : p.block_crc32c[static_cast<size_t>(b)];
    if (crc32c(buf.data() + lo, static_cast<size_t>(hi - lo)) == want) continue;
    const std::string which = p.flat ? str("elements ", p.box.offsets[0], "..", p.box.offsets[0] + p.box.sizes[0])
                                     : "box " + box_text(p.box);
    const std::string block_of =
        p.block_crc32c.empty() ? "" : str(", block ", b + 1, " of ", p.block_crc32c.size());
    throw CheckpointError(str("checkpoint '", dir_, "': checksum mismatch in ", f.name, " bytes ", p.offset + b * block,
                              "..", p.offset + begin + hi, " (tensor '", name, "' ", which, block_of, ")"));
  }
  return begin;
}

int64_t CheckpointReader::copy_from_piece(const std::string& name, const TensorRecord& t, const PieceRecord& p,
                                          std::vector<Copy>& copies, int64_t start, char* out) const {
  const int64_t elem = dtype_element_size(t.dtype), block = block_bytes(t, p), block_elems = block / elem;
  const int64_t blocks_per_read = std::max<int64_t>(1, kMaxReadBytes / block);
  std::sort(copies.begin(), copies.end(), [](const Copy& a, const Copy& b) { return a.from < b.from; });
  std::vector<char> buf;
  int64_t copied = 0, next_block = 0;
  size_t next = 0;  // the first copy not yet done
  while (next < copies.size()) {
    // The blocks holding the next copy's remaining elements, and those of the copies after it
    // while their blocks follow on (at most blocks_per_read): one read.
    const int64_t first = std::max(next_block, copies[next].from / block_elems);
    int64_t last = first;
    for (size_t i = next; i < copies.size() && copies[i].from / block_elems <= last + 1; ++i)
      last = std::max(last, (copies[i].from + copies[i].count - 1) / block_elems);
    last = std::min(last, first + blocks_per_read - 1);
    const int64_t at = read_blocks(name, t, p, first, last, buf) / elem;
    const int64_t end = std::min(p.numel(), (last + 1) * block_elems);
    for (size_t i = next; i < copies.size() && copies[i].from < end; ++i) {
      const Copy& c = copies[i];
      const int64_t lo = std::max(c.from, at), hi = std::min(c.from + c.count, end);
      if (lo >= hi) continue;
      std::memcpy(out + (c.to + (lo - c.from) - start) * elem, buf.data() + (lo - at) * elem,
                  static_cast<size_t>((hi - lo) * elem));
      copied += hi - lo;
    }
    while (next < copies.size() && copies[next].from + copies[next].count <= end) ++next;
    next_block = last + 1;
  }
  return copied;
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
  int64_t covered = 0;
  std::vector<Copy> copies;
  for (const PieceRecord& p : t.pieces) {
    copies.clear();
    runs_intersect(wanted, t.runs(p), [&](int64_t to, int64_t from, int64_t n) { copies.push_back({to, from, n}); });
    if (!copies.empty()) covered += copy_from_piece(name, t, p, copies, start, static_cast<char*>(out));
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

at::ScalarType checkpoint_scalar_type(const std::string& dtype) {
  return dtype == "float32" ? at::kFloat : dtype == "bfloat16" ? at::kBFloat16
       : dtype == "float16" ? at::kHalf : dtype == "int64" ? at::kLong
       : dtype == "int32" ? at::kInt : dtype == "float64" ? at::kDouble : at::kByte;
}

at::Tensor CheckpointReader::read_tensor(const std::string& name) const {
  const TensorRecord& t = tensor(name);
  at::Tensor out = at::empty(t.shape, checkpoint_scalar_type(t.dtype));
  read(name, 0, t.numel(), out.data_ptr());
  return out;
}

std::vector<std::string> CheckpointReader::verify(int64_t* bytes_read) const {
  std::vector<std::string> problems;
  std::vector<char> buf;
  int64_t bytes = 0;
  for (const auto& [name, t] : manifest_.tensors) {
    for (const PieceRecord& p : t.pieces) {
      // Every block, in reads of at most kMaxReadBytes; the piece's own checksum over them all
      // as well (a writer whose blocks and whole disagree is caught here).
      const int64_t blocks = p.block_crc32c.empty() ? 1 : static_cast<int64_t>(p.block_crc32c.size());
      const int64_t per_read = std::max<int64_t>(1, kMaxReadBytes / std::max<int64_t>(1, block_bytes(t, p)));
      uint32_t whole = 0;
      try {
        for (int64_t b = 0; b < blocks; b += per_read) {
          read_blocks(name, t, p, b, std::min(blocks, b + per_read) - 1, buf);
          whole = crc32c(buf.data(), buf.size(), whole);
          bytes += static_cast<int64_t>(buf.size());
        }
        if (whole != p.crc32c)
          problems.push_back(str("checkpoint '", dir_, "': tensor '", name, "' ", box_text(p.box), " in ",
                                 manifest_.files[p.file].name, ": its blocks match their checksums but not the piece's"));
      } catch (const CheckpointError& e) {
        problems.push_back(e.what());
      }
    }
  }
  if (bytes_read) *bytes_read = bytes;
  return problems;
}

}  // namespace cadre
