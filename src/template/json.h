// JSON in and out of template values: variables arrive as JSON (the chat request), and
// `tojson` prints what transformers' override prints, Python's json.dumps(x, ensure_ascii=False,
// indent=None, separators=None, sort_keys=False) byte for byte.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "template/value.h"

namespace cadre::tmpl {

struct JsonStyle {
  std::string indent;  // newline + this per level when `indented`
  bool indented = false;
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};

// Throws TemplateError (line 0) for values JSON cannot hold (Undefined, namespaces, functions).
std::string to_json(const Value& v, const JsonStyle& style);

// Objects become dicts (key order kept), arrays lists; integers beyond int64 are refused.
Value from_json(const nlohmann::ordered_json& j);

}  // namespace cadre::tmpl
