// HfDecodeStream::step, following tokenizers' step_decode_stream (see hf_decode_stream.h).
#include "data/hf_decode_stream.h"

#include "core/error.h"
#include "data/hf_tokenizer.h"

namespace cadre {
namespace {

bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

}  // namespace

bool HfDecodeStream::step(int id, std::string* text) {
  if (prefix_.empty() && !ids_.empty()) {
    std::string decoded = tok_.decode(ids_, skip_special_);
    if (!ends_with_replacement(decoded)) {
      prefix_ = decoded;
      prefix_index_ = ids_.size();
    }
  }
  ids_.push_back(id);
  std::string decoded = tok_.decode(ids_, skip_special_);
  if (decoded.size() <= prefix_.size() || ends_with_replacement(decoded)) return false;
  CADRE_CHECK(decoded.compare(0, prefix_.size(), prefix_) == 0, "streamed decoding: token ", id,
              " changed the text already returned ('", prefix_, "' became '", decoded, "')");
  *text = decoded.substr(prefix_.size());
  // Keep only the ids of the text just returned: they give the next id its context.
  size_t new_prefix_index = ids_.size() - prefix_index_;
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
  prefix_ = tok_.decode(ids_, skip_special_);
  prefix_index_ = new_prefix_index;
  return true;
}

}  // namespace cadre
