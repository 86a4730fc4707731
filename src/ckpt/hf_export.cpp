// Streamed, sharded Hugging Face export.
#include "ckpt/hf_export.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "ckpt/hf_shard_plan.h"
#include "ckpt/model_origin.h"
#include "ckpt/safetensors.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/progress.h"
#include "core/sysinfo.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

constexpr int64_t kChunkBytes = int64_t{64} << 20;  // of float32 read at a time

// "layers.2" before "layers.10": the files follow the model's order, as save_pretrained's do.
bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      const std::string x = a.substr(i, ie - i), y = b.substr(j, je - j);
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

struct ExportTensor {
  std::string stored;  // name in the checkpoint
  SafetensorsTensor out;
  at::ScalarType stored_type;
  int64_t numel = 0;
};

// Streams one tensor into `writer`: float32 converted chunk by chunk, anything else as stored.
class TensorStreamer {
 public:
  TensorStreamer(const CheckpointReader& reader, int64_t largest_numel, const HfExportOptions& o)
      : reader_(reader), largest_(largest_numel), merges_(o.merges), base_(o.base) {}

  void stream(const ExportTensor& t, SafetensorsWriter& writer) {
    if (const auto m = merges_.find(t.stored); m != merges_.end()) return stream_merged(t, m->second, writer);
    const bool convert = t.stored_type == at::kFloat && t.out.dtype != at::kFloat;
    const int64_t elem = static_cast<int64_t>(at::elementSize(t.stored_type));
    const int64_t chunk = std::max<int64_t>(1, std::min(largest_, kChunkBytes / elem));  // elements
    ensure(raw_, chunk * elem, at::kByte);
    if (convert) ensure(converted_, chunk, t.out.dtype);
    for (int64_t done = 0; done < t.numel; done += chunk) {
      const int64_t n = std::min(chunk, t.numel - done);
      read(t.stored, done, n, raw_.data_ptr());
      if (!convert) {
        writer.write(raw_.data_ptr(), static_cast<uint64_t>(n * elem));
        continue;
      }
      at::Tensor out = converted_.narrow(0, 0, n);
      out.copy_(at::from_blob(raw_.data_ptr(), {n}, at::kFloat));
      writer.write(out.data_ptr(), static_cast<uint64_t>(n) * at::elementSize(t.out.dtype));
    }
  }

 private:
  // A weight with an adapter merged into it, whole rows at a time: W[rows] + scale * B[rows] A.
  void stream_merged(const ExportTensor& t, const HfMerge& m, SafetensorsWriter& writer) {
    CADRE_CHECK(t.stored_type == at::kFloat, "export --merge: ", t.stored, " is not stored in float32");
    const at::Tensor a = reader_.read_tensor(m.a), b = reader_.read_tensor(m.b);  // [rank, in], [out, rank]
    const int64_t cols = a.size(1), rows = b.size(0);
    CADRE_CHECK(rows * cols == t.numel, "export --merge: ", t.stored, " has ", t.numel, " elements, its adapter makes ",
                rows, " x ", cols);
    const int64_t step = std::max<int64_t>(1, kChunkBytes / (cols * 4));
    ensure(raw_, step * cols * 4, at::kByte);
    for (int64_t row = 0; row < rows; row += step) {
      const int64_t n = std::min(step, rows - row);
      at::Tensor w = at::from_blob(raw_.data_ptr(), {n, cols}, at::kFloat);
      read(t.stored, row * cols, n * cols, w.data_ptr());
      const at::Tensor merged = w.addmm(b.narrow(0, row, n), a, /*beta=*/1.0, /*alpha=*/m.scale).to(t.out.dtype);
      writer.write(merged.data_ptr(), static_cast<uint64_t>(merged.numel()) * at::elementSize(t.out.dtype));
    }
  }

  // Elements [start, start + n) of a stored tensor: from the checkpoint, or (a tensor it leaves
  // out) float32 from the base.
  void read(const std::string& stored, int64_t start, int64_t n, void* out) const {
    if (base_ && !reader_.has(stored)) return base_->read(stored.substr(6), start, n, static_cast<float*>(out));
    reader_.read(stored, start, n, out);
  }

