// How a model's parameters map to an external format (Hugging Face): tensor names both ways,
// which tensors the format keeps, its config file and extra files. Each model with such a
// format implements it (models/llama/hf_adapter.h); export and import stay model-agnostic.
#pragma once

#include <string>

namespace cadre {

class StateDictAdapter {
 public:
  virtual ~StateDictAdapter() = default;
  // Cadre parameter name -> the format's name; "" when the format leaves it out (a tied
  // head). Error when the name is unknown.
  virtual std::string external_name(const std::string& name) const = 0;
  // The format's name -> Cadre's; "" when Cadre has no such tensor.
  virtual std::string internal_name(const std::string& external) const = 0;
  // The format's config file (config.json for Hugging Face): the model's description; the
  // export adds the token ids and dtype.
  virtual std::string config_json() const = 0;
  // Writes what else the folder needs (tokenizer files) into `dir`; `tokenizer` may be "".
  virtual void write_extras(const std::string& dir, const std::string& tokenizer) const = 0;
};

}  // namespace cadre
