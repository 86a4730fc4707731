// UTF-8 text as Python's str sees it: code points (len, slicing, indexing count characters,
// not bytes), Python's whitespace (what strip() and split() remove) and case mapping.
#pragma once

#include <string>
#include <vector>

#include "core/utf8_append.h"

namespace cadre::tmpl::text {

// Invalid UTF-8 bytes decode to U+FFFD: a template never sees bytes Python could not hold.
std::u32string decode(const std::string& s);
std::string encode(const std::u32string& s);
size_t length(const std::string& s);

bool is_space(char32_t c);  // Python's str.isspace()

enum class Side { Both, Left, Right };
// strip()/lstrip()/rstrip(); `chars` (when given) is the set of characters to remove.
std::string strip(const std::string& s, Side side, const std::string* chars = nullptr);

std::string upper(const std::string& s);
std::string lower(const std::string& s);
std::string capitalize(const std::string& s);  // first character upper, the rest lower
std::string title(const std::string& s);

// str.split(): on runs of whitespace without a separator, else on each separator; maxsplit < 0
// means no limit.
std::vector<std::string> split(const std::string& s, const std::string* sep, long maxsplit);
std::vector<std::string> rsplit(const std::string& s, const std::string* sep, long maxsplit);
// str.splitlines(): on \n, \r\n, \r and the other line boundaries Python knows, ends dropped.
std::vector<std::string> splitlines(const std::string& s);
std::string replace(const std::string& s, const std::string& from, const std::string& to, long count);

}  // namespace cadre::tmpl::text
