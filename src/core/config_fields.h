// Typed config fields bound to dotted keys: one table per struct gives parsing, overriding,
// error messages and dumping. The trainer's sections use it, and so does each model for its
// own `model:` keys (models/*/config.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/strategy.h"

namespace cadre {

// A Strategy field reads and writes the strategy's name (core/strategy.h).
using FieldPtr = std::variant<int64_t*, double*, bool*, std::string*, Strategy*>;

struct Field {
  std::string key;  // dotted, e.g. "train.steps"
  FieldPtr ptr;
};

// A key as written, before it is bound to a field: "model.dim" = "64" from "run.yaml".
struct RawKey {
  std::string key;
  std::string value;   // the YAML scalar's text
  std::string source;  // file name or "--set", for messages
};

// Parses `text` into the field's type. ConfigError names the source, the key and the expected type.
void field_assign(const Field& field, const std::string& text, const std::string& source);
// The field's value as YAML scalar text.
std::string field_text(const Field& field);
// The field with that key; ConfigError listing the valid keys of its section otherwise.
const Field& field_find(const std::vector<Field>& fields, const std::string& key, const std::string& source);

// Assigns every raw key to its field (unknown keys and bad values are ConfigErrors).
void fields_apply(const std::vector<Field>& fields, const std::vector<RawKey>& keys);
// Every field as a raw key (the resolved values, for dumping).
std::vector<RawKey> fields_dump(const std::vector<Field>& fields, const std::string& source);

}  // namespace cadre
