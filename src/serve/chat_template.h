// Chat messages -> prompt tokens through the model's own Jinja chat template, rendered as
// transformers' apply_chat_template renders it (template/template.h) and encoded with the
// template's special tokens as their ids (Tokenizer::encode_rendered). `cadre serve`'s chat
// endpoint and `cadre generate --chat` both render with this.
#pragma once

#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "serve/openai_request.h"
#include "template/template.h"

namespace cadre {

class ChatTemplate {
 public:
  // `spec`: a Jinja template file, or "llama2" / "chatml" (built in, builtin_chat_templates.h).
  // Empty: the template the tokenizer's folder ships (chat_template.jinja, else
  // tokenizer_config.json's chat_template), else llama2. ConfigError naming the file and line
  // for a template that does not parse or uses what the interpreter does not support.
  static ChatTemplate load(const std::string& spec, const Tokenizer& tokenizer);

  // The prompt as text, with a generation prompt for the assistant's answer. ApiError(400)
  // when the template refuses the conversation (its raise_exception message, e.g. Llama 2's
  // "Conversation roles must alternate ...") or the render exceeds the template limits.
  std::string render_text(const std::vector<ChatMessage>& messages, const Tokenizer& tokenizer) const;
  // ApiError(400) also when the render leaves no token (nothing for the model to answer).
  std::vector<int> render(const std::vector<ChatMessage>& messages, const Tokenizer& tokenizer) const;
  const std::string& name() const { return name_; }  // "llama2", or the file it came from

 private:
  tmpl::Template template_;
  std::string name_;
};

}  // namespace cadre