  static void ensure(at::Tensor& buffer, int64_t numel, at::ScalarType type) {
    if (!buffer.defined() || buffer.numel() < numel || buffer.scalar_type() != type) buffer = at::empty({numel}, type);
  }

  const CheckpointReader& reader_;
  int64_t largest_;
  const std::map<std::string, HfMerge>& merges_;
  const ParamSource* base_;
  at::Tensor raw_, converted_;
};

std::vector<ExportTensor> plan_tensors(const CheckpointReader& reader, const std::map<std::string, std::string>& names,
                                       at::ScalarType dtype, const HfExportOptions& o) {
  std::vector<ExportTensor> list;
  for (const auto& [stored, external] : names) {
    const auto base = o.base_tensors.find(stored);
    const bool from_base = !reader.has(stored) && base != o.base_tensors.end();
    const std::vector<int64_t>& shape = from_base ? base->second : reader.tensor(stored).shape;
    ExportTensor t;
    t.stored = stored;
    t.stored_type = from_base ? at::kFloat : checkpoint_scalar_type(reader.tensor(stored).dtype);
    t.numel = 1;
    for (int64_t d : shape) t.numel *= d;
    t.out = {external, t.stored_type == at::kFloat ? dtype : t.stored_type, shape};
    list.push_back(std::move(t));
  }
  std::sort(list.begin(), list.end(), [](const ExportTensor& a, const ExportTensor& b) { return natural_less(a.out.name, b.out.name); });
  return list;
}

// This rank's files (file k goes to rank k mod world).
int64_t write_files(const CheckpointReader& reader, const std::vector<ExportTensor>& tensors,
                    const std::vector<HfShardFile>& files, const HfExportOptions& o) {
  int64_t largest = 1, mine = 0, bytes = 0;
  for (const auto& t : tensors) largest = std::max(largest, t.numel);
  for (size_t k = 0; k < files.size(); ++k)
    if (static_cast<int64_t>(k) % o.world_size == o.rank) mine += static_cast<int64_t>(files[k].bytes);
  TensorStreamer streamer(reader, largest, o);
  Progress progress(str("export: rank ", o.rank, " writing"), mine, "B", 2.0);
  for (size_t k = 0; k < files.size(); ++k) {
    if (static_cast<int64_t>(k) % o.world_size != o.rank) continue;
    std::vector<SafetensorsTensor> list;
    for (size_t i : files[k].tensors) list.push_back(tensors[i].out);
    SafetensorsWriter writer(o.out + "/" + files[k].name, list, {{"format", "pt"}});
    for (size_t i : files[k].tensors) {
      streamer.stream(tensors[i], writer);
      bytes += static_cast<int64_t>(tensors[i].out.bytes());
      progress.update(bytes);
    }
    writer.finish();
  }
  progress.finish();
  return bytes;
}

const char* dtype_name(at::ScalarType t) {
  return t == at::kBFloat16 ? "bfloat16" : t == at::kHalf ? "float16" : "float32";
}

// Removes weights files of an earlier export into the folder that this one did not write.
void remove_stale_weights(const std::string& out, const std::vector<HfShardFile>& files) {
  for (const auto& entry : fs::directory_iterator(out)) {
    const std::string f = entry.path().filename().string();
    const bool written = f == "model.safetensors.index.json" ? files.size() > 1
                         : std::any_of(files.begin(), files.end(), [&](const HfShardFile& x) { return x.name == f; });
    if (hf_is_weights_file(f) && !written) fs::remove(entry.path());
  }
}

// A SentencePiece model to ship: --tokenizer; else, when the origin has no tokenizer files, the
// model's own (model_tokenizer_file) when it is one; "" for none.
std::string sentencepiece_to_ship(const CheckpointReader& reader, const Config& config, const ModelOrigin& origin,
                                  const HfExportOptions& o) {
  if (!o.tokenizer.empty() || model_origin_has_tokenizer(origin.dir)) return o.tokenizer;
  const std::string file = model_tokenizer_file(reader.dir(), origin, config.data.dir);
  return fs::path(file).extension() == ".model" ? file : "";
}

