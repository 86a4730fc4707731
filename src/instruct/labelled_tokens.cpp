// Finding the learned tokens of an instruction sample.
#include "instruct/labelled_tokens.h"

#include <algorithm>

namespace cadre {
namespace {

size_t common_prefix(const std::vector<int>& a, const std::vector<int>& b) {
  return static_cast<size_t>(std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(std::min(a.size(), b.size())),
                                           b.begin()).first - a.begin());
}

bool is_prefix(const std::vector<int>& a, const std::vector<int>& b) {
  return a.size() <= b.size() && common_prefix(a, b) == a.size();
}

void learn_range(LabelledTokens& t, size_t begin, size_t end) {
  std::fill(t.learn.begin() + static_cast<std::ptrdiff_t>(begin), t.learn.begin() + static_cast<std::ptrdiff_t>(end), 1);
}

LabelledTokens with_eos(std::vector<int> ids, const Tokenizer& tokenizer) {
  if (tokenizer.eos_id() >= 0) ids.push_back(tokenizer.eos_id());
  LabelledTokens t{std::move(ids), {}};
  t.learn.assign(t.ids.size(), 0);
  return t;
}

LabelledTokens chat_tokens(const std::vector<ChatMessage>& messages, const Tokenizer& tokenizer, const ChatTemplate& chat) {
  LabelledTokens t;
  t.ids = tokenizer.encode_rendered(chat.render_text(messages, tokenizer, /*add_generation_prompt=*/false));
  t.learn.assign(t.ids.size(), 0);
  for (size_t k = 0; k < messages.size(); ++k) {
    if (messages[k].role != "assistant") continue;
    const std::vector<ChatMessage> before(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(k));
    const std::vector<ChatMessage> through(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(k + 1));
    const std::vector<int> prompt = tokenizer.encode_rendered(chat.render_text(before, tokenizer, true));
    const std::vector<int> answered = tokenizer.encode_rendered(chat.render_text(through, tokenizer, false));
    if (!is_prefix(answered, t.ids))
      throw ChatRefused(str("the chat template (", chat.name(), ") does not render conversations turn by turn: ",
                            "the conversation up to messages[", k, "] is not the start of the whole one, so its ",
                            "answer cannot be told from the rest"));
    learn_range(t, common_prefix(prompt, answered), answered.size());
  }
  return t;
}

}  // namespace

LabelledTokens labelled_tokens(const InstructionSample& sample, const Tokenizer& tokenizer, const ChatTemplate& chat,
                               bool train_on_prompt) {
  LabelledTokens t;
  switch (sample.kind) {
    case InstructionSample::Kind::Text:
      t = with_eos(tokenizer.encode_prompt(sample.text), tokenizer);
      learn_range(t, 0, t.ids.size());
      break;
    case InstructionSample::Kind::PromptCompletion:
      t = with_eos(tokenizer.encode_prompt(sample.prompt + sample.completion), tokenizer);
      learn_range(t, common_prefix(tokenizer.encode_prompt(sample.prompt), t.ids), t.ids.size());
      break;
    case InstructionSample::Kind::Chat:
      t = chat_tokens(sample.messages, tokenizer, chat);
      break;
  }
  if (train_on_prompt) learn_range(t, 0, t.ids.size());
  return t;
}

}  // namespace cadre
