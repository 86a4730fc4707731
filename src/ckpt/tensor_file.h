// Single-file tensor dictionaries in PyTorch's zip pickle format: Python's torch.load reads
// what tensor_file_save writes, and tensor_file_load reads Python's torch.save of a plain
// dict of tensors (two or more keys; see docs/DESIGN.md).
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>

namespace cadre {

using TensorDict = std::map<std::string, at::Tensor>;

// Writes atomically: temporary file, fsync, rename. Tensors are saved contiguous and
// cloned, so a view never drags its whole storage into the file.
void tensor_file_save(const std::string& path, const TensorDict& tensors);
TensorDict tensor_file_load(const std::string& path);

// One tensor (contiguous, its own storage) in torch.save's format: what torch.load reads.
std::string tensor_bytes(const at::Tensor& tensor);

}  // namespace cadre