// Where the tokenizer files to copy are: the origin's; else, for a model trained from scratch on
// data prepared with a tokenizer.json, its data.dir's.
std::string tokenizer_files_dir(const CheckpointReader& reader, const Config& config, const ModelOrigin& origin) {
  if (model_origin_has_tokenizer(origin.dir)) return origin.dir;
  const std::string file = model_tokenizer_file(reader.dir(), origin, config.data.dir);
  return fs::path(file).extension() == ".json" ? fs::path(file).parent_path().string() : origin.dir;
}

// generation_config.json, unless the origin's was copied: the token ids config.json has.
void write_generation_config(const std::string& out, const nlohmann::json& cfg) {
  nlohmann::json gen = {{"_from_model_config", true}};
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (cfg.contains(key)) gen[key] = cfg[key];
  file_write_atomic(out + "/generation_config.json", gen.dump(2) + "\n");
}

// The lead's files: config.json, generation_config.json, the tokenizer (the origin's files, or a
// SentencePiece model); stale weights files removed. Returns what it says about the tokenizer.
std::string write_metadata(const CheckpointReader& reader, const Config& config, const StateDictAdapter& adapter,
                           const std::vector<HfShardFile>& files, const std::vector<std::string>& names,
                           int64_t parameters, at::ScalarType dtype, const ModelOrigin& origin, const HfExportOptions& o) {
  if (files.size() > 1) file_write_atomic(o.out + "/model.safetensors.index.json", hf_index_json(files, names, parameters));
  remove_stale_weights(o.out, files);
  const std::string spm = sentencepiece_to_ship(reader, config, origin, o);
  std::vector<std::string> skip = {"config.json"};  // written from the model below
  if (!spm.empty())
    for (const auto& f : model_origin_files())
      if (f != "generation_config.json") skip.push_back(f);
  const std::string files_dir = spm.empty() ? tokenizer_files_dir(reader, config, origin) : origin.dir;
  const std::vector<std::string> copied =
      files_dir.empty() ? std::vector<std::string>{} : model_origin_copy(files_dir, o.out, skip);
  nlohmann::json cfg = nlohmann::json::parse(adapter.config_json());
  std::string said;
  if (!spm.empty()) {
    adapter.write_extras(o.out, spm);
    const auto [bos, eos] = o.tokenizer_ids ? o.tokenizer_ids(spm) : std::pair<int64_t, int64_t>{1, 2};
    cfg["bos_token_id"] = bos;
    cfg["eos_token_id"] = eos;
    said = str("tokenizer.model from ", spm);
  } else {
    const std::string source_path = origin.dir + "/config.json";
    const nlohmann::json source = origin.dir.empty() || !fs::is_regular_file(source_path)
                                      ? nlohmann::json::object()
                                      : nlohmann::json::parse(file_read(source_path), nullptr, /*allow_exceptions=*/false);
    for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"})
      if (source.is_object() && source.contains(key)) cfg[key] = source[key];
    said = copied.empty() ? "no tokenizer: the folder holds the model only (pass --tokenizer to add a SentencePiece model)"
                          : "from " + files_dir + ":";
    for (const auto& f : copied) said += " " + f;
  }
  if (!origin.note.empty()) said += " (origin: " + origin.note + ")";
  cfg["dtype"] = dtype_name(dtype);
  cfg["torch_dtype"] = dtype_name(dtype);
  file_write_atomic(o.out + "/config.json", cfg.dump(2) + "\n");
  if (std::find(copied.begin(), copied.end(), "generation_config.json") == copied.end()) write_generation_config(o.out, cfg);
  return said;
}

}  // namespace

