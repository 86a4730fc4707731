// The public entry points: parse once, render with variables and limits.
#include "template/template.h"

#include "template/evaluator.h"
#include "template/json.h"
#include "template/parser.h"

namespace cadre::tmpl {

Template Template::parse(const std::string& source, const Limits& limits) {
  if (source.size() > limits.max_template_bytes)
    throw TemplateError("template of " + std::to_string(source.size()) + " bytes exceeds the limit of " +
                            std::to_string(limits.max_template_bytes),
                        0);
  Template t;
  t.program_ = tmpl::parse(source, limits.max_nesting);
  return t;
}

std::string Template::render(const Dict& variables, const RenderOptions& options) const {
  const std::time_t now = options.now ? *options.now : std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  Evaluator ev(options.limits, local);
  return ev.render(*program_, variables);
}

namespace {

// apply_chat_template's message preparation: keys whose value is None are dropped, and a
// message's reasoning under any of its names is also passed as `thinking` (first) and
// `reasoning_content` (_normalize_chat_messages and _alias_reasoning_fields in transformers).
nlohmann::ordered_json prepare_messages(const nlohmann::ordered_json& messages) {
  nlohmann::ordered_json out = messages;
  if (!out.is_array()) return out;
  for (auto& m : out) {
    if (!m.is_object()) continue;
    for (auto it = m.begin(); it != m.end();) it = it.value().is_null() ? m.erase(it) : std::next(it);
    const nlohmann::ordered_json* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"})
      if (m.contains(key)) {
        reasoning = &m[key];
        break;
      }
    if (!reasoning) continue;
    nlohmann::ordered_json aliased = nlohmann::ordered_json::object();
    aliased["thinking"] = *reasoning;
    for (auto it = m.begin(); it != m.end(); ++it) aliased[it.key()] = it.value();
    aliased["reasoning_content"] = *reasoning;
    m = std::move(aliased);
  }
  return out;
}

}  // namespace

Dict chat_variables(const nlohmann::ordered_json& messages, bool add_generation_prompt, const nlohmann::ordered_json& extra,
                    const nlohmann::ordered_json& tools, const nlohmann::ordered_json& documents) {
  Dict d;
  d.set("messages", from_json(prepare_messages(messages)));
  d.set("tools", from_json(tools));
  d.set("documents", from_json(documents));
  d.set("add_generation_prompt", Value::boolean(add_generation_prompt));
  for (auto it = extra.begin(); it != extra.end(); ++it) d.set(it.key(), from_json(it.value()));
  return d;
}

}  // namespace cadre::tmpl
