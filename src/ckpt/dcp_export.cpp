// DCP's .metadata and .distcp from a checkpoint's boxes.
#include "ckpt/dcp_export.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "core/python_pickle.h"
#include "ckpt/tensor_file.h"
#include "core/error.h"
#include "core/file_util.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

// torch 2.x's module paths. (torch 1.13 had these classes under torch.distributed._shard; 2.x
// keeps that package as an alias whose unpickled classes are copies that compare unequal to
// the reader's own, so MetadataIndex lookups fail with a KeyError: only these paths load.)
constexpr const char* kMetadataModule = "torch.distributed.checkpoint.metadata";
constexpr const char* kFilesystemModule = "torch.distributed.checkpoint.filesystem";
constexpr const char* kPropertiesModule = "torch.distributed.checkpoint.metadata";
constexpr const char* kDataFile = "__0_0.distcp";

at::ScalarType scalar_type(const std::string& dtype) {
  if (dtype == "float32") return at::kFloat;
  if (dtype == "bfloat16") return at::kBFloat16;
  if (dtype == "float16") return at::kHalf;
  if (dtype == "int64") return at::kLong;
  if (dtype == "int32") return at::kInt;
  if (dtype == "float64") return at::kDouble;
  return at::kByte;
}

// torch's name of a dtype (torch.float32, ...), a module global.
const char* torch_dtype_name(const std::string& dtype) {
  if (dtype == "float32") return "float32";
  if (dtype == "bfloat16") return "bfloat16";
  if (dtype == "float16") return "float16";
  if (dtype == "int64") return "int64";
  if (dtype == "int32") return "int32";
  if (dtype == "float64") return "float64";
  return "uint8";
}

void torch_size(PickleWriter& p, const std::vector<int64_t>& dims) {
  p.global("torch", "Size").mark();  // torch.Size((d0, d1, ...))
  p.mark();
  for (int64_t d : dims) p.integer(d);
  p.tuple().tuple().reduce();
}

// A dataclass instance: NEWOBJ, then its fields as the state dict. `fields` writes
// name/value pairs.
template <typename Fields>
void dataclass(PickleWriter& p, const char* module, const char* cls, Fields&& fields) {
  p.global(module, cls).new_object().mark();
  fields();
  p.dict().build();
}

struct Chunk {
  Box box;
  int64_t offset = 0, length = 0;  // in the data file
};

}  // namespace

int64_t dcp_export(const CheckpointReader& reader, const std::map<std::string, std::string>& names,
                   const std::string& dir) {
  fs::create_directories(dir);
  const std::string data_path = dir + "/" + kDataFile;
  std::ofstream data(data_path + ".tmp", std::ios::binary | std::ios::trunc);
  CADRE_CHECK(data, "cannot write '", data_path, ".tmp'");
  std::map<std::string, std::vector<Chunk>> chunks;  // by exported name
  int64_t offset = 0, count = 0;
  for (const auto& [tensor, fqn] : names) {
    const TensorRecord& t = reader.tensor(tensor);
    // Boxes as stored; a version-1 range is not a box, so such a tensor goes out whole.
    std::vector<Box> boxes;
    for (const auto& piece : t.pieces) boxes.push_back(piece.box);
    for (const auto& piece : t.pieces)
      if (piece.flat) boxes = {box_whole(t.shape)};
    for (const Box& box : boxes) {
      at::Tensor values = at::empty(box.sizes, scalar_type(t.dtype));
      reader.read(tensor, box, values.data_ptr());
      const std::string bytes = tensor_bytes(values);
      data.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      chunks[fqn].push_back({box, offset, static_cast<int64_t>(bytes.size())});
      offset += static_cast<int64_t>(bytes.size());
      ++count;
    }
  }
  data.flush();
  CADRE_CHECK(data, "cannot write '", data_path, ".tmp'");
  data.close();
  fs::rename(data_path + ".tmp", data_path);

  PickleWriter p;
  dataclass(p, kMetadataModule, "Metadata", [&] {
    p.string("state_dict_metadata").mark();
    for (const auto& [tensor, fqn] : names) {
      const TensorRecord& t = reader.tensor(tensor);
      p.string(fqn);
      dataclass(p, kMetadataModule, "TensorStorageMetadata", [&] {
        // TensorProperties pickles its own state: (dtype, layout, requires_grad,
        // MEM_FORMAT_ENCODING, pin_memory).
        p.string("properties").global(kPropertiesModule, "TensorProperties").new_object().mark();
        p.global("torch", torch_dtype_name(t.dtype)).global("torch", "strided").boolean(false);
        p.global(kPropertiesModule, "_MEM_FORMAT_ENCODING").mark().integer(0).tuple().reduce();  // contiguous
        p.boolean(false).tuple().build();
        p.string("size");
        torch_size(p, t.shape);
        p.string("chunks").mark();
        for (const Chunk& c : chunks[fqn])
          dataclass(p, kMetadataModule, "ChunkStorageMetadata", [&] {
            p.string("offsets");
            torch_size(p, c.box.offsets);
            p.string("sizes");
            torch_size(p, c.box.sizes);
          });
        p.list();
      });
    }
    p.dict();
    p.string("planner_data").none();
    // Where each chunk's bytes are: MetadataIndex(fqn, offsets) -> _StorageInfo.
    p.string("storage_data").mark();
    for (const auto& [fqn, list] : chunks)
      for (size_t i = 0; i < list.size(); ++i) {
        dataclass(p, kMetadataModule, "MetadataIndex", [&] {
          p.string("fqn").string(fqn).string("offset");
          torch_size(p, list[i].box.offsets);
          p.string("index").integer(static_cast<int64_t>(i));
        });
        dataclass(p, kFilesystemModule, "_StorageInfo", [&] {
          p.string("relative_path").string(kDataFile);
          p.string("offset").integer(list[i].offset).string("length").integer(list[i].length);
        });
      }
    p.dict();
  });
  file_write_atomic(dir + "/.metadata", p.finish());
  return count;
}

}  // namespace cadre
