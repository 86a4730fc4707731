// Manifest (de)serialisation as JSON.
#include "data/manifest.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/json_number.h"

namespace cadre {
namespace {
nlohmann::json shards_to_json(const std::vector<ShardEntry>& shards) {
  auto out = nlohmann::json::array();
  for (const auto& s : shards) out.push_back({{"file", s.file}, {"samples", s.samples}, {"checksum", s.checksum}});
  return out;
}
// Counts are read as signed so that a negative one is an error, not a huge unsigned number.
uint64_t count_field(const nlohmann::json& j, const char* name) {
  const int64_t v = json_int(j.at(name), name);
  if (v < 0) throw ConfigError(str("'", name, "' is negative (", v, ")"));
  return static_cast<uint64_t>(v);
}
std::vector<ShardEntry> shards_from_json(const nlohmann::json& j) {
  std::vector<ShardEntry> out;
  for (const auto& s : j) out.push_back({s.at("file").get<std::string>(), count_field(s, "samples"), json_uint(s.at("checksum"), "checksum")});
  return out;
}

// Shapes the loaders rely on: a positive sample length and vocabulary and a known token width
// (tokens), positive image dimensions and class count and a finite, positive pixel scale
// (images), and sample counts whose totals fit 64 bits (the loaders multiply and sum them).
void check_shapes(const DatasetManifest& m) {
  uint64_t per = 0;  // elements per sample
  if (m.kind == "tokens") {
    if (m.seq_len <= 0) throw ConfigError(str("seq_len must be positive, got ", m.seq_len));
    if (m.vocab_size <= 0) throw ConfigError(str("vocab_size must be positive, got ", m.vocab_size));
    if (m.token_bytes != 2 && m.token_bytes != 4) throw ConfigError(str("token_bytes must be 2 or 4, got ", m.token_bytes));
    per = static_cast<uint64_t>(m.seq_len) + 1;
  } else if (m.kind == "encoded_images") {
    if (m.channels != 3) throw ConfigError(str("channels must be 3, got ", m.channels));
    if (m.num_classes <= 0 || m.num_classes > (int64_t{1} << 20) || m.classes.size() != static_cast<size_t>(m.num_classes))
      throw ConfigError(str("num_classes must be in 1..2^20 and match the ", m.classes.size(), " class names, got ",
                            m.num_classes));
    per = 1;
  } else {
    for (int64_t d : {m.channels, m.height, m.width, m.num_classes})
      if (d <= 0 || d > (int64_t{1} << 20))
        throw ConfigError(str("channels, height, width and num_classes must be in 1..2^20, got ", m.channels, ", ",
                              m.height, ", ", m.width, ", ", m.num_classes));
    if (!std::isfinite(m.pixel_mean) || !std::isfinite(m.pixel_std) || m.pixel_std <= 0)
      throw ConfigError(str("pixel_mean must be finite and pixel_std finite and positive, got ", m.pixel_mean, " and ",
                            m.pixel_std));
    per = static_cast<uint64_t>(m.channels * m.height) * static_cast<uint64_t>(m.width) + 1;
  }
  // Instruction data: a labels shard for each token shard, sample for sample.
  for (const auto& [tokens, labels] : {std::pair(&m.train, &m.train_labels), std::pair(&m.val, &m.val_labels)}) {
    if (!m.labelled()) continue;
    if (labels->size() != tokens->size())
      throw ConfigError(str(labels->size(), " label shards for ", tokens->size(), " token shards"));
    for (size_t i = 0; i < labels->size(); ++i)
      if ((*labels)[i].samples != (*tokens)[i].samples || (*labels)[i].file.empty())
        throw ConfigError(str("label shard '", (*labels)[i].file, "' holds ", (*labels)[i].samples,
                              " samples; its token shard '", (*tokens)[i].file, "' ", (*tokens)[i].samples));
  }
  for (const auto* split : {&m.train, &m.val}) {
    uint64_t total = 0;
    for (const auto& e : *split) {
      auto next = checked_add(total, e.samples);
      if (!next || !checked_mul(*next, per) || e.file.empty())
        throw ConfigError(str("shard '", e.file, "': ", e.samples, " samples of ", per, " elements overflow the sample count"));
      total = *next;
    }
  }
}
}  // namespace

DatasetManifest manifest_read(const std::string& dir) {
  std::string path = dir + "/manifest.json";
  std::ifstream in(path);
  if (!in) throw ConfigError(str("dataset manifest '", path, "' not found (run `cadre data prepare` first)"));
  std::stringstream text;
  text << in.rdbuf();
  return manifest_parse_text(text.str(), path);
}

DatasetManifest manifest_parse_text(const std::string& text, const std::string& path) {
  DatasetManifest m;
  try {
    auto j = nlohmann::json::parse(text);
    const int64_t version = json_int(j.at("version"), "version");
    m.version = version == 1 ? 1 : -1;
    m.kind = j.value("kind", std::string("tokens"));  // manifests before images had no kind
    if (m.kind == "tokens") {
      m.tokenizer = j.at("tokenizer").get<std::string>();
      m.tokenizer_identity = j.value("tokenizer_identity", std::string());
      m.vocab_size = json_int(j.at("vocab_size"), "vocab_size");
      m.seq_len = json_int(j.at("seq_len"), "seq_len");
      const int64_t width = json_int(j.at("token_bytes"), "token_bytes");
      m.token_bytes = width == 2 || width == 4 ? static_cast<uint32_t>(width) : 0;
      m.bos_id = json_int(j.at("bos_id"), "bos_id");
      m.eos_id = json_int(j.at("eos_id"), "eos_id");
      m.documents = count_field(j, "documents");
      m.tokens = count_field(j, "tokens");
      if (j.contains("train_labels")) {
        m.train_labels = shards_from_json(j.at("train_labels"));
        m.val_labels = shards_from_json(j.at("val_labels"));
        m.packing = j.value("packing", std::string("pad"));  // manifests before packing were padded
        if (m.packing != "pad" && m.packing != "documents")
          throw ConfigError(str("packing '", m.packing, "' (pad or documents)"));
      }
    } else if (m.kind == "images") {
      m.channels = json_int(j.at("channels"), "channels");
      m.height = json_int(j.at("height"), "height");
      m.width = json_int(j.at("width"), "width");
      m.num_classes = json_int(j.at("num_classes"), "num_classes");
      m.pixel_mean = j.at("pixel_mean").get<double>();
      m.pixel_std = j.at("pixel_std").get<double>();
    } else if (m.kind == "encoded_images") {
      m.channels = json_int(j.at("channels"), "channels");
      m.num_classes = json_int(j.at("num_classes"), "num_classes");
      m.classes = j.at("classes").get<std::vector<std::string>>();
      m.skipped = count_field(j, "skipped");
    } else {
      throw ConfigError(str("unknown kind '", m.kind, "' (tokens, images or encoded_images)"));
    }
    m.train = shards_from_json(j.at("train"));
    m.val = shards_from_json(j.at("val"));
    if (m.version != 1) throw ConfigError(str("unsupported version ", version));
    check_shapes(m);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(str("dataset manifest '", path, "' is malformed: ", e.what()));
  } catch (const Error& e) {  // a ConfigError, or a json_int complaint
    throw ConfigError(str("dataset manifest '", path, "': ", e.what()));
  }
  return m;
}

void manifest_write(const std::string& dir, const DatasetManifest& m) {
  nlohmann::json j = {{"version", m.version}, {"kind", m.kind}};
  if (m.kind == "images") {
    j.update({{"channels", m.channels}, {"height", m.height}, {"width", m.width}, {"num_classes", m.num_classes},
              {"pixel_mean", m.pixel_mean}, {"pixel_std", m.pixel_std}});
  } else if (m.kind == "encoded_images") {
    j.update({{"channels", m.channels}, {"num_classes", m.num_classes}, {"classes", m.classes}, {"skipped", m.skipped}});
  } else {
    j.update({{"tokenizer", m.tokenizer}, {"vocab_size", m.vocab_size}, {"seq_len", m.seq_len},
              {"token_bytes", m.token_bytes}, {"bos_id", m.bos_id}, {"eos_id", m.eos_id},
              {"documents", m.documents}, {"tokens", m.tokens}});
    if (!m.tokenizer_identity.empty()) j["tokenizer_identity"] = m.tokenizer_identity;
    if (m.labelled()) {
      j["train_labels"] = shards_to_json(m.train_labels);
      j["val_labels"] = shards_to_json(m.val_labels);
      j["packing"] = m.packing;
    }
  }
  j["train"] = shards_to_json(m.train);
  j["val"] = shards_to_json(m.val);
  file_write_atomic(dir + "/manifest.json", j.dump(2) + "\n");
}

}  // namespace cadre
