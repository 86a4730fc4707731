// Reading a JSONL line into an instruction sample.
#include "instruct/instruction_sample.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace cadre {
namespace {

using json = nlohmann::json;

std::string string_field(const json& j, const char* key, const std::string& where, bool required = true) {
  if (!j.contains(key) || j[key].is_null()) {
    CADRE_CONFIG_CHECK(!required, where, ": field '", key, "' is missing");
    return "";
  }
  CADRE_CONFIG_CHECK(j[key].is_string(), where, ": field '", key, "' must be a string, got ", j[key].type_name());
  return j[key].get<std::string>();
}

std::vector<ChatMessage> chat_messages(const json& list, const std::string& where) {
  CADRE_CONFIG_CHECK(list.is_array() && !list.empty(), where, ": field 'messages' must be a non-empty list");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = where + ": messages[" + std::to_string(i) + "]";
    CADRE_CONFIG_CHECK(list[i].is_object(), at, " must be an object with role and content");
    ChatMessage m{string_field(list[i], "role", at), string_field(list[i], "content", at)};
    CADRE_CONFIG_CHECK(m.role == "system" || m.role == "user" || m.role == "assistant", at, ": role '", m.role,
                       "' is not system, user or assistant");
    CADRE_CONFIG_CHECK(m.role != "system" || i == 0, at, ": a system message may only come first");
    out.push_back(std::move(m));
  }
  const bool answered = std::any_of(out.begin(), out.end(), [](const ChatMessage& m) { return m.role == "assistant"; });
  CADRE_CONFIG_CHECK(answered, where, ": the conversation has no assistant message to learn");
  return out;
}

}  // namespace

InstructionSample instruction_sample_parse(const std::string& line, const std::string& where) {
  const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  CADRE_CONFIG_CHECK(!j.is_discarded(), where, ": not valid JSON");
  CADRE_CONFIG_CHECK(j.is_object(), where, ": a line must be a JSON object");
  CADRE_CONFIG_CHECK(!j.contains("conversations"), where,
                     ": ShareGPT's 'conversations' is not read; convert it to 'messages' with role/content "
                     "(from human -> user, gpt -> assistant, value -> content)");
  InstructionSample s;
  if (j.contains("messages")) {
    s.kind = InstructionSample::Kind::Chat;
    s.messages = chat_messages(j["messages"], where);
  } else if (j.contains("instruction")) {
    s.kind = InstructionSample::Kind::Chat;
    std::string user = string_field(j, "instruction", where);
    const std::string input = string_field(j, "input", where, /*required=*/false);
    if (!input.empty()) user += "\n\n" + input;
    s.messages = {{"user", user}, {"assistant", string_field(j, "output", where)}};
  } else if (j.contains("prompt") || j.contains("completion")) {
    s.kind = InstructionSample::Kind::PromptCompletion;
    s.prompt = string_field(j, "prompt", where);
    s.completion = string_field(j, "completion", where);
  } else {
    CADRE_CONFIG_CHECK(j.contains("text"), where,
                       ": expected 'text', 'prompt' and 'completion', 'instruction' and 'output', or 'messages'");
    s.text = string_field(j, "text", where);
  }
  return s;
}

}  // namespace cadre
