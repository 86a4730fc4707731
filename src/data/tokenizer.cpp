// Choosing the tokenizer implementation for a path.
#include "data/tokenizer.h"

#include <filesystem>

#include "core/error.h"
#include "data/hf_folder_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"

namespace fs = std::filesystem;

namespace cadre {

int Tokenizer::eos_id() const {
  const std::vector<int> ids = eos_ids();
  return ids.empty() ? -1 : ids.front();
}

std::string tokenizer_file_in(const std::string& dir) {
  if (dir.empty()) return "";
  for (const char* name : {"tokenizer.model", "tokenizer.json"})
    if (fs::is_regular_file(fs::path(dir) / name)) return (fs::path(dir) / name).string();
  return "";
}

std::unique_ptr<Tokenizer> tokenizer_load(const std::string& path) {
  std::string file = path;
  if (fs::is_directory(path)) {
    file = tokenizer_file_in(path);
    CADRE_CONFIG_CHECK(!file.empty(), "tokenizer folder '", path, "' holds neither tokenizer.model nor tokenizer.json");
  }
  CADRE_CONFIG_CHECK(fs::is_regular_file(file), "tokenizer '", path, "': no such file or folder");
  if (fs::path(file).extension() == ".json") return std::make_unique<HfFolderTokenizer>(file);
  return std::make_unique<SentencePieceTokenizer>(file);
}

}  // namespace cadre
