// Chat messages -> prompt tokens. The default is Llama 2's chat format (what its
// tokenizer_config.json's template renders): the system message inside the first user turn,
//   <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] {user} [/INST]
// with <s> and </s> the BOS and EOS token ids, not text. `chatml` and a YAML file with
// `system`, `user`, `assistant` and `generation` strings ({content} marks the message; <s>
// and </s> are the special tokens) give other formats.
#pragma once

#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "serve/openai_request.h"

namespace cadre {

class ChatTemplate {
 public:
  // "llama2", "chatml" or the path of a template file; ConfigError naming it otherwise.
  static ChatTemplate load(const std::string& spec);

  // ApiError(400) for a conversation the format cannot express (Llama 2: user and assistant
  // turns must alternate, starting and ending with the user).
  std::vector<int> render(const std::vector<ChatMessage>& messages, const Tokenizer& tokenizer) const;
  const std::string& name() const { return name_; }

 private:
  std::vector<int> render_llama2(const std::vector<ChatMessage>& messages, const Tokenizer& tokenizer) const;
  std::string name_;
  bool llama2_ = false;
  std::string system_, user_, assistant_, generation_;
};

}  // namespace cadre
