// `cadre serve --lora name=path`: PEFT LoRA adapter folders (ckpt/peft_folder.h) served beside
// one base, as vLLM's --lora-modules: each is read whole (a few MB) into the decoder
// (Decoder::add_adapter), and a request's `model` picks it by name.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ckpt/state_dict_adapter.h"
#include "models/model.h"

namespace cadre {

// Loads each "name=path" into `decoder`; returns name -> the decoder's adapter index.
// ConfigError naming the flag's entry for a malformed entry, a name given twice or equal to
// `base_name`, or a folder that is not a LoRA adapter of this model (ckpt/peft_folder.h,
// Decoder::add_adapter say which).
std::map<std::string, int64_t> serve_load_adapters(const std::vector<std::string>& specs, const std::string& base_name,
                                                   const StateDictAdapter& names, Decoder& decoder);

}  // namespace cadre
