// Tensor dictionary files through libtorch's pickler (the one TU that includes it).
#include "ckpt/tensor_file.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/file_util.h"

namespace cadre {

// torch::jit::pickle_save's container (a torch.save zip: data.pkl and data/<n>), but with the
// dict pickled as a plain dict. pickle_save tags typed containers with
// torch.jit._pickle.restore_type_tag, a global that torch.load's weights_only mode (the default
// since PyTorch 2.6) refuses, so `torch.load("model.pt")` failed on every current PyTorch.
void tensor_file_save(const std::string& path, const TensorDict& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, t] : tensors) dict.insert(name, t.detach().contiguous().clone());
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&](const char* buf, size_t size) { pickle.insert(pickle.end(), buf, buf + size); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
                              /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();
  std::string bytes;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  file_write_atomic(path, bytes);
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
