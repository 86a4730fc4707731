// Finding a model's chat template and rendering conversations with it.
#include "chat/chat_template.h"

#include <filesystem>

#include "core/error.h"
#include "core/file_util.h"
#include "data/hf_tokenizer_config.h"
#include "chat/builtin_chat_templates.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

struct TemplateSource {
  std::string name, text;
};

// transformers 5 writes chat_template.jinja; earlier versions put the template in
// tokenizer_config.json. Either beside the tokenizer file; {"", ""} for none.
TemplateSource shipped_template(const Tokenizer& tokenizer) {
  const fs::path dir = fs::path(tokenizer.ids_file()).parent_path();
  const fs::path jinja = dir / "chat_template.jinja", config = dir / "tokenizer_config.json";
  if (fs::is_regular_file(jinja)) return {jinja.string(), file_read(jinja.string())};
  if (!fs::is_regular_file(config)) return {};
  const std::string text = hf_tokenizer_config_parse(file_read(config.string()), config.string()).chat_template;
  return text.empty() ? TemplateSource{} : TemplateSource{config.string(), text};
}

TemplateSource template_source(const std::string& spec, const Tokenizer& tokenizer) {
  if (spec.empty())
    if (TemplateSource shipped = shipped_template(tokenizer); !shipped.text.empty()) return shipped;
  const std::string name = spec.empty() ? "llama2" : spec;
  for (const auto& [builtin, text] : builtin_chat_templates())
    if (builtin == name) return {builtin, text};
  CADRE_CONFIG_CHECK(fs::is_regular_file(name), "--chat-template '", name,
                     "' is neither llama2, chatml nor a Jinja template file");
  return {name, file_read(name)};
}

}  // namespace

ChatTemplate ChatTemplate::load(const std::string& spec, const Tokenizer& tokenizer) {
  const TemplateSource source = template_source(spec, tokenizer);
  ChatTemplate t;
  t.name_ = source.name;
  try {
    t.template_ = tmpl::Template::parse(source.text);
  } catch (const tmpl::TemplateError& e) {
    throw ConfigError(str("chat template '", source.name, "': ", e.what()));
  }
  return t;
}

std::string ChatTemplate::render_text(const std::vector<ChatMessage>& messages, const Tokenizer& tokenizer,
                                      bool add_generation_prompt) const {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  const nlohmann::ordered_json special = {{"bos_token", tokenizer.bos_token()}, {"eos_token", tokenizer.eos_token()}};
  try {
    return template_.render(tmpl::chat_variables(list, add_generation_prompt, special));
  } catch (const tmpl::TemplateRaised& e) {
    throw ChatRefused(e.what());
  } catch (const tmpl::TemplateError& e) {
    throw ChatRefused(str("the model's chat template (", name_, ") cannot render these messages: ", e.what()));
  }
}

std::vector<int> ChatTemplate::render(const std::vector<ChatMessage>& messages, const Tokenizer& tokenizer) const {
  std::vector<int> ids = tokenizer.encode_rendered(render_text(messages, tokenizer));
  if (ids.empty()) throw ChatRefused(str("the chat template (", name_, ") renders these messages to no prompt"));
  return ids;
}

}  // namespace cadre
