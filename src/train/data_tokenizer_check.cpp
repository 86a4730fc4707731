// Which tokenizer a fine-tuned model came with, and the data's against it.
#include "train/data_tokenizer_check.h"

#include <filesystem>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/model_origin.h"
#include "core/error.h"
#include "core/log.h"
#include "data/tokenizer.h"
#include "data/tokenizer_identity.h"
#include "train/init_from.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

struct ModelTokenizer {
  std::string model;  // what train.init_from is, for messages
  std::string file;   // its tokenizer.model or tokenizer.json; "" for none
};

ModelTokenizer model_tokenizer(const Config& c) {
  ModelTokenizer t;
  if (init_from_hf(c)) {
    t.model = "Hugging Face folder '" + c.train.init_from + "'";
    t.file = tokenizer_file_in(c.train.init_from);
    return t;
  }
  const std::string checkpoint = checkpoint_locate(c.train.init_from);
  t.model = "checkpoint '" + checkpoint + "'";
  const Config trained = config_parse(CheckpointReader(checkpoint).manifest().config_yaml, checkpoint, {});
  const ModelOrigin origin = model_origin_find(checkpoint, trained.train.init_from);
  // An origin with tokenizer files decides; a model trained from scratch has its data's.
  t.file = model_origin_has_tokenizer(origin.dir) ? tokenizer_file_in(origin.dir)
                                                  : model_tokenizer_file(checkpoint, origin, trained.data.dir);
  return t;
}

}  // namespace

void check_data_tokenizer(const Config& c, const DatasetManifest& data, bool lead) {
  if (c.train.init_from.empty() || data.kind != "tokens") return;
  const ModelTokenizer model = model_tokenizer(c);
  const std::string data_file = (fs::path(c.data.dir) / data.tokenizer).string();
  if (model.file.empty()) {
    if (lead)
      log::warn(str("train.init_from's ", model.model, " came with no tokenizer: data.dir '", c.data.dir,
                    "' (tokenized by ", data_file, ") is taken on trust to use the model's token ids"));
    return;
  }
  std::string data_identity = data.tokenizer_identity;
  if (data_identity.empty()) {
    CADRE_CONFIG_CHECK(fs::is_regular_file(data_file), "data.dir '", c.data.dir, "': its manifest names tokenizer ",
                       data_file, ", which is missing, so it cannot be checked against the model's ", model.file);
    data_identity = tokenizer_identity(data_file);
  }
  const std::string model_identity = tokenizer_identity(model.file);
  CADRE_CONFIG_CHECK(data_identity == model_identity, "data.dir '", c.data.dir, "' was prepared with another tokenizer (",
                     data_file, ", ", data_identity, ") than train.init_from's ", model.model, " came with (",
                     model.file, ", ", model_identity,
                     "): its token ids would be read as other pieces. Prepare the data with the model's: "
                     "cadre data prepare --tokenizer ", fs::path(model.file).parent_path().string(), " ...");
}

}  // namespace cadre
