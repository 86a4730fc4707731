// A read-only memory map of a whole file, for the shard readers: the file's bytes for as long
// as the object lives. Errors name the file and what it was opened as.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cadre {

class MappedFile {
 public:
  // `what` names the kind of file in errors ("image shard"); files shorter than `min_size`
  // are refused as truncated.
  MappedFile(const std::string& path, const char* what, size_t min_size);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&&) = delete;
  MappedFile(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace cadre
