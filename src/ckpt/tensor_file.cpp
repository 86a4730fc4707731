// Tensor dictionary files through libtorch's pickler (the one TU that includes it).
#include "ckpt/tensor_file.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/file_util.h"

namespace cadre {

void tensor_file_save(const std::string& path, const TensorDict& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, t] : tensors) dict.insert(name, t.detach().contiguous().clone());
  std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(dict));
  file_write_atomic(path, std::string(bytes.begin(), bytes.end()));
}

std::string tensor_bytes(const at::Tensor& tensor) {
  std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(tensor.detach().contiguous().clone()));
  return std::string(bytes.begin(), bytes.end());
}

TensorDict tensor_file_load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CADRE_CHECK(in, "cannot open tensor file '", path, "'");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(bytes);
  } catch (const std::exception& e) {
    throw Error(str("tensor file '", path, "' cannot be read: ", e.what()));
  }
  CADRE_CHECK(value.isGenericDict(), "tensor file '", path, "' does not hold a dict");
  TensorDict out;
  for (const auto& item : value.toGenericDict()) {
    CADRE_CHECK(item.key().isString() && item.value().isTensor(), "tensor file '", path,
                "': every entry must map a string to a tensor");
    out[item.key().toStringRef()] = item.value().toTensor();
  }
  return out;
}

}  // namespace cadre
