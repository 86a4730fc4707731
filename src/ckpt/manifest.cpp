// manifest.json: writing, parsing with structural checks, and merging the ranks' indexes.
#include "ckpt/manifest.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_error.h"
#include "core/error.h"

namespace cadre {

int64_t TensorRecord::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<Run> TensorRecord::runs(const PieceRecord& p) const {
  return p.flat ? std::vector<Run>{{p.box.offsets[0], 0, p.box.sizes[0]}} : box_runs(shape, p.box);
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
    for (const auto& p : t.pieces) {
      if (p.flat)
        pieces.push_back({{"file", p.file}, {"offset", p.offset}, {"start", p.box.offsets[0]},
                          {"count", p.box.sizes[0]}, {"crc32c", p.crc32c}});
      else
        pieces.push_back({{"file", p.file}, {"offset", p.offset}, {"offsets", p.box.offsets},
                          {"sizes", p.box.sizes}, {"crc32c", p.crc32c}});
    }
    tensors[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"pieces", pieces}};
  }
  nlohmann::json j = {{"format", "cadre-checkpoint"}, {"version", m.version},     {"step", m.step},
                      {"world_size", m.world_size},    {"strategy", m.strategy},   {"state", m.state},
                      {"files", files},                {"tensors", tensors},       {"config_yaml", m.config_yaml}};
  return j.dump(1) + "\n";
}

CheckpointManifest manifest_parse(const std::string& text, const std::string& source) {
  CheckpointManifest m;
  std::string where = "the header";
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    if (j.value("format", "") != "cadre-checkpoint") throw CheckpointError(str(source, ": not a Cadre checkpoint manifest"));
    m.version = j.at("version").get<int>();
    if (m.version != 1 && m.version != CheckpointManifest::kVersion)
      throw CheckpointError(str(source, ": manifest version ", m.version, ", this build reads 1 and ",
                                CheckpointManifest::kVersion));
    m.step = j.at("step").get<int64_t>();
    m.world_size = j.at("world_size").get<int64_t>();
    m.strategy = j.at("strategy").get<std::string>();
    m.state = j.at("state").get<std::map<std::string, int64_t>>();
    m.config_yaml = j.at("config_yaml").get<std::string>();
    where = "files";
    for (const auto& f : j.at("files"))
      m.files.push_back({f.at("name").get<std::string>(), f.at("bytes").get<int64_t>(), f.at("rank").get<int64_t>()});
    for (const auto& [name, t] : j.at("tensors").items()) {
      where = "tensor '" + name + "'";
      TensorRecord r;
      r.dtype = t.at("dtype").get<std::string>();
      r.shape = t.at("shape").get<std::vector<int64_t>>();
      const int64_t elem = dtype_element_size(r.dtype);
      for (const auto& p : t.at("pieces")) {
        PieceRecord pr;
        pr.file = p.at("file").get<int64_t>();
        pr.offset = p.at("offset").get<int64_t>();
        pr.crc32c = p.at("crc32c").get<uint32_t>();
        pr.flat = m.version == 1;
        if (pr.flat) {
          pr.box = {{p.at("start").get<int64_t>()}, {p.at("count").get<int64_t>()}};
        } else {
          pr.box = {p.at("offsets").get<std::vector<int64_t>>(), p.at("sizes").get<std::vector<int64_t>>()};
        }
        const bool inside = pr.flat ? box_fits(pr.box, {r.numel()}) : box_fits(pr.box, r.shape);
        if (pr.file < 0 || pr.file >= static_cast<int64_t>(m.files.size()) || !inside || pr.offset < 0 ||
            pr.offset + pr.numel() * elem > m.files[pr.file].bytes)
          throw CheckpointError(str(source, ": ", where, " has a piece outside its tensor or file"));
        r.pieces.push_back(pr);
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
    // Pieces in the order of their first element: boxes of one rank, then of the next.
    std::sort(t.pieces.begin(), t.pieces.end(), [](const PieceRecord& a, const PieceRecord& b) { return a.box.offsets < b.box.offsets; });
    std::string problem = pieces_coverage_problem(t);
    CADRE_CHECK(problem.empty(), "checkpoint tensor '", name, "': ", problem);
  }
  return out;
}

std::string pieces_coverage_problem(const TensorRecord& t) {
  // The pieces tile the tensor exactly when their runs, sorted, follow one another from the
  // first element to the last.
  std::vector<Run> runs;
  for (const auto& p : t.pieces) {
    std::vector<Run> r = t.runs(p);
    runs.insert(runs.end(), r.begin(), r.end());
  }
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.at < b.at; });
  int64_t next = 0;
  for (const auto& r : runs) {
    if (r.at != next)
      return str("elements ", std::min(next, r.at), "..", std::max(next, r.at),
                 r.at > next ? " are missing" : " are stored twice");
    next = r.at + r.count;
  }
  if (next != t.numel()) return str("elements ", next, "..", t.numel(), " are missing");
  return "";
}

}  // namespace cadre
