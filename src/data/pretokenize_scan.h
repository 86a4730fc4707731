// Hand-written scanners for the few pre-tokenizer regular expressions real tokenizer.json
// files use (GPT-2's, Llama 3's, Qwen 2.5's), with the same leftmost-first alternation and
// backtracking results as the regex engine of the tokenizers library (Oniguruma); any other
// pattern is refused by the caller, so no general regex engine is needed.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace cadre::detail {

enum class SplitPattern { Gpt2, Llama3, Qwen2 };

// The pattern written exactly as `text` (the JSON string's value), or false if unknown.
bool split_pattern_from_text(const std::string& text, SplitPattern* out);

// Splits text (valid UTF-8) at the pattern's matches, keeping both the matches and the text
// between them as pieces (tokenizers' "Isolated" behaviour). Appends [begin, end) byte ranges.
void split_isolated(SplitPattern pattern, const std::string& text, std::vector<std::pair<size_t, size_t>>& pieces);

}  // namespace cadre::detail
