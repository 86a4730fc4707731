// Loading a Hugging Face folder's tokenizer files and choosing its BOS and EOS ids.
#include "data/hf_folder_tokenizer.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/file_util.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

std::string read_if_present(const fs::path& path) { return fs::is_regular_file(path) ? file_read(path.string()) : ""; }

void add_unique(std::vector<int>& ids, int id) {
  if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
}

}  // namespace

HfFolderTokenizer::HfFolderTokenizer(const std::string& tokenizer_json) : path_(tokenizer_json), hf_(tokenizer_json) {
  const fs::path dir = fs::path(tokenizer_json).parent_path();
  const std::string config_path = (dir / "tokenizer_config.json").string();
  if (const std::string text = read_if_present(config_path); !text.empty())
    config_ = hf_tokenizer_config_parse(text, config_path);
  bos_id_ = config_.bos_token.empty() ? -1 : special_id(config_.bos_token, "bos_token");
  // The tokenizer's own EOS first: it ends each document of prepared data.
  if (!config_.eos_token.empty()) add_unique(eos_ids_, special_id(config_.eos_token, "eos_token"));
  for (const char* name : {"generation_config.json", "config.json"}) {
    const std::string path = (dir / name).string();
    if (const std::string text = read_if_present(path); !text.empty())
      for (int id : hf_eos_token_ids_parse(text, path, vocab_size())) add_unique(eos_ids_, id);
  }
}

int HfFolderTokenizer::special_id(const std::string& token, const char* field) const {
  const int id = hf_.token_to_id(token);
  CADRE_CONFIG_CHECK(id >= 0, (fs::path(path_).parent_path() / "tokenizer_config.json").string(), ": field '", field,
                     "': '", token, "' is not a token of ", path_);
  return id;
}

}  // namespace cadre
