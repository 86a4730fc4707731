// Writer and reader for the safetensors format (Hugging Face): an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range, then the raw data.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>

namespace cadre {

// Writes tensors (float32, bfloat16, float16, int64, int32) atomically to `path`.
void safetensors_write(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Reads every tensor of a safetensors file (copies; the file is not kept open).
// SafetensorsError (safetensors_header.h) naming the file when it is damaged.
std::map<std::string, at::Tensor> safetensors_read(const std::string& path);

}  // namespace cadre
