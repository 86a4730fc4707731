// Which tokenizer a fine-tuned model came with, and the data's against it.
#include "train/data_tokenizer_check.h"

#include <filesystem>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/model_origin.h"
#include "core/error.h"
#include "core/log.h"
#include "data/tokenizer_identity.h"
#include "train/init_from.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

struct ModelTokenizer {
  std::string model;          // what train.init_from is, for messages
  std::string sentencepiece;  // its tokenizer.model; "" for none
  std::string other;          // a tokenizer file data prepare cannot use (tokenizer.json); "" for none
};

std::string file_in(const std::string& dir, const char* name) {
  const fs::path path = fs::path(dir) / name;
  return !dir.empty() && fs::is_regular_file(path) ? path.string() : "";
}

// The tokenizer files of a model folder or origin: its SentencePiece model, else its tokenizer.json.
void take_files(const std::string& dir, ModelTokenizer& t) {
  t.sentencepiece = file_in(dir, "tokenizer.model");
  if (t.sentencepiece.empty()) t.other = file_in(dir, "tokenizer.json");
}

ModelTokenizer model_tokenizer(const Config& c) {
  ModelTokenizer t;
  if (init_from_hf(c)) {
    t.model = "Hugging Face folder '" + c.train.init_from + "'";
    take_files(c.train.init_from, t);
    return t;
  }
  const std::string checkpoint = checkpoint_locate(c.train.init_from);
  t.model = "checkpoint '" + checkpoint + "'";
  const Config trained = config_parse(CheckpointReader(checkpoint).manifest().config_yaml, checkpoint, {});
  const ModelOrigin origin = model_origin_find(checkpoint, trained.train.init_from);
  if (model_origin_has_tokenizer(origin.dir)) {
    take_files(origin.dir, t);
  } else {
    t.sentencepiece = model_sentencepiece(checkpoint, origin, trained.data.dir);  // trained from scratch: its data's
  }
  return t;
}

}  // namespace

void check_data_tokenizer(const Config& c, const DatasetManifest& data, bool lead) {
  if (c.train.init_from.empty() || data.kind != "tokens") return;
  const ModelTokenizer model = model_tokenizer(c);
  const std::string data_file = (fs::path(c.data.dir) / data.tokenizer).string();
  if (model.sentencepiece.empty() && model.other.empty()) {
    if (lead)
      log::warn(str("train.init_from's ", model.model, " came with no tokenizer: data.dir '", c.data.dir,
                    "' (tokenized by ", data_file, ") is taken on trust to use the model's token ids"));
    return;
  }
  CADRE_CONFIG_CHECK(model.other.empty(), "data.dir '", c.data.dir, "' was prepared with the SentencePiece model ",
                     data_file, ", but train.init_from's ", model.model, " came with ", model.other,
                     ", which `cadre data prepare` cannot tokenize with yet: the data's token ids are not the model's");
  std::string data_identity = data.tokenizer_identity;
  if (data_identity.empty()) {
    CADRE_CONFIG_CHECK(fs::is_regular_file(data_file), "data.dir '", c.data.dir, "': its manifest names tokenizer ",
                       data_file, ", which is missing, so it cannot be checked against the model's ", model.sentencepiece);
    data_identity = tokenizer_identity(data_file);
  }
  const std::string model_identity = tokenizer_identity(model.sentencepiece);
  CADRE_CONFIG_CHECK(data_identity == model_identity, "data.dir '", c.data.dir, "' was prepared with another tokenizer (",
                     data_file, ", ", data_identity, ") than train.init_from's ", model.model, " came with (",
                     model.sentencepiece, ", ", model_identity,
                     "): its token ids would be read as other pieces. Prepare the data with the model's: "
                     "cadre data prepare --tokenizer ", model.sentencepiece, " ...");
}

}  // namespace cadre
