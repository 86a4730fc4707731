// Hugging Face names and files for Llama.
#include "models/llama/hf_adapter.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/file_util.h"
#include "models/llama/hf_rope.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

// (Cadre pattern, HF replacement) and the reverse, from one list.
const std::vector<std::pair<std::string, std::string>>& name_pairs() {
  static const std::vector<std::pair<std::string, std::string>> pairs = {
      {"tok_embeddings.weight", "model.embed_tokens.weight"},
      {"norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
      {"layers.N.attention.wq.weight", "model.layers.N.self_attn.q_proj.weight"},
      {"layers.N.attention.wk.weight", "model.layers.N.self_attn.k_proj.weight"},
      {"layers.N.attention.wv.weight", "model.layers.N.self_attn.v_proj.weight"},
      {"layers.N.attention.wo.weight", "model.layers.N.self_attn.o_proj.weight"},
      {"layers.N.feed_forward.w1.weight", "model.layers.N.mlp.gate_proj.weight"},
      {"layers.N.feed_forward.w2.weight", "model.layers.N.mlp.down_proj.weight"},
      {"layers.N.feed_forward.w3.weight", "model.layers.N.mlp.up_proj.weight"},
      {"layers.N.attention_norm.weight", "model.layers.N.input_layernorm.weight"},
      {"layers.N.ffn_norm.weight", "model.layers.N.post_attention_layernorm.weight"},
  };
  return pairs;
}

// "layers.N.x" as a regex with N a captured layer number, and its replacement ("$$" is a
// literal "$" in a format string, so the replacement refers to the captured number as $1).
std::pair<std::regex, std::string> rule(const std::string& from, const std::string& to) {
  std::string pattern = "^" + std::regex_replace(from, std::regex(R"(\.)"), R"(\.)") + "$";
  pattern = std::regex_replace(pattern, std::regex("N"), R"((\d+))");
  return {std::regex(pattern), std::regex_replace(to, std::regex("N"), "$$1")};
}

std::string translate(const std::string& name, bool to_hf) {
  static const auto rules = [] {
    std::vector<std::pair<std::regex, std::string>> fwd, back;
    for (const auto& [cadre, hf] : name_pairs()) {
      fwd.push_back(rule(cadre, hf));
      back.push_back(rule(hf, cadre));
    }
    return std::make_pair(fwd, back);
  }();
  for (const auto& [pattern, replacement] : to_hf ? rules.first : rules.second)
    if (std::regex_match(name, pattern)) return std::regex_replace(name, pattern, replacement);
  return "";
}

}  // namespace

std::string hf_tensor_name(const std::string& n) {
  std::string hf = translate(n, true);
  if (hf.empty()) throw Error(str("no Hugging Face name for parameter '", n, "'"));
  return hf;
}

