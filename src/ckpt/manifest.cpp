// manifest.json: writing, parsing with structural checks, and merging the ranks' indexes.
#include "ckpt/manifest.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_error.h"
#include "core/checked_math.h"
#include "core/error.h"
#include "core/json_number.h"

namespace cadre {

int64_t TensorRecord::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t dtype_element_size(const std::string& dtype) {
  if (dtype == "float32" || dtype == "int32") return 4;
  if (dtype == "bfloat16" || dtype == "float16") return 2;
  if (dtype == "int64" || dtype == "float64") return 8;
  if (dtype == "uint8") return 1;
  throw Error(str("unknown checkpoint dtype '", dtype, "'"));
}

std::string manifest_to_json(const CheckpointManifest& m) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : m.files) files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"rank", f.rank}});
  nlohmann::json tensors = nlohmann::json::object();
  for (const auto& [name, t] : m.tensors) {
    nlohmann::json pieces = nlohmann::json::array();
    for (const auto& p : t.pieces)
      pieces.push_back({{"file", p.file}, {"offset", p.offset}, {"start", p.start}, {"count", p.count}, {"crc32c", p.crc32c}});
    tensors[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"pieces", pieces}};
  }
  nlohmann::json j = {{"format", "cadre-checkpoint"}, {"version", m.version},     {"step", m.step},
                      {"world_size", m.world_size},    {"strategy", m.strategy},   {"state", m.state},
                      {"files", files},                {"tensors", tensors},       {"config_yaml", m.config_yaml}};
  return j.dump(1) + "\n";
}

std::string pieces_coverage_problem(const TensorRecord& t) {
  int64_t next = 0;
  for (const auto& p : t.pieces) {
    if (p.start != next)
      return str("elements ", std::min(next, p.start), "..", std::max(next, p.start),
                 p.start > next ? " are missing" : " are stored twice (or the pieces are out of order)");
    next = p.start + p.count;  // bounds were checked when the piece was read
  }
  if (next != t.numel()) return str("elements ", next, "..", t.numel(), " are missing");
  return "";
}

CheckpointManifest manifest_parse(const std::string& text, const std::string& source, PieceCoverage coverage) {
  CheckpointManifest m;
  std::string where = "the header";
  auto bad = [&](const std::string& why) { return CheckpointError(str(source, ": ", where, ": ", why)); };
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object() || j.value("format", "") != "cadre-checkpoint")
      throw CheckpointError(str(source, ": not a Cadre checkpoint manifest"));
    const int64_t version = json_int(j.at("version"), "version");
    m.version = version == CheckpointManifest::kVersion ? CheckpointManifest::kVersion : -1;
    if (m.version != CheckpointManifest::kVersion)
      throw CheckpointError(str(source, ": manifest version ", version, ", this build reads ", CheckpointManifest::kVersion));
    m.step = json_int(j.at("step"), "step");
    m.world_size = json_int(j.at("world_size"), "world_size");
    if (m.step < 0 || m.world_size < 1) throw bad(str("step ", m.step, " or world_size ", m.world_size, " is out of range"));
    m.strategy = j.at("strategy").get<std::string>();
    for (const auto& [key, value] : j.at("state").items()) m.state[key] = json_int(value, "state." + key);
    m.config_yaml = j.at("config_yaml").get<std::string>();
    where = "files";
    for (const auto& f : j.at("files")) {
      FileRecord record{f.at("name").get<std::string>(), json_int(f.at("bytes"), "bytes"), json_int(f.at("rank"), "rank")};
      if (record.bytes < 0 || record.name.empty() || record.name.find('/') != std::string::npos)
        throw bad(str("file '", record.name, "' of ", record.bytes, " bytes is not a plain file name and size"));
      m.files.push_back(std::move(record));
    }
    for (const auto& [name, t] : j.at("tensors").items()) {
      where = "tensor '" + name + "'";
      TensorRecord r;
      r.dtype = t.at("dtype").get<std::string>();
      r.shape = json_int_list(t.at("shape"), "shape");
      const int64_t elem = dtype_element_size(r.dtype);
      const auto numel = checked_numel(r.shape);
      if (!numel) throw bad("its shape has a negative dimension or more elements than fit 64 bits");
      for (const auto& p : t.at("pieces")) {
        const uint64_t crc = json_uint(p.at("crc32c"), "crc32c");
        if (crc > UINT32_MAX) throw bad(str("crc32c ", crc, " does not fit 32 bits"));
        PieceRecord pr{json_int(p.at("file"), "file"), json_int(p.at("offset"), "offset"), json_int(p.at("start"), "start"),
                       json_int(p.at("count"), "count"), static_cast<uint32_t>(crc)};
        const auto end = checked_add(pr.start, pr.count);
        const auto bytes = checked_mul(pr.count, elem);
        const auto file_end = bytes ? checked_add(pr.offset, *bytes) : std::nullopt;
        if (pr.file < 0 || pr.file >= static_cast<int64_t>(m.files.size()) || pr.start < 0 || pr.count <= 0 || !end ||
            *end > *numel || pr.offset < 0 || !file_end || *file_end > m.files[pr.file].bytes)
          throw bad(str("piece (start ", pr.start, ", count ", pr.count, ", file ", pr.file, ", offset ", pr.offset,
                        ") lies outside its tensor or file"));
        r.pieces.push_back(pr);
      }
      if (coverage == PieceCoverage::Complete) {
        std::string problem = pieces_coverage_problem(r);
        if (!problem.empty()) throw bad(problem + " (the manifest was edited or damaged)");
      }
      m.tensors.emplace(name, std::move(r));
    }
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(str(source, ": malformed manifest (", where, "): ", e.what()));
  } catch (const CheckpointError&) {
    throw;
  } catch (const Error& e) {
    throw CheckpointError(str(source, ": ", where, ": ", e.what()));
  }
  return m;
}

CheckpointManifest manifest_merge(const std::vector<CheckpointManifest>& ranks) {
  CADRE_CHECK(!ranks.empty(), "manifest_merge: no rank indexes");
  CheckpointManifest out = ranks.front();
  out.files.clear();
  out.tensors.clear();
  for (const auto& r : ranks) {
    const int64_t base = static_cast<int64_t>(out.files.size());
    out.files.insert(out.files.end(), r.files.begin(), r.files.end());
    for (const auto& [name, t] : r.tensors) {
      auto [it, fresh] = out.tensors.emplace(name, TensorRecord{t.dtype, t.shape, {}});
      CADRE_CHECK(fresh || (it->second.dtype == t.dtype && it->second.shape == t.shape), "checkpoint tensor '", name,
                  "': ranks disagree on its dtype or shape");
      for (PieceRecord p : t.pieces) {
        p.file += base;
        it->second.pieces.push_back(p);
      }
    }
  }
  for (auto& [name, t] : out.tensors) {
    std::sort(t.pieces.begin(), t.pieces.end(), [](const PieceRecord& a, const PieceRecord& b) { return a.start < b.start; });
    std::string problem = pieces_coverage_problem(t);
    CADRE_CHECK(problem.empty(), "checkpoint tensor '", name, "': ", problem);
  }
  return out;
}

}  // namespace cadre