uint64_t hf_parse_size(const std::string& text) {
  // transformers' convert_file_size_to_int: an integer, optionally with KiB/MiB/GiB (binary) or
  // KB/MB/GB (decimal) in any case, where a decimal unit ending in a lowercase "b" means bits.
  std::string upper = text;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const std::vector<std::pair<std::string, uint64_t>> units = {
      {"GIB", uint64_t{1} << 30}, {"MIB", uint64_t{1} << 20}, {"KIB", uint64_t{1} << 10},
      {"GB", 1'000'000'000},      {"MB", 1'000'000},          {"KB", 1'000},          {"", 1}};
  for (const auto& [unit, scale] : units) {
    if (upper.size() <= unit.size() || upper.compare(upper.size() - unit.size(), unit.size(), unit) != 0) continue;
    const std::string digits = text.substr(0, text.size() - unit.size());
    CADRE_CONFIG_CHECK(digits.find_first_not_of("0123456789") == std::string::npos && digits.size() <= 12,
                       "--max-shard-size '", text, "': an integer and a unit, as transformers takes it (5GB, 500MB, 100MiB)");
    const uint64_t bytes = std::stoull(digits) * scale;
    const bool bits = unit.size() == 2 && text.back() == 'b';
    CADRE_CONFIG_CHECK(bytes > 0, "--max-shard-size '", text, "' must be more than 0 bytes");
    return bits ? bytes / 8 : bytes;
  }
  throw ConfigError(str("--max-shard-size '", text, "': an integer and a unit (5GB, 500MB, 100MiB)"));
}

at::ScalarType hf_export_dtype(const std::string& name) {
  if (name == "bfloat16" || name == "bf16") return at::kBFloat16;
  if (name == "float16" || name == "fp16" || name == "half") return at::kHalf;
  if (name == "float32" || name == "fp32" || name == "float") return at::kFloat;
  throw ConfigError(str("--dtype '", name, "': the export writes bfloat16, float16 or float32"));
}

std::string hf_export(const CheckpointReader& reader, const Config& config, const StateDictAdapter& adapter,
                      const std::map<std::string, std::string>& names, const HfExportOptions& o) {
  const ModelOrigin origin = model_origin_find(reader.dir(), config.train.init_from);
  const std::string origin_dtype = model_origin_dtype(origin.dir);
  std::string dtype_text = o.dtype;
  if (dtype_text.empty()) dtype_text = origin_dtype == "float32" || origin_dtype == "float16" ? origin_dtype : "bfloat16";
  const at::ScalarType dtype = hf_export_dtype(dtype_text);
  const std::vector<ExportTensor> tensors = plan_tensors(reader, names, dtype, o);
  std::vector<uint64_t> sizes;
  std::vector<std::string> external;
  int64_t parameters = 0;
  for (const auto& t : tensors) {
    sizes.push_back(t.out.bytes());
    external.push_back(t.out.name);
    parameters += t.numel;
  }
  const std::vector<HfShardFile> files = hf_shard_plan(sizes, o.max_file_bytes);
  auto agree = [&](bool ok) { return o.agree ? o.agree(ok) : ok; };

  const int64_t rss_before = process_rss_bytes();
  std::string error, said;
  int64_t bytes = 0;
  try {
    fs::create_directories(o.out);
    bytes = write_files(reader, tensors, files, o);
  } catch (const std::exception& e) {
    error = str("rank ", o.rank, ": ", e.what());
  }
  CADRE_CHECK(agree(error.empty()), "export to '", o.out, "' failed: ",
              error.empty() ? "another rank failed (its log says why)" : error);
  if (o.rank == 0) {
    try {
      said = write_metadata(reader, config, adapter, files, external, parameters, dtype, origin, o);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  CADRE_CHECK(agree(error.empty()), "export to '", o.out, "' failed: ",
              error.empty() ? "the lead rank could not write config.json and the tokenizer (its log says why)" : error);
  std::string summary = str("wrote a Hugging Face folder from ", reader.dir(), " to ", o.out, ": ", tensors.size(),
                            " tensors (", parameters, " parameters) in ", dtype_name(dtype), ", ", files.size(),
                            files.size() == 1 ? " file (model.safetensors)" : " files with model.safetensors.index.json");
  if (o.world_size > 1) summary += str("; rank ", o.rank, " wrote ", bytes, " bytes");
  summary += str("; peak RSS ", process_peak_rss_bytes() >> 20, " MiB (", rss_before >> 20, " MiB before the first tensor)");
  if (o.rank == 0) summary += "; tokenizer " + said;
  return summary;
}

}  // namespace cadre
