// A Hugging Face chat template (a Jinja subset) rendered exactly as transformers'
// apply_chat_template renders it. The template is untrusted input (a model folder from
// anywhere): rendering is bounded in loop iterations, call depth, value and output size and
// total work, and sees nothing but the variables it is given and Jinja's builtins.
//
//   auto t = cadre::tmpl::Template::parse(text);
//   std::string prompt = t.render(cadre::tmpl::chat_variables(messages_json, true, {{"bos_token", "<s>"}}));
#pragma once

#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "template/value.h"

namespace cadre::tmpl {

struct Program;

struct Limits {
  size_t max_template_bytes = 1 << 20;
  int max_nesting = 100;                // blocks and expressions in the source
  uint64_t max_iterations = 1000000;    // loop iterations and macro calls, summed over the render
  int max_call_depth = 50;              // nested macro calls
  int max_eval_depth = 400;             // blocks and expressions open at once, macros included (the stack)
  size_t max_output_bytes = 16u << 20;  // also the largest string or list a render may build
  uint64_t max_work_bytes = 512u << 20; // bytes of strings built or scanned over the whole render
};

struct RenderOptions {
  Limits limits;
  // What strftime_now() reads, in local time; the current time when unset (as transformers).
  std::optional<std::time_t> now;
};

class Template {
 public:
  // Throws TemplateError naming the line for a syntax error or an unsupported construct.
  static Template parse(const std::string& source, const Limits& limits = {});

  // Throws TemplateRaised for the template's own raise_exception(), TemplateError otherwise.
  std::string render(const Dict& variables, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const Program> program_;
};

// The variables transformers' apply_chat_template passes: messages (prepared as it prepares
// them: null-valued keys dropped, reasoning aliased to `thinking` and `reasoning_content`),
// tools and documents
// (None when absent), add_generation_prompt, then the extra keyword arguments (the special
// tokens bos_token, eos_token... and template options such as date_string).
Dict chat_variables(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                    const nlohmann::ordered_json& extra = nlohmann::ordered_json::object(),
                    const nlohmann::ordered_json& tools = nullptr, const nlohmann::ordered_json& documents = nullptr);

}  // namespace cadre::tmpl
