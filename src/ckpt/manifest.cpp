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

int64_t checksum_block_count(int64_t bytes, int64_t block_bytes) {
  if (block_bytes <= 0 || bytes <= block_bytes) return 0;
  return (bytes + block_bytes - 1) / block_bytes;
}

std::string manifest_to_json(const CheckpointManifest& m) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : m.files) files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"rank", f.rank}});
  nlohmann::json tensors = nlohmann::json::object();
  for (const auto& [name, t] : m.tensors) {
    nlohmann::json pieces = nlohmann::json::array();
    for (const auto& p : t.pieces) {
      nlohmann::json piece;
      if (p.flat)
        piece = {{"file", p.file}, {"offset", p.offset}, {"start", p.box.offsets[0]},
                 {"count", p.box.sizes[0]}, {"crc32c", p.crc32c}};
      else
        piece = {{"file", p.file}, {"offset", p.offset}, {"offsets", p.box.offsets},
                 {"sizes", p.box.sizes}, {"crc32c", p.crc32c}};
      if (!p.block_crc32c.empty()) piece["block_crc32c"] = p.block_crc32c;
      pieces.push_back(std::move(piece));
    }
    tensors[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"pieces", pieces}};
  }
  nlohmann::json j = {{"format", "cadre-checkpoint"}, {"version", m.version},     {"step", m.step},
                      {"world_size", m.world_size},    {"strategy", m.strategy},   {"state", m.state},
                      {"files", files},                {"tensors", tensors},       {"config_yaml", m.config_yaml}};
  if (m.checksum_block_bytes > 0) j["checksum_block_bytes"] = m.checksum_block_bytes;
  return j.dump(1) + "\n";
}

namespace {

// A piece's block checksums ("block_crc32c", absent for a piece checked whole): one per block
// of `block_bytes` in its `bytes`, each 32 bits. `bad` makes the error naming where.
template <typename Bad>
std::vector<uint32_t> parse_block_crcs(const nlohmann::json& piece, int64_t bytes, int64_t block_bytes, Bad&& bad) {
  std::vector<uint32_t> crcs;
  if (!piece.contains("block_crc32c")) return crcs;
  const nlohmann::json& list = piece.at("block_crc32c");
  const int64_t want = checksum_block_count(bytes, block_bytes);
  if (!list.is_array() || want == 0 || static_cast<int64_t>(list.size()) != want)
    throw bad(str("a piece of ", bytes, " bytes lists ", list.is_array() ? list.size() : 0, " block checksums where ",
                  block_bytes == 0 ? "the manifest names no block size" : str("blocks of ", block_bytes,
                  " bytes make ", want)));
  crcs.reserve(list.size());
  for (const auto& c : list) {
    const uint64_t crc = json_uint(c, "block_crc32c");
    if (crc > UINT32_MAX) throw bad(str("block_crc32c ", crc, " does not fit 32 bits"));
    crcs.push_back(static_cast<uint32_t>(crc));
  }
  return crcs;
}

}  // namespace

CheckpointManifest manifest_parse(const std::string& text, const std::string& source, PieceCoverage coverage) {
  CheckpointManifest m;
  std::string where = "the header";
  auto bad = [&](const std::string& why) { return CheckpointError(str(source, ": ", where, ": ", why)); };
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object() || j.value("format", "") != "cadre-checkpoint")
      throw CheckpointError(str(source, ": not a Cadre checkpoint manifest"));
    const int64_t version = json_int(j.at("version"), "version");
    if (version != 1 && version != CheckpointManifest::kVersion)
      throw CheckpointError(str(source, ": manifest version ", version, ", this build reads 1 and ",
                                CheckpointManifest::kVersion));
    m.version = static_cast<int>(version);
    m.step = json_int(j.at("step"), "step");
    m.world_size = json_int(j.at("world_size"), "world_size");
    if (m.step < 0 || m.world_size < 1) throw bad(str("step ", m.step, " or world_size ", m.world_size, " is out of range"));
    m.strategy = j.at("strategy").get<std::string>();
    for (const auto& [key, value] : j.at("state").items()) m.state[key] = json_int(value, "state." + key);
    m.config_yaml = j.at("config_yaml").get<std::string>();
    m.checksum_block_bytes = j.contains("checksum_block_bytes")
                                 ? json_int(j.at("checksum_block_bytes"), "checksum_block_bytes") : 0;
    if (m.checksum_block_bytes < 0 || m.checksum_block_bytes % 8 != 0 || m.checksum_block_bytes > (int64_t(1) << 40))
      throw bad(str("checksum_block_bytes ", m.checksum_block_bytes, " is not a multiple of 8 up to 1 TiB"));
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
        PieceRecord pr;
        pr.file = json_int(p.at("file"), "file");
        pr.offset = json_int(p.at("offset"), "offset");
        pr.crc32c = static_cast<uint32_t>(crc);
        pr.flat = m.version == 1;  // version 1: a range of the flattened tensor
        if (pr.flat)
          pr.box = {{json_int(p.at("start"), "start")}, {json_int(p.at("count"), "count")}};
        else
          pr.box = {json_int_list(p.at("offsets"), "offsets"), json_int_list(p.at("sizes"), "sizes")};
        // box_fits compares without overflow; inside the tensor, the box's numel fits too.
        const bool inside = pr.flat ? box_fits(pr.box, {*numel}) : box_fits(pr.box, r.shape);
        const auto bytes = inside ? checked_mul(pr.numel(), elem) : std::nullopt;
        const auto file_end = bytes ? checked_add(pr.offset, *bytes) : std::nullopt;
        if (pr.file < 0 || pr.file >= static_cast<int64_t>(m.files.size()) || !inside || pr.offset < 0 || !file_end ||
            *file_end > m.files[pr.file].bytes)
          throw bad(str("piece ", box_text(pr.box), pr.flat ? " (flat)" : "", " in file ", pr.file, " at offset ",
                        pr.offset, " lies outside its tensor or file"));
        pr.block_crc32c = parse_block_crcs(p, *bytes, m.checksum_block_bytes, bad);
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
    CADRE_CHECK(r.checksum_block_bytes == out.checksum_block_bytes, "checkpoint ranks disagree on checksum_block_bytes (",
                r.checksum_block_bytes, " and ", out.checksum_block_bytes, ")");
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
    std::sort(t.pieces.begin(), t.pieces.end(),
              [](const PieceRecord& a, const PieceRecord& b) { return a.box.offsets < b.box.offsets; });
    std::string problem = pieces_coverage_problem(t);
    CADRE_CHECK(problem.empty(), "checkpoint tensor '", name, "': ", problem);
  }
  return out;
}

std::string pieces_coverage_problem(const TensorRecord& t) {
  // The pieces tile the tensor exactly when their runs, sorted, follow one another from the
  // first element to the last. Their number is bounded first, so that a damaged or hostile
  // manifest (a huge tensor cut into one-element columns) cannot make the runs exhaust memory.
  constexpr int64_t kMaxRuns = int64_t(1) << 22;
  int64_t run_count = 0;
  for (const auto& p : t.pieces) {
    const int64_t n = p.flat ? 1 : box_run_count(t.shape, p.box);
    if (n > kMaxRuns - run_count)
      return str("its pieces are cut into more than ", kMaxRuns, " runs of consecutive elements");
    run_count += n;
  }
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
