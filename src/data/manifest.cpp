// Manifest (de)serialisation as JSON.
#include "data/manifest.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/checked_math.h"
#include "core/error.h"

namespace cadre {
namespace {
nlohmann::json shards_to_json(const std::vector<ShardEntry>& shards) {
  auto out = nlohmann::json::array();
  for (const auto& s : shards) out.push_back({{"file", s.file}, {"samples", s.samples}, {"checksum", s.checksum}});
  return out;
}
// Counts are read as signed so that a negative one is an error, not a huge unsigned number.
uint64_t count_field(const nlohmann::json& j, const char* name) {
  const int64_t v = j.at(name).get<int64_t>();
  if (v < 0) throw ConfigError(str("'", name, "' is negative (", v, ")"));
  return static_cast<uint64_t>(v);
}
std::vector<ShardEntry> shards_from_json(const nlohmann::json& j) {
  std::vector<ShardEntry> out;
  for (const auto& s : j) out.push_back({s.at("file").get<std::string>(), count_field(s, "samples"), s.at("checksum").get<uint64_t>()});
  return out;
}

// Shapes the loader relies on: positive sample length and vocabulary, a known token width,
// and sample counts whose token totals fit 64 bits (the loader multiplies and sums them).
void check_shapes(const DatasetManifest& m) {
  if (m.seq_len <= 0) throw ConfigError(str("seq_len must be positive, got ", m.seq_len));
  if (m.vocab_size <= 0) throw ConfigError(str("vocab_size must be positive, got ", m.vocab_size));
  if (m.token_bytes != 2 && m.token_bytes != 4) throw ConfigError(str("token_bytes must be 2 or 4, got ", m.token_bytes));
  const uint64_t per = static_cast<uint64_t>(m.seq_len) + 1;
  for (const auto* split : {&m.train, &m.val}) {
    uint64_t total = 0;
    for (const auto& e : *split) {
      auto next = checked_add(total, e.samples);
      if (!next || !checked_mul(*next, per) || e.file.empty())
        throw ConfigError(str("shard '", e.file, "': ", e.samples, " samples of ", per, " tokens overflow the sample count"));
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
    m.version = j.at("version").get<int>();
    m.tokenizer = j.at("tokenizer").get<std::string>();
    m.vocab_size = j.at("vocab_size").get<int64_t>();
    m.seq_len = j.at("seq_len").get<int64_t>();
    const int64_t width = j.at("token_bytes").get<int64_t>();
    m.token_bytes = width == 2 || width == 4 ? static_cast<uint32_t>(width) : 0;
    m.bos_id = j.at("bos_id").get<int64_t>();
    m.eos_id = j.at("eos_id").get<int64_t>();
    m.documents = count_field(j, "documents");
    m.tokens = count_field(j, "tokens");
    m.train = shards_from_json(j.at("train"));
    m.val = shards_from_json(j.at("val"));
    if (m.version != 1) throw ConfigError(str("unsupported version ", m.version));
    check_shapes(m);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(str("dataset manifest '", path, "' is malformed: ", e.what()));
  } catch (const ConfigError& e) {
    throw ConfigError(str("dataset manifest '", path, "': ", e.what()));
  }
  return m;
}

void manifest_write(const std::string& dir, const DatasetManifest& m) {
  nlohmann::json j = {{"version", m.version},     {"tokenizer", m.tokenizer}, {"vocab_size", m.vocab_size},
                      {"seq_len", m.seq_len},     {"token_bytes", m.token_bytes}, {"bos_id", m.bos_id},
                      {"eos_id", m.eos_id},       {"documents", m.documents}, {"tokens", m.tokens},
                      {"train", shards_to_json(m.train)}, {"val", shards_to_json(m.val)}};
  std::string path = dir + "/manifest.json", tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(2) << "\n";
    CADRE_CHECK(out.good(), "cannot write '", tmp, "'");
  }
  CADRE_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename '", tmp, "' to '", path, "'");
}

}  // namespace cadre
