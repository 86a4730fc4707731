// Chat templates for models that ship none, by name: "llama2" (Llama 2 chat's own template) and
// "chatml". Their texts are third_party/chat_templates/'s files, built in.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace cadre {

const std::vector<std::pair<std::string, std::string>>& builtin_chat_templates();  // {name, Jinja text}

}  // namespace cadre
