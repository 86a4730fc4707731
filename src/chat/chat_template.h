// Chat messages -> prompt tokens through the model's own Jinja chat template, rendered as
// transformers' apply_chat_template renders it (template/template.h) and encoded with the
// template's special tokens as their ids (Tokenizer::encode_rendered). `cadre serve`'s chat
// endpoint and `cadre generate --chat` both render with this; it knows nothing of either.
#pragma once

#include <string>
#include <vector>

#include "chat/chat_message.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "template/template.h"

namespace cadre {

// A conversation the template will not render: what() is the template's own message (its
// raise_exception, as transformers reports it) or what went wrong rendering it. Bad input from
// whoever sent the conversation (serve answers 400).
class ChatRefused : public Error {
 public:
  using Error::Error;
};

class ChatTemplate {
 public:
  // `spec`: a Jinja template file, or "llama2" / "chatml" (built in, builtin_chat_templates.h).
  // Empty: the template the tokenizer's folder ships (chat_template.jinja, else
  // tokenizer_config.json's chat_template), else llama2. ConfigError naming the file and line
  // for a template that does not parse or uses what the interpreter does not support.
  static ChatTemplate load(const std::string& spec, const Tokenizer& tokenizer);

  // The conversation as text, with the generation prompt for the assistant's answer when asked.
  // ChatRefused when the template refuses it (e.g. Llama 2's "Conversation roles must
  // alternate ...") or the render exceeds the template limits.
  std::string render_text(const std::vector<ChatMessage>& messages, const Tokenizer& tokenizer,
                          bool add_generation_prompt = true) const;
  // A prompt for the assistant's answer, as ids; ChatRefused also when it renders to no token.
  std::vector<int> render(const std::vector<ChatMessage>& messages, const Tokenizer& tokenizer) const;
  const std::string& name() const { return name_; }  // "llama2", or the file it came from

 private:
  tmpl::Template template_;
  std::string name_;
};

}  // namespace cadre
