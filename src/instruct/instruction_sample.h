// One line of an instruction or chat JSONL file, in the shapes people fine-tune on; the shape is
// decided per line by its keys:
//   {"text": ...}                                   plain text, all of it learned
//   {"prompt": ..., "completion": ...}              the completion learned
//   {"instruction": ..., "input": ..., "output": ...}  alpaca: a user turn (instruction, then
//                                                   input after a blank line when non-empty)
//                                                   answered by output, through the chat template
//   {"messages": [{"role": ..., "content": ...}, ...]}  chat (an optional system message first)
// ShareGPT's {"conversations": [{"from", "value"}]} is refused by name (convert it to messages).
#pragma once

#include <string>
#include <vector>

#include "chat/chat_message.h"

namespace cadre {

struct InstructionSample {
  enum class Kind { Text, PromptCompletion, Chat };
  Kind kind = Kind::Text;
  std::string text;                    // Text
  std::string prompt, completion;      // PromptCompletion
  std::vector<ChatMessage> messages;   // Chat (alpaca lines become one user and one assistant turn)
};

// Parses one JSONL line; `where` ("data.jsonl:12") names it in errors: ConfigError for invalid
// JSON, a shape none of the above, a missing or mistyped field, an unknown role, or a chat with no
// assistant turn to learn.
InstructionSample instruction_sample_parse(const std::string& line, const std::string& where);

}  // namespace cadre
