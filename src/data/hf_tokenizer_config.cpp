// Reading tokenizer_config.json and the eos_token_id of generation_config.json / config.json.
#include "data/hf_tokenizer_config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/hf_json.h"

namespace cadre {
namespace {

using detail::JsonField;

nlohmann::json parse_object(const std::string& text, const std::string& name) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  CADRE_CONFIG_CHECK(!j.is_discarded(), name, ": not valid JSON");
  CADRE_CONFIG_CHECK(j.is_object(), name, ": not a JSON object");
  return j;
}

std::string special_token(const JsonField& f) {
  if (f.is_null()) return "";
  if (f.value().is_object()) return f["content"].str();
  return f.str();
}

std::string chat_template(const JsonField& f) {
  if (f.is_null()) return "";
  if (!f.value().is_array()) return f.str();
  // [{"name": "default", "template": ...}, {"name": "tool_use", ...}]: the default one.
  for (size_t i = 0; i < f.size(); ++i)
    if (f.at(i)["name"].str() == "default") return f.at(i)["template"].str();
  f.fail("a list of templates without one named 'default'");
}

}  // namespace

HfTokenizerConfig hf_tokenizer_config_parse(const std::string& text, const std::string& name) {
  const nlohmann::json j = parse_object(text, name);
  const JsonField root(j, name, "");
  HfTokenizerConfig c;
  c.bos_token = special_token(root["bos_token"]);
  c.eos_token = special_token(root["eos_token"]);
  c.chat_template = chat_template(root["chat_template"]);
  return c;
}

std::vector<int> hf_eos_token_ids_parse(const std::string& text, const std::string& name, int64_t vocab_size) {
  const nlohmann::json j = parse_object(text, name);
  const JsonField f = JsonField(j, name, "")["eos_token_id"];
  std::vector<int> ids;
  auto take = [&](const JsonField& id) {
    const int64_t v = id.integer();
    if (v < 0 || v >= vocab_size) id.fail("token id " + std::to_string(v) + " is outside the vocabulary of " +
                                          std::to_string(vocab_size));
    ids.push_back(static_cast<int>(v));
  };
  if (f.is_null()) return ids;
  if (f.value().is_array())
    for (size_t i = 0; i < f.size(); ++i) take(f.at(i));
  else
    take(f);
  return ids;
}

}  // namespace cadre
