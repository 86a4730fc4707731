// BPE merging as the tokenizers library does it (see bpe_model.h): the initial symbols are the
// word's characters (or their <0xXX> bytes, or the unknown token), then the best-ranked pair
// is merged, leftmost first among equal ranks, until no pair in the merge table remains.
#include "data/bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "core/error.h"
#include "data/utf8.h"

namespace cadre::detail {
namespace {

constexpr size_t kCacheMaxEntries = 200000;
constexpr size_t kCacheMaxWordBytes = 256;

// A candidate merge is (rank << 32 | position of its left symbol): one integer compare orders
// candidates by rank, then position, and a min-heap of them puts the leftmost best merge on top.
// Equal keys are the same candidate (a rank names one merge), so ties need no rule.
using Candidate = uint64_t;
using CandidateOrder = std::greater<Candidate>;
Candidate candidate(uint32_t rank, size_t pos) {
  return static_cast<uint64_t>(rank) << 32 | static_cast<uint32_t>(pos);
}

// Sorts candidates listed in position order by rank, keeping position order among equal ranks:
// a stable counting pass per byte of the rank, least significant first (linear in the count).
void sort_by_rank(std::vector<Candidate>& c, int rank_bytes) {
  if (c.size() < 256) {  // short words: the passes' fixed cost would dominate
    std::sort(c.begin(), c.end());
    return;
  }
  std::vector<Candidate> tmp(c.size());
  for (int byte = 0; byte < rank_bytes; ++byte) {
    const int shift = 32 + 8 * byte;
    size_t start[257] = {};
    for (Candidate x : c) ++start[((x >> shift) & 0xFF) + 1];
    for (size_t d = 0; d < 256; ++d) start[d + 1] += start[d];
    for (Candidate x : c) tmp[start[(x >> shift) & 0xFF]++] = x;
    c.swap(tmp);
  }
}

// A word's candidates in pop order. Those of the initial pairs (most of all) are sorted once;
// those that merges create go to a heap; a pop takes the smaller of the two fronts. The order
// is that of one heap holding all, for a fraction of the heap work on long words.
class CandidateQueue {
 public:
  CandidateQueue(std::vector<Candidate> initial, int rank_bytes) : sorted_(std::move(initial)) {
    sort_by_rank(sorted_, rank_bytes);
    heap_.reserve(sorted_.size());
  }
  void push(uint32_t rank, size_t pos) {
    heap_.push_back(candidate(rank, pos));
    std::push_heap(heap_.begin(), heap_.end(), CandidateOrder());
  }
  bool pop(Candidate& top) {
    if (next_ < sorted_.size() && (heap_.empty() || sorted_[next_] <= heap_.front())) {
      top = sorted_[next_++];
      return true;
    }
    if (heap_.empty()) return false;
    std::pop_heap(heap_.begin(), heap_.end(), CandidateOrder());
    top = heap_.back();
    heap_.pop_back();
    return true;
  }

 private:
  std::vector<Candidate> sorted_;
  size_t next_ = 0;
  std::vector<Candidate> heap_;
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
  rank_new_id_.assign(merges.size(), -1);
  for (size_t max_rank = merges.empty() ? 0 : merges.size() - 1; max_rank > 0; max_rank >>= 8) ++rank_bytes_;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    int ia = token_to_id(a), ib = token_to_id(b), merged = token_to_id(a + b);
    CADRE_CONFIG_CHECK(ia >= 0 && ib >= 0, where_, ": field 'model.merges[", rank, "]': '", ia < 0 ? a : b,
                       "' is not in model.vocab");
    CADRE_CONFIG_CHECK(merged >= 0, where_, ": field 'model.merges[", rank, "]': the merged token '", a + b,
                       "' is not in model.vocab");
    // A repeated pair takes its last rank: tokenizers collects the merges into a map in order.
    const Merge* earlier = find_merge(ia, ib);
    if (earlier) rank_new_id_[earlier->rank] = -1;
    merges_.insert_or_assign(pair_key(ia, ib), Merge{static_cast<uint32_t>(rank), merged});
    rank_new_id_[rank] = merged;
  }
  if (!options_.unk_token.empty()) unk_id_ = token_to_id(options_.unk_token);
  build_char_tables();
}

// initial_symbols looks up each character's bytes as one token string, then its <0xXX> bytes:
// index every token a character can be. A character is utf8_char_len(lead) bytes, fewer where
// the word ends early, so a token of 2-4 bytes is one when it is no longer than its lead says.
void BpeModel::build_char_tables() {
  one_byte_id_.fill(-1);
  fallback_id_.fill(-1);
  for (const auto& [token, id] : vocab_) {
    size_t len = token.size();
    if (len == 1)
      one_byte_id_[static_cast<unsigned char>(token[0])] = id;
    else if (len >= 2 && len <= utf8_char_len(static_cast<unsigned char>(token[0])))
      multi_byte_id_.insert_or_assign(char_key(token.data(), len), id);
  }
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    fallback_id_[static_cast<size_t>(b)] = token_to_id(name);
  }
}

