// Tensor dictionary files through libtorch's pickler (the one TU that includes it).
#include "train/tensor_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "core/error.h"

namespace cadre {

void tensor_file_save(const std::string& path, const TensorDict& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, t] : tensors) dict.insert(name, t.detach().contiguous().clone());
  std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(dict));
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CADRE_CHECK(fd >= 0, "cannot create '", tmp, "': ", std::strerror(errno));
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t w = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(str("cannot write '", tmp, "': ", std::strerror(err)));
    }
    off += static_cast<size_t>(w);
  }
  bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced) {
    ::unlink(tmp.c_str());
    throw Error(str("cannot fsync '", tmp, "': ", std::strerror(errno)));
  }
  CADRE_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename '", tmp, "' to '", path, "'");
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
