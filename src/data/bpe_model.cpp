// BPE merging as the tokenizers library does it (see bpe_model.h): the initial symbols are the
// word's characters (or their <0xXX> bytes, or the unknown token), then the best-ranked pair
// is merged, leftmost first among equal ranks, until no pair in the merge table remains.
#include "data/bpe_model.h"

#include <cstdio>
#include <queue>

#include "core/error.h"
#include "data/utf8.h"

namespace cadre::detail {
namespace {

constexpr size_t kCacheMaxEntries = 200000;
constexpr size_t kCacheMaxWordBytes = 256;

struct Candidate {
  uint32_t rank;
  uint32_t pos;
  int new_id;
  // std::priority_queue is a max-heap: invert so the lowest rank, then lowest position, is on top.
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

struct Symbol {
  int id;
  int prev, next;
  bool alive;
};

}  // namespace

BpeModel::BpeModel(std::unordered_map<std::string, int> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
                   const std::string& where)
    : vocab_(std::move(vocab)), options_(std::move(options)), where_(where) {
  int max_id = -1;
  for (const auto& [token, id] : vocab_) {
    CADRE_CONFIG_CHECK(id >= 0, where_, ": field 'model.vocab': token '", token, "' has negative id ", id);
    max_id = std::max(max_id, id);
  }
  by_id_.assign(static_cast<size_t>(max_id + 1), nullptr);
  for (const auto& entry : vocab_) by_id_[static_cast<size_t>(entry.second)] = &entry.first;
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    int ia = token_to_id(a), ib = token_to_id(b), merged = token_to_id(a + b);
    CADRE_CONFIG_CHECK(ia >= 0 && ib >= 0, where_, ": field 'model.merges[", rank, "]': '", ia < 0 ? a : b,
                       "' is not in model.vocab");
    CADRE_CONFIG_CHECK(merged >= 0, where_, ": field 'model.merges[", rank, "]': the merged token '", a + b,
                       "' is not in model.vocab");
    // A repeated pair takes its last rank: tokenizers collects the merges into a map in order.
    merges_[pair_key(ia, ib)] = Merge{static_cast<uint32_t>(rank), merged};
  }
  if (!options_.unk_token.empty()) unk_id_ = token_to_id(options_.unk_token);
}

int BpeModel::token_to_id(const std::string& token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* BpeModel::id_to_token(int id) const {
  return id >= 0 && static_cast<size_t>(id) < by_id_.size() ? by_id_[static_cast<size_t>(id)] : nullptr;
}

const BpeModel::Merge* BpeModel::find_merge(int a, int b) const {
  auto it = merges_.find(pair_key(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::initial_symbols(const std::string& word, std::vector<int>& ids) const {
  int pending_unk = 0;  // unknown characters not yet emitted (fuse_unk joins them)
  auto flush_unk = [&] {
    for (; pending_unk > 0; --pending_unk) ids.push_back(unk_id_);
  };
  std::string ch;
  for (size_t i = 0; i < word.size();) {
    size_t len = utf8_char_len(static_cast<unsigned char>(word[i]));
    ch.assign(word, i, len);
    i += len;
    int id = token_to_id(ch);
    if (id >= 0) {
      flush_unk();
      ids.push_back(id);
      continue;
    }
    if (options_.byte_fallback) {
      std::vector<int> bytes;
      char name[8];
      for (unsigned char b : ch) {
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        int bid = token_to_id(name);
        if (bid < 0) break;
        bytes.push_back(bid);
      }
      // tokenizers does not flush a pending unknown before byte tokens: they come first.
      if (bytes.size() == ch.size()) {
        ids.insert(ids.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (options_.unk_token.empty()) continue;  // no unknown token: the character is dropped
    CADRE_CHECK(unk_id_ >= 0, where_, ": field 'model.unk_token': '", options_.unk_token, "' is not in model.vocab");
    if (!options_.fuse_unk) flush_unk();
    pending_unk = 1;
  }
  flush_unk();
}

void BpeModel::merge_all(std::vector<int>& ids) const {
  std::vector<Symbol> sym(ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    sym[i] = Symbol{ids[i], static_cast<int>(i) - 1, i + 1 < ids.size() ? static_cast<int>(i) + 1 : -1, true};
  std::priority_queue<Candidate> queue;
  for (size_t i = 0; i + 1 < ids.size(); ++i)
    if (const Merge* m = find_merge(ids[i], ids[i + 1])) queue.push({m->rank, static_cast<uint32_t>(i), m->new_id});
  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    Symbol& left = sym[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = sym[static_cast<size_t>(left.next)];
    // Stale entries (a neighbour already merged elsewhere) are recognised as tokenizers does:
    // by the pair's current merge result differing from the one queued.
    const Merge* now = find_merge(left.id, right.id);
    if (!now || now->new_id != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) sym[static_cast<size_t>(right.next)].prev = static_cast<int>(top.pos);
    if (left.prev >= 0)
      if (const Merge* m = find_merge(sym[static_cast<size_t>(left.prev)].id, left.id))
        queue.push({m->rank, static_cast<uint32_t>(left.prev), m->new_id});
    if (left.next >= 0)
      if (const Merge* m = find_merge(left.id, sym[static_cast<size_t>(left.next)].id))
        queue.push({m->rank, top.pos, m->new_id});
  }
  ids.clear();
  for (const Symbol& s : sym)
    if (s.alive) ids.push_back(s.id);
}

void BpeModel::tokenize(const std::string& word, std::vector<int>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    int id = token_to_id(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  bool cacheable = word.size() < kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int> ids;
  initial_symbols(word, ids);
  merge_all(ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kCacheMaxEntries) cache_.emplace(word, std::move(ids));
  }
}

}  // namespace cadre::detail