// A character's 2-4 bytes packed with its length: distinct strings give distinct keys, never ~0.
uint64_t BpeModel::char_key(const char* p, size_t len) {
  uint64_t key = static_cast<uint64_t>(len) << 32;
  for (size_t k = 0; k < len; ++k) key |= static_cast<uint64_t>(static_cast<unsigned char>(p[k])) << (24 - 8 * k);
  return key;
}

int BpeModel::char_id(const char* p, size_t len) const {
  if (len == 1) return one_byte_id_[static_cast<unsigned char>(p[0])];
  const int* id = multi_byte_id_.find(char_key(p, len));
  return id ? *id : -1;
}

int BpeModel::token_to_id(const std::string& token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* BpeModel::id_to_token(int id) const {
  return id >= 0 && static_cast<size_t>(id) < by_id_.size() ? by_id_[static_cast<size_t>(id)] : nullptr;
}

void BpeModel::initial_symbols(const std::string& word, std::vector<int>& ids) const {
  int pending_unk = 0;  // unknown characters not yet emitted (fuse_unk joins them)
  auto flush_unk = [&] {
    for (; pending_unk > 0; --pending_unk) ids.push_back(unk_id_);
  };
  for (size_t i = 0; i < word.size();) {
    const char* ch = word.data() + i;
    size_t len = std::min(utf8_char_len(static_cast<unsigned char>(word[i])), word.size() - i);
    i += len;
    int id = char_id(ch, len);
    if (id >= 0) {
      flush_unk();
      ids.push_back(id);
      continue;
    }
    if (options_.byte_fallback && all_bytes_known(ch, len)) {
      // tokenizers does not flush a pending unknown before byte tokens: they come first.
      for (size_t k = 0; k < len; ++k) ids.push_back(fallback_id_[static_cast<unsigned char>(ch[k])]);
      continue;
    }
    if (options_.unk_token.empty()) continue;  // no unknown token: the character is dropped
    CADRE_CHECK(unk_id_ >= 0, where_, ": field 'model.unk_token': '", options_.unk_token, "' is not in model.vocab");
    if (!options_.fuse_unk) flush_unk();
    pending_unk = 1;
  }
  flush_unk();
}

bool BpeModel::all_bytes_known(const char* ch, size_t len) const {
  for (size_t k = 0; k < len; ++k)
    if (fallback_id_[static_cast<unsigned char>(ch[k])] < 0) return false;
  return true;
}

void BpeModel::merge_all(std::vector<int>& ids) const {
  if (ids.size() < 2) return;
  std::vector<Symbol> sym(ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    sym[i] = Symbol{ids[i], static_cast<int>(i) - 1, i + 1 < ids.size() ? static_cast<int>(i) + 1 : -1, true};
  std::vector<Candidate> initial;
  initial.reserve(ids.size());
  for (size_t i = 0; i + 1 < ids.size(); ++i)
    if (const Merge* m = find_merge(ids[i], ids[i + 1])) initial.push_back(candidate(m->rank, i));
  CandidateQueue queue(std::move(initial), rank_bytes_);
  for (Candidate top; queue.pop(top);) {
    const auto pos = static_cast<uint32_t>(top);
    const int new_id = rank_new_id_[top >> 32];
    Symbol& left = sym[pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = sym[static_cast<size_t>(left.next)];
    // Stale entries (a neighbour already merged elsewhere) are recognised as tokenizers does:
    // by the pair's current merge result differing from the one queued.
    const Merge* now = find_merge(left.id, right.id);
    if (!now || now->new_id != new_id) continue;
    left.id = new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) sym[static_cast<size_t>(right.next)].prev = static_cast<int>(pos);
    if (left.prev >= 0)
      if (const Merge* m = find_merge(sym[static_cast<size_t>(left.prev)].id, left.id))
        queue.push(m->rank, static_cast<size_t>(left.prev));
    if (left.next >= 0)
      if (const Merge* m = find_merge(left.id, sym[static_cast<size_t>(left.next)].id)) queue.push(m->rank, pos);
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
  ids.reserve(word.size());  // at most one symbol per byte
  initial_symbols(word, ids);
  merge_all(ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kCacheMaxEntries) cache_.emplace(word, std::move(ids));
  }
}

}  // namespace cadre::detail
