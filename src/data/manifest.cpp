// Manifest (de)serialisation as JSON.
#include "data/manifest.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>

#include "core/error.h"

namespace cadre {
namespace {
nlohmann::json shards_to_json(const std::vector<ShardEntry>& shards) {
  auto out = nlohmann::json::array();
  for (const auto& s : shards) out.push_back({{"file", s.file}, {"samples", s.samples}, {"checksum", s.checksum}});
  return out;
}
std::vector<ShardEntry> shards_from_json(const nlohmann::json& j) {
  std::vector<ShardEntry> out;
  for (const auto& s : j) out.push_back({s.at("file").get<std::string>(), s.at("samples").get<uint64_t>(), s.at("checksum").get<uint64_t>()});
  return out;
}
}  // namespace

DatasetManifest manifest_read(const std::string& dir) {
  std::string path = dir + "/manifest.json";
  std::ifstream in(path);
  if (!in) throw ConfigError(str("dataset manifest '", path, "' not found (run `cadre data prepare` first)"));
  DatasetManifest m;
  try {
    auto j = nlohmann::json::parse(in);
    m.version = j.at("version").get<int>();
    m.kind = j.value("kind", std::string("tokens"));  // manifests before images had no kind
    if (m.kind == "tokens") {
      m.tokenizer = j.at("tokenizer").get<std::string>();
      m.vocab_size = j.at("vocab_size").get<int64_t>();
      m.seq_len = j.at("seq_len").get<int64_t>();
      m.token_bytes = j.at("token_bytes").get<uint32_t>();
      m.bos_id = j.at("bos_id").get<int64_t>();
      m.eos_id = j.at("eos_id").get<int64_t>();
      m.documents = j.at("documents").get<uint64_t>();
      m.tokens = j.at("tokens").get<uint64_t>();
    } else if (m.kind == "images") {
      m.channels = j.at("channels").get<int64_t>();
      m.height = j.at("height").get<int64_t>();
      m.width = j.at("width").get<int64_t>();
      m.num_classes = j.at("num_classes").get<int64_t>();
      m.pixel_mean = j.at("pixel_mean").get<double>();
      m.pixel_std = j.at("pixel_std").get<double>();
    } else {
      throw ConfigError(str("dataset manifest '", path, "': unknown kind '", m.kind, "' (tokens or images)"));
    }
    m.train = shards_from_json(j.at("train"));
    m.val = shards_from_json(j.at("val"));
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(str("dataset manifest '", path, "' is malformed: ", e.what()));
  }
  if (m.version != 1) throw ConfigError(str("dataset manifest '", path, "': unsupported version ", m.version));
  return m;
}

void manifest_write(const std::string& dir, const DatasetManifest& m) {
  nlohmann::json j = {{"version", m.version}, {"kind", m.kind}};
  if (m.kind == "images") {
    j.update({{"channels", m.channels}, {"height", m.height}, {"width", m.width}, {"num_classes", m.num_classes},
              {"pixel_mean", m.pixel_mean}, {"pixel_std", m.pixel_std}});
  } else {
    j.update({{"tokenizer", m.tokenizer}, {"vocab_size", m.vocab_size}, {"seq_len", m.seq_len},
              {"token_bytes", m.token_bytes}, {"bos_id", m.bos_id}, {"eos_id", m.eos_id},
              {"documents", m.documents}, {"tokens", m.tokens}});
  }
  j["train"] = shards_to_json(m.train);
  j["val"] = shards_to_json(m.val);
  std::string path = dir + "/manifest.json", tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(2) << "\n";
    CADRE_CHECK(out.good(), "cannot write '", tmp, "'");
  }
  CADRE_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename '", tmp, "' to '", path, "'");
}

}  // namespace cadre
