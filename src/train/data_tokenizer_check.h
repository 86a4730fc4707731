// Fine-tuning reads token ids, and an id names a piece only under the tokenizer that made it:
// data prepared with another tokenizer than the model came with trains it on the wrong pieces
// with no other sign (the vocabulary sizes may well agree, as a fresh 8192-piece tokenizer's
// does with any larger model). With train.init_from, the data's tokenizer must be the model's.
#pragma once

#include "core/config.h"
#include "data/manifest.h"

namespace cadre {

// The tokenizer `data` was prepared with (its manifest's identity, else its tokenizer file's)
// against the tokenizer train.init_from's model came with (tokenizer.model, else tokenizer.json):
// a Hugging Face folder's, an imported checkpoint's origin's, or the one beside the data a
// checkpoint was trained on. ConfigError naming both files when they differ. A model without
// tokenizer files takes any data whose vocabulary fits: a warning, from the lead rank. Nothing
// without train.init_from.
void check_data_tokenizer(const Config& config, const DatasetManifest& data, bool lead);

}  // namespace cadre