ModelSection llama_section_from_hf(const std::string& text, const std::string& source) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  CADRE_CONFIG_CHECK(j.is_object(), source, ": not a JSON object");
  const std::string type = j.value("model_type", "");
  CADRE_CONFIG_CHECK(type == "llama", source, ": model_type is '", type,
                     "'; Cadre imports Llama models (model_type \"llama\")");
  // Features of transformers' Llama that Cadre's does not have: refused, never ignored.
  auto absent_or = [&](const char* field, const nlohmann::json& ok) {
    CADRE_CONFIG_CHECK(!j.contains(field) || j[field] == ok, source, ": ", field, " = ", j[field].dump(),
                       " is not supported (Cadre's Llama has ", field, " = ", ok.dump(), ")");
  };
  absent_or("attention_bias", false);
  absent_or("mlp_bias", false);
  absent_or("hidden_act", "silu");
  absent_or("pretraining_tp", 1);
  ModelSection section;
  section.arch = "llama";
  // (Cadre key, HF field, default when absent: null means required)
  const std::vector<std::tuple<const char*, const char*, nlohmann::json>> fields = {
      {"dim", "hidden_size", nullptr},
      {"n_layers", "num_hidden_layers", nullptr},
      {"n_heads", "num_attention_heads", nullptr},
      {"n_kv_heads", "num_key_value_heads", j.value("num_attention_heads", nlohmann::json())},
      {"vocab_size", "vocab_size", nullptr},
      {"ffn_dim", "intermediate_size", nullptr},
      {"max_seq_len", "max_position_embeddings", 2048},
      {"norm_eps", "rms_norm_eps", 1e-6},
      {"tie_embeddings", "tie_word_embeddings", false},
      {"init_std", "initializer_range", 0.02},
  };
  for (const auto& [key, field, fallback] : fields) {
    nlohmann::json v = j.contains(field) && !j[field].is_null() ? j[field] : fallback;
    CADRE_CONFIG_CHECK(!v.is_null(), source, ": ", field, " is missing");
    CADRE_CONFIG_CHECK(v.is_number() || v.is_boolean(), source, ": ", field, " = ", v.dump(), " is not a number");
    std::string value = v.is_boolean() ? (v.get<bool>() ? "true" : "false") : v.dump();
    section.keys.push_back({std::string("model.") + key, value, source});
  }
  for (const auto& [key, value] : rope_keys_from_hf(j, source)) section.keys.push_back({"model." + key, value, source});
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    const auto dim = j.value("hidden_size", int64_t{0}), heads = j.value("num_attention_heads", int64_t{1});
    CADRE_CONFIG_CHECK(j["head_dim"].is_number_integer() && heads > 0 && j["head_dim"].get<int64_t>() * heads == dim,
                       source, ": head_dim = ", j["head_dim"].dump(), " is not hidden_size / num_attention_heads (",
                       dim, " / ", heads, "); Cadre's Llama derives it");
  }
  try {
    llama_config(section);  // ranges and divisibility, named by the model's keys
  } catch (const ConfigError& e) {
    throw ConfigError(str(source, ": ", e.what()));
  }
  return section;
}

std::string LlamaHfAdapter::external_name(const std::string& name) const {
  // HF ties lm_head to embed_tokens itself: a tied model exports no head.
  return hf_tensor_name(name);
}

std::string LlamaHfAdapter::internal_name(const std::string& external) const {
  if (config_.tie_embeddings && external == "lm_head.weight") return "";
  return translate(external, false);
}

std::string LlamaHfAdapter::config_json() const {
  const LlamaConfig& m = config_;
  nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}},
                      {"model_type", "llama"},
                      {"hidden_size", m.dim},
                      {"intermediate_size", llama_ffn_dim(m)},
                      {"num_hidden_layers", m.n_layers},
                      {"num_attention_heads", m.n_heads},
                      {"num_key_value_heads", m.n_kv_heads},
                      {"vocab_size", m.vocab_size},
                      {"max_position_embeddings", m.max_seq_len},
                      {"rms_norm_eps", m.norm_eps},
                      {"tie_word_embeddings", m.tie_embeddings},
                      {"hidden_act", "silu"},
                      {"initializer_range", m.init_std}};
  rope_to_hf(m, j);
  return j.dump(2) + "\n";
}

void LlamaHfAdapter::write_extras(const std::string& dir, const std::string& tokenizer) const {
  if (tokenizer.empty()) return;
  fs::copy_file(tokenizer, dir + "/tokenizer.model", fs::copy_options::overwrite_existing);
  nlohmann::json tc = {{"tokenizer_class", "LlamaTokenizer"}, {"bos_token", "<s>"}, {"eos_token", "</s>"},
                       {"unk_token", "<unk>"}, {"add_bos_token", true}, {"add_eos_token", false},
                       {"model_max_length", config_.max_seq_len}};
  file_write_atomic(dir + "/tokenizer_config.json", tc.dump(2) + "\n");
}

}  // namespace cadre
