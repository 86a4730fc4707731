// Rendering chat formats into token ids (special tokens as ids, the rest encoded as text).
#include "serve/chat_template.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "core/error.h"

namespace cadre {
namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\n\r"), b = s.find_last_not_of(" \t\n\r");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// A prompt under construction: text runs and special token ids. Text is encoded a run at a
// time, so a message and the template text around it tokenize as one string would.
class Prompt {
 public:
  explicit Prompt(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  // Pattern text: <s> and </s> in it are the BOS and EOS tokens.
  void marked(const std::string& text) {
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t bos = text.find("<s>", pos), eos = text.find("</s>", pos);
      const size_t next = std::min(bos, eos);
      run_ += text.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
      if (next == std::string::npos) break;
      special(next == bos ? tokenizer_.bos_id() : tokenizer_.eos_id());
      pos = next + (next == bos ? 3 : 4);
    }
  }
  void plain(const std::string& text) { run_ += text; }  // a message: never special
  void special(int id) {
    flush();
    ids_.push_back(id);
  }
  std::vector<int> finish() {
    flush();
    return std::move(ids_);
  }

 private:
  void flush() {
    if (run_.empty()) return;
    const auto ids = tokenizer_.encode(run_);
    ids_.insert(ids_.end(), ids.begin(), ids.end());
    run_.clear();
  }
  const Tokenizer& tokenizer_;
  std::string run_;
  std::vector<int> ids_;
};

}  // namespace

ChatTemplate ChatTemplate::load(const std::string& spec) {
  ChatTemplate t;
  t.name_ = spec;
  if (spec == "llama2") {
    t.llama2_ = true;
    return t;
  }
  if (spec == "chatml") {
    t.system_ = "<|im_start|>system\n{content}<|im_end|>\n";
    t.user_ = "<|im_start|>user\n{content}<|im_end|>\n";
    t.assistant_ = "<|im_start|>assistant\n{content}<|im_end|>\n";
    t.generation_ = "<|im_start|>assistant\n";
    return t;
  }
  CADRE_CONFIG_CHECK(std::filesystem::is_regular_file(spec), "--chat-template '", spec,
                     "' is neither llama2, chatml nor a template file");
  YAML::Node root;
  try {
    root = YAML::LoadFile(spec);
  } catch (const YAML::Exception& e) {
    throw ConfigError(str("--chat-template '", spec, "': ", e.what()));
  }
  CADRE_CONFIG_CHECK(root.IsMap(), "--chat-template '", spec, "': expected keys system, user, assistant, generation");
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    CADRE_CONFIG_CHECK(kv.second.IsScalar(), "--chat-template '", spec, "': '", key, "' must be a string");
    const std::string value = kv.second.as<std::string>();
    if (key == "system") t.system_ = value;
    else if (key == "user") t.user_ = value;
    else if (key == "assistant") t.assistant_ = value;
    else if (key == "generation") t.generation_ = value;
    else throw ConfigError(str("--chat-template '", spec, "': unknown key '", key, "' (system, user, assistant, generation)"));
  }
  CADRE_CONFIG_CHECK(t.user_.find("{content}") != std::string::npos, "--chat-template '", spec,
                     "': 'user' must contain {content}");
  return t;
}

std::vector<int> ChatTemplate::render(const std::vector<ChatMessage>& messages, const Tokenizer& tokenizer) const {
  if (llama2_) return render_llama2(messages, tokenizer);
  Prompt prompt(tokenizer);
  prompt.special(tokenizer.bos_id());
  for (const auto& m : messages) {
    const std::string& pattern = m.role == "system" ? system_ : m.role == "user" ? user_ : assistant_;
    const size_t at = pattern.find("{content}");
    prompt.marked(pattern.substr(0, at));
    if (at != std::string::npos) {
      prompt.plain(m.content);
      prompt.marked(pattern.substr(at + 9));
    }
  }
  prompt.marked(generation_);
  return prompt.finish();
}

std::vector<int> ChatTemplate::render_llama2(const std::vector<ChatMessage>& messages, const Tokenizer& tokenizer) const {
  size_t first = 0;
  std::string system;
  if (!messages.empty() && messages[0].role == "system") {
    system = messages[0].content;
    first = 1;
  }
  if (first == messages.size()) throw ApiError(400, "'messages' needs a user message", "messages");
  std::vector<int> out;
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool user_turn = (i - first) % 2 == 0;
    if (m.role != (user_turn ? "user" : "assistant"))
      throw ApiError(400,
                     "the llama2 chat format needs user and assistant messages to alternate, starting with the user "
                     "(after an optional system message); messages[" + std::to_string(i) + "] is '" + m.role + "'",
                     "messages");
    // As Meta's reference encodes a dialog: each user turn with its answer is one string,
    // "[INST] {user} [/INST] {answer} ", between BOS and EOS; the last user turn has no EOS.
    if (user_turn) {
      std::string content = trim(m.content);
      if (i == first && !system.empty()) content = "<<SYS>>\n" + trim(system) + "\n<</SYS>>\n\n" + content;
      std::string turn = "[INST] " + content + " [/INST]";
      const bool answered = i + 1 < messages.size() && messages[i + 1].role == "assistant";
      if (answered) turn += " " + trim(messages[i + 1].content) + " ";
      out.push_back(tokenizer.bos_id());
      const auto ids = tokenizer.encode(turn);
      out.insert(out.end(), ids.begin(), ids.end());
      if (answered) out.push_back(tokenizer.eos_id());
    }
  }
  if (messages.back().role != "user")
    throw ApiError(400, "the llama2 chat format needs the last message to be the user's", "messages");
  return out;
}

}  // namespace cadre
