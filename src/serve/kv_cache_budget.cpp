// --kv-cache-memory: parsed, defaulted and turned into whole cache blocks.
#include "serve/kv_cache_budget.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <utility>
#include <vector>

#include "core/error.h"

namespace cadre {

namespace {

constexpr const char* kFlag = "--kv-cache-memory";

int64_t fraction_of(const std::string& text, int64_t available_bytes) {
  char* end = nullptr;
  const double fraction = std::strtod(text.c_str(), &end);
  CADRE_CONFIG_CHECK(end && *end == '\0' && fraction > 0 && fraction <= 1, kFlag, " '", text,
                     "': a fraction of the available memory must be in (0, 1]");
  return static_cast<int64_t>(fraction * static_cast<double>(available_bytes));
}

int64_t bytes_with_unit(const std::string& text) {
  std::string upper = text;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const std::vector<std::pair<std::string, int64_t>> units = {
      {"TIB", int64_t{1} << 40}, {"GIB", int64_t{1} << 30}, {"MIB", int64_t{1} << 20}, {"KIB", int64_t{1} << 10},
      {"TB", 1'000'000'000'000}, {"GB", 1'000'000'000},     {"MB", 1'000'000},         {"KB", 1'000},
      {"B", 1},                  {"", 1}};
  for (const auto& [unit, scale] : units) {
    if (upper.size() <= unit.size() || upper.compare(upper.size() - unit.size(), unit.size(), unit) != 0) continue;
    const std::string digits = text.substr(0, text.size() - unit.size());
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    CADRE_CONFIG_CHECK(digits.size() <= 15, kFlag, " '", text, "' is too large");
    const int64_t count = std::stoll(digits);
    CADRE_CONFIG_CHECK(count > 0, kFlag, " '", text, "' must be more than 0 bytes");
    CADRE_CONFIG_CHECK(count <= (int64_t{1} << 62) / scale, kFlag, " '", text, "' is too large");
    return count * scale;
  }
  throw ConfigError(str(kFlag, " '", text, "': bytes (8GiB, 500MB, 1073741824) or a fraction of the available memory (0.5)"));
}

}  // namespace

int64_t kv_cache_memory_bytes(const std::string& text, int64_t available_bytes) {
  if (text.find('.') != std::string::npos) return fraction_of(text, available_bytes);
  return bytes_with_unit(text);
}

KvCacheBudget kv_cache_budget(const std::string& flag, const Decoder& decoder, int64_t available_bytes) {
  const int64_t per_token = decoder.cache_bytes_per_token(), block = decoder.cache_block_tokens();
  const int64_t blocks_per_slot = (decoder.max_len() + block - 1) / block;
  const int64_t whole = decoder.slots() * blocks_per_slot * block;  // every slot's whole context
  const int64_t asked = flag.empty() ? 0 : kv_cache_memory_bytes(flag, available_bytes);
  if (decoder.cache_bytes() > 0) {  // allocated up front: the budget must cover it, and limits nothing more
    CADRE_CONFIG_CHECK(flag.empty() || asked >= decoder.cache_bytes(), kFlag, " ", flag, " (", asked,
                       " bytes) is less than the KV cache this device allocates up front for --max-batch ",
                       decoder.slots(), " x --context ", decoder.max_len(), ": ", decoder.cache_bytes(),
                       " bytes; lower --max-batch or --context");
    return {decoder.cache_bytes(), 0, "allocated up front for every slot's whole context"};
  }
  KvCacheBudget budget;
  if (!flag.empty()) {
    budget.bytes = asked;
    budget.origin = str(kFlag, " ", flag);
  } else if (whole * per_token <= available_bytes / 2) {
    budget.bytes = whole * per_token;
    budget.origin = "default: --max-batch x --context";
  } else {
    budget.bytes = available_bytes / 2;
    budget.origin = "default: --max-batch x --context, capped at half of the available memory";
  }
  budget.tokens = std::min(budget.bytes / per_token / block * block, whole);
  CADRE_CONFIG_CHECK(budget.tokens >= block, kFlag, " ", flag.empty() ? "(default)" : flag, ": ", budget.bytes,
                     " bytes hold less than one cache block (", block, " tokens of ", per_token, " bytes = ",
                     block * per_token, " bytes)");
  return budget;
}

std::string kv_cache_description(const KvCacheBudget& budget, const Decoder& decoder) {
  if (budget.tokens == 0) return str(budget.bytes / 1e6, " MB ", budget.origin);
  return str("budget ", budget.bytes / 1e6, " MB (", budget.origin, ") = ", budget.tokens, " tokens of ",
             decoder.cache_bytes_per_token(), " bytes, ", budget.tokens / decoder.max_len(), " whole contexts, held in blocks of ",
             decoder.cache_block_tokens(), " as sequences grow");
}

}  // namespace cadre
