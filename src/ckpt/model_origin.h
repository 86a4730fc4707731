// The files a model came with besides its weights: the Hugging Face folder's config.json and
// generation_config.json (its dtype, its real bos/eos ids) and its tokenizer files
// (tokenizer.json, tokenizer_config.json, special_tokens_map.json, chat_template.jinja,
// tokenizer.model, ...). Import keeps them byte for byte in the checkpoint's `origin/` folder;
// a run started from a folder or checkpoint (train.init_from) finds them through its config;
// export copies them into the folder it writes, so the model leaves with the tokenizer it
// arrived with.
#pragma once

#include <string>
#include <vector>

namespace cadre {

inline constexpr const char* kOriginDir = "origin";  // inside a checkpoint directory

// The names of the files an origin holds, where a folder has them.
const std::vector<std::string>& model_origin_files();

// Copies the origin files `from_dir` has into `to_dir` (created if needed), byte for byte,
// except those in `skip`. Returns the names copied.
std::vector<std::string> model_origin_copy(const std::string& from_dir, const std::string& to_dir,
                                           const std::vector<std::string>& skip = {});

struct ModelOrigin {
  std::string dir;   // "" when there is none
  std::string note;  // why there is none, when the trail broke ("" when it simply starts here)
};

// The origin of checkpoint `checkpoint_dir`, whose config's train.init_from is `init_from`: its
// own origin/ (an import), else the Hugging Face folder the run started from, else that
// checkpoint's origin, followed back through init_from. None for a model trained from scratch,
// or when the trail reaches a folder no longer there (the note says which; an origin is a
// courtesy to the export, so a broken trail is not an error).
ModelOrigin model_origin_find(const std::string& checkpoint_dir, const std::string& init_from);

// The dtype an origin's config.json names ("dtype", transformers 5; "torch_dtype" before):
// "bfloat16", "float16", "float32", or "" when it names none.
std::string model_origin_dtype(const std::string& origin_dir);

// The tokenizer file that goes with checkpoint `checkpoint_dir` (a tokenizer.model, else a
// tokenizer.json with its folder's other tokenizer files): beside it (an import made before
// origin/), in its origin, or beside its training data (`data_dir`); "" for none.
std::string model_tokenizer_file(const std::string& checkpoint_dir, const ModelOrigin& origin, const std::string& data_dir);

// Whether the origin has a tokenizer (tokenizer.json or tokenizer.model).
bool model_origin_has_tokenizer(const std::string& origin_dir);

}  // namespace cadre
