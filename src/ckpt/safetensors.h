// Writer and reader for the safetensors format (Hugging Face): an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range, then the raw data.
// The writer streams: the header first, then each tensor's bytes as they are produced, so a
// file of many GB never sits in memory.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/file_util.h"

namespace cadre {

// A tensor a safetensors file will hold (float32, bfloat16, float16, int64, int32).
struct SafetensorsTensor {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  uint64_t bytes() const;
};

// Writes one file: the header from the tensors' list, then their data in that order through
// write(), published atomically by finish() once every byte came (Error otherwise).
class SafetensorsWriter {
 public:
  SafetensorsWriter(std::string path, const std::vector<SafetensorsTensor>& tensors,
                    const std::map<std::string, std::string>& metadata);
  void write(const void* data, uint64_t bytes);
  void finish();

 private:
  AtomicFile file_;
  uint64_t expected_ = 0, written_ = 0;
};

// Writes tensors atomically to `path` (one call; each tensor copied out once).
void safetensors_write(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The safetensors code of a dtype ("F32", "BF16", ...); Error for one the writer does not write.
const char* safetensors_dtype_code(at::ScalarType dtype);

// Reads every tensor of a safetensors file (copies; the file is not kept open).
// SafetensorsError (safetensors_header.h) naming the file when it is damaged.
std::map<std::string, at::Tensor> safetensors_read(const std::string& path);

}  // namespace cadre
