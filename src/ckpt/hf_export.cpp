// Hugging Face and .pt export.
#include "ckpt/hf_export.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/safetensors.h"
#include "core/error.h"
#include "core/file_util.h"
#include "ckpt/tensor_file.h"

namespace fs = std::filesystem;

namespace cadre {

std::string hf_tensor_name(const std::string& n) {
  static const std::vector<std::pair<std::regex, std::string>> rules = {
      {std::regex(R"(^tok_embeddings\.weight$)"), "model.embed_tokens.weight"},
      {std::regex(R"(^norm\.weight$)"), "model.norm.weight"},
      {std::regex(R"(^output\.weight$)"), "lm_head.weight"},
      {std::regex(R"(^layers\.(\d+)\.attention\.wq\.weight$)"), "model.layers.$1.self_attn.q_proj.weight"},
      {std::regex(R"(^layers\.(\d+)\.attention\.wk\.weight$)"), "model.layers.$1.self_attn.k_proj.weight"},
      {std::regex(R"(^layers\.(\d+)\.attention\.wv\.weight$)"), "model.layers.$1.self_attn.v_proj.weight"},
      {std::regex(R"(^layers\.(\d+)\.attention\.wo\.weight$)"), "model.layers.$1.self_attn.o_proj.weight"},
      {std::regex(R"(^layers\.(\d+)\.feed_forward\.w1\.weight$)"), "model.layers.$1.mlp.gate_proj.weight"},
      {std::regex(R"(^layers\.(\d+)\.feed_forward\.w2\.weight$)"), "model.layers.$1.mlp.down_proj.weight"},
      {std::regex(R"(^layers\.(\d+)\.feed_forward\.w3\.weight$)"), "model.layers.$1.mlp.up_proj.weight"},
      {std::regex(R"(^layers\.(\d+)\.attention_norm\.weight$)"), "model.layers.$1.input_layernorm.weight"},
      {std::regex(R"(^layers\.(\d+)\.ffn_norm\.weight$)"), "model.layers.$1.post_attention_layernorm.weight"},
  };
  for (const auto& [pattern, replacement] : rules)
    if (std::regex_match(n, pattern)) return std::regex_replace(n, pattern, replacement);
  throw Error(str("no Hugging Face name for parameter '", n, "'"));
}

std::map<std::string, at::Tensor> hf_state_dict(const std::map<std::string, at::Tensor>& params,
                                                const ModelConfig& model) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, t] : params) out[hf_tensor_name(name)] = t;
  if (model.tie_embeddings) out.erase("lm_head.weight");  // HF ties it to embed_tokens itself
  return out;
}

std::string hf_config_json(const ModelConfig& m, int64_t bos_id, int64_t eos_id) {
  nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}},
                      {"model_type", "llama"},
                      {"hidden_size", m.dim},
                      {"intermediate_size", model_ffn_dim(m)},
                      {"num_hidden_layers", m.n_layers},
                      {"num_attention_heads", m.n_heads},
                      {"num_key_value_heads", m.n_kv_heads},
                      {"vocab_size", m.vocab_size},
                      {"max_position_embeddings", m.max_seq_len},
                      {"rms_norm_eps", m.norm_eps},
                      {"rope_theta", m.rope_theta},
                      {"tie_word_embeddings", m.tie_embeddings},
                      {"hidden_act", "silu"},
                      {"initializer_range", m.init_std},
                      {"bos_token_id", bos_id},
                      {"eos_token_id", eos_id},
                      {"torch_dtype", "float32"}};
  return j.dump(2) + "\n";
}

std::string checkpoint_export(const ExportOptions& o) {
  CADRE_CONFIG_CHECK(o.format == "hf" || o.format == "pt", "--format must be hf or pt, got '", o.format, "'");
  CADRE_CONFIG_CHECK(!o.out.empty(), "--out is required");
  const std::string checkpoint = checkpoint_locate(o.checkpoint);
  CheckpointReader reader(checkpoint);
  // The checkpoint carries the config it was trained with: the export needs nothing else.
  Config config = config_parse(reader.manifest().config_yaml, checkpoint + "/" + kManifestFile, {});
  std::string tokenizer = o.tokenizer;
  if (tokenizer.empty() && fs::is_regular_file(config.data.dir + "/tokenizer.model")) tokenizer = config.data.dir + "/tokenizer.model";
  CADRE_CONFIG_CHECK(tokenizer.empty() || fs::is_regular_file(tokenizer), "--tokenizer '", tokenizer, "': no such file");

  std::map<std::string, at::Tensor> params;
  for (const auto& [name, t] : reader.manifest().tensors)
    if (name.rfind("model.", 0) == 0) params[name.substr(6)] = reader.read_tensor(name);
  CADRE_CHECK(!params.empty(), "checkpoint '", checkpoint, "' holds no model.* tensors");
  auto hf = hf_state_dict(params, config.model);

  if (o.format == "pt") {
    tensor_file_save(o.out, hf);
    return str("wrote ", hf.size(), " tensors with Hugging Face names from ", checkpoint, " to ", o.out);
  }
  fs::create_directories(o.out);
  safetensors_write(o.out + "/model.safetensors", hf, {{"format", "pt"}});
  file_write_atomic(o.out + "/config.json", hf_config_json(config.model, 1, 2));
  if (!tokenizer.empty()) {
    fs::copy_file(tokenizer, o.out + "/tokenizer.model", fs::copy_options::overwrite_existing);
    nlohmann::json tc = {{"tokenizer_class", "LlamaTokenizer"}, {"bos_token", "<s>"}, {"eos_token", "</s>"},
                         {"unk_token", "<unk>"}, {"add_bos_token", true}, {"add_eos_token", false},
                         {"model_max_length", config.model.max_seq_len}};
    file_write_atomic(o.out + "/tokenizer_config.json", tc.dump(2) + "\n");
  }
  return str("wrote a Hugging Face Llama folder from ", checkpoint, " to ", o.out, " (config.json, model.safetensors",
             tokenizer.empty() ? "" : ", tokenizer.model", ")");
}

}  // namespace cadre
