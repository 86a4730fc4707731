// A Hugging Face model folder opened for reading, tensor by tensor: config.json, and the
// safetensors files holding the weights (one model.safetensors, or several listed by
// model.safetensors.index.json). Only the headers are read when it opens; each tensor's bytes
// (or any range of its elements) are read when asked for, converted to float32, so no more than
// one tensor is in memory.
// Every problem (a missing file, a header running past its file, a tensor outside its file, a
// dtype Cadre does not read) is a ConfigError naming the file and the tensor.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cadre {

struct HfTensor {
  std::string name;
  std::string file;            // relative to the folder
  std::string dtype;           // safetensors code: "F32", "BF16", "F16", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0; // byte range within the file
};

class HfFolder {
 public:
  explicit HfFolder(std::string dir);
  // A folder of another kind with one weights file: `config_file` beside `weights_file` (a PEFT
  // adapter: adapter_config.json and adapter_model.safetensors).
  HfFolder(std::string dir, const std::string& config_file, const std::string& weights_file);
  ~HfFolder();
  HfFolder(const HfFolder&) = delete;
  HfFolder& operator=(const HfFolder&) = delete;

  const std::string& dir() const { return dir_; }
  const std::string& config_json() const { return config_json_; }
  const std::map<std::string, HfTensor>& tensors() const { return tensors_; }
  const std::vector<std::string>& files() const { return files_; }

  // Reads the tensor into `out` (its element count of floats), converting F32/BF16/F16.
  void read_float32(const HfTensor& tensor, float* out) const;
  // Elements [start, start + count) of the tensor (flattened), with one positional read of
  // exactly their bytes.
  void read_float32_range(const HfTensor& tensor, int64_t start, int64_t count, float* out) const;
  // Tensor bytes read so far (the headers not counted).
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  void open_file(const std::string& name);

  std::string dir_;
  std::string config_json_;
  std::vector<std::string> files_;
  std::map<std::string, int> fds_;
  std::map<std::string, HfTensor> tensors_;
  mutable std::atomic<uint64_t> bytes_read_{0};
};

// True when `dir` looks like a Hugging Face model folder (config.json beside safetensors).
bool hf_folder_detect(const std::string& dir);

// Bytes per element of the float dtypes the folder reader converts; 0 for any other code.
int64_t hf_float_dtype_size(const std::string& dtype);

}  // namespace cadre
