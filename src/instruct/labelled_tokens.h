// An instruction sample as training tokens: the ids, and which of them are learned (the
// targets; labels are -100 elsewhere, as transformers writes them).
//
// What is learned is found in tokens, as the issue states it for chats and TRL does for
// prompt/completion: an assistant turn k is what encoding the chat rendered up to and including
// that turn adds to encoding it rendered up to turn k with the generation prompt. "Adds" is
// taken after the longest common prefix of the two encodings, so where a tokenizer joins the
// prompt's last characters with the answer's first (SentencePiece's space handling), the joined
// token is learned rather than lost. The whole conversation is encoded once, so the ids are
// what the model sees whatever is learned; a template that does not render turn by turn (a
// later turn changing earlier text) is refused.
#pragma once

#include <cstdint>
#include <vector>

#include "chat/chat_template.h"
#include "data/tokenizer.h"
#include "instruct/instruction_sample.h"

namespace cadre {

struct LabelledTokens {
  std::vector<int> ids;
  std::vector<uint8_t> learn;  // 1: a target of the loss; one per id
};

// Text: encode_prompt(text) and EOS, all learned. Prompt/completion: encode_prompt(prompt +
// completion) and EOS, learned from where encode_prompt(prompt) ends. Chat: the template's full
// rendering, each assistant turn learned (its end-of-turn token included). train_on_prompt
// learns every token. ChatRefused when the template refuses the conversation or does not
// render it turn by turn.
LabelledTokens labelled_tokens(const InstructionSample& sample, const Tokenizer& tokenizer, const ChatTemplate& chat,
                               bool train_on_prompt);

}  // namespace cadre
