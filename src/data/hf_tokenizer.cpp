// The encode and decode pipelines of HfTokenizer (see hf_tokenizer.h), in tokenizers' order:
// cut at added tokens (not-normalized ones, then normalized ones), pre-tokenize the text
// between them, run BPE on each piece, wrap with the post-processor's special tokens; decode
// maps ids to tokens and runs the decoder chain.
#include "data/hf_tokenizer.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "data/hf_pipeline.h"
#include "data/utf8.h"

namespace cadre {

struct HfTokenizer::Index {
  detail::AddedTokenMatcher plain, normalized;  // tokenizers' split_trie and split_normalized_trie
  std::unordered_map<int, const detail::AddedToken*> added_by_id;
  // What decoding emits for an added token: its normalized spelling when it is matched
  // normalized (tokenizers' simple_id_to_token), else its content.
  std::unordered_map<int, std::string> decode_form;
  std::unordered_map<std::string, int> added_by_content;
  std::unordered_set<std::string> special_contents;
};

HfTokenizer::HfTokenizer(const std::string& path) : HfTokenizer(detail::load_hf_pipeline(path)) {}

HfTokenizer HfTokenizer::from_json_text(const std::string& text, const std::string& name) {
  return HfTokenizer(detail::load_hf_pipeline_text(text, name));
}

HfTokenizer::HfTokenizer(detail::HfPipeline&& pipeline)
    : p_(std::make_unique<detail::HfPipeline>(std::move(pipeline))), index_(std::make_unique<Index>()) {
  for (const detail::AddedToken& t : p_->added) {
    if (t.normalized) {
      // Matched in normalized text, so by its normalized spelling (tokenizers' normalized_cache).
      detail::AddedToken n = t;
      detail::normalize(p_->normalizer, n.content);
      index_->normalized.add(n);
      index_->decode_form[t.id] = n.content;
    } else {
      index_->plain.add(t);
      index_->decode_form[t.id] = t.content;
    }
    index_->added_by_id[t.id] = &t;
    index_->added_by_content[t.content] = t.id;
    if (t.special) index_->special_contents.insert(t.content);
  }
}

HfTokenizer::~HfTokenizer() = default;

void HfTokenizer::encode_text(const std::string& text, bool at_start, std::vector<int>& ids) const {
  thread_local std::vector<std::string> pieces;
  detail::pre_tokenize(p_->pre_tokenizer, text, at_start, pieces);
  for (const std::string& piece : pieces) p_->model->tokenize(piece, ids);
}

std::vector<int> HfTokenizer::encode(const std::string& text, bool add_special_tokens) const {
  const std::string s = detail::utf8_repair(text);
  std::vector<detail::Segment> first, second;
  std::vector<int> ids;
  // First pass: tokens matched on the raw text; second: on each normalized text between them.
  index_->plain.split(s, 0, s.size(), first);
  for (const detail::Segment& seg : first) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    std::string part = s.substr(seg.begin, seg.end - seg.begin);
    detail::normalize(p_->normalizer, part);
    second.clear();
    index_->normalized.split(part, 0, part.size(), second);
    for (const detail::Segment& sub : second) {
      if (sub.id >= 0) ids.push_back(sub.id);
      else encode_text(part.substr(sub.begin, sub.end - sub.begin), seg.begin == 0 && sub.begin == 0, ids);
    }
  }
  if (add_special_tokens) {
    for (const detail::TemplateWrap& wrap : p_->post_processor) {
      std::vector<int> wrapped = wrap.before;
      wrapped.insert(wrapped.end(), ids.begin(), ids.end());
      wrapped.insert(wrapped.end(), wrap.after.begin(), wrap.after.end());
      ids.swap(wrapped);
    }
  }
  return ids;
}

std::string HfTokenizer::decode(const std::vector<int>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int id : ids) {
    auto added = index_->decode_form.find(id);
    const std::string* token = added != index_->decode_form.end() ? &added->second : p_->model->id_to_token(id);
    if (!token) continue;
    // As tokenizers: by spelling, so a special token matched normalized is never skipped.
    if (skip_special_tokens && index_->special_contents.count(*token)) continue;
    tokens.push_back(*token);
  }
  if (!p_->has_decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  return detail::decode_tokens(p_->decoder, std::move(tokens));
}

int64_t HfTokenizer::vocab_size() const {
  int64_t top = p_->model->max_id();
  for (const auto& t : p_->added) top = std::max<int64_t>(top, t.id);
  return top + 1;
}

int HfTokenizer::token_to_id(const std::string& token) const {
  auto it = index_->added_by_content.find(token);
  return it != index_->added_by_content.end() ? it->second : p_->model->token_to_id(token);
}

std::string HfTokenizer::id_to_token(int id) const {
  auto it = index_->added_by_id.find(id);
  if (it != index_->added_by_id.end()) return it->second->content;
  const std::string* t = p_->model->id_to_token(id);
  return t ? *t : std::string();
}

std::string HfTokenizer::token_bytes(int id) const {
  if (index_->added_by_id.count(id)) return id_to_token(id);
  const std::string* token = p_->model->id_to_token(id);
  if (!token) return "";
  return p_->has_decoder ? detail::token_bytes(p_->decoder, *token) : *token;
}

bool HfTokenizer::is_special(int id) const {
  auto it = index_->added_by_id.find(id);
  return it != index_->added_by_id.end() && it->second->special;
}

}  // namespace cadre
