// Field access for tokenizer.json with errors naming the file and field (see hf_json.h).
#include "data/hf_json.h"

#include "core/error.h"

namespace cadre::detail {
namespace {
const nlohmann::json& null_json() {
  static const nlohmann::json n;
  return n;
}
}  // namespace

void JsonField::fail(const std::string& why) const {
  throw ConfigError(cadre::str(file_, ": field '", path_.empty() ? "(root)" : path_, "': ", why));
}

JsonField JsonField::operator[](const char* key) const {
  std::string sub = path_.empty() ? std::string(key) : path_ + "." + key;
  if (!value_.is_object()) {
    if (value_.is_null()) return JsonField(null_json(), file_, sub);
    fail("expected an object");
  }
  auto it = value_.find(key);
  return JsonField(it == value_.end() ? null_json() : *it, file_, sub);
}

JsonField JsonField::at(size_t index) const {
  if (!value_.is_array()) fail("expected an array");
  if (index >= value_.size()) fail(cadre::str("has no element ", index));
  return JsonField(value_[index], file_, cadre::str(path_, "[", index, "]"));
}

size_t JsonField::size() const {
  if (!value_.is_array()) fail(value_.is_null() ? "missing (expected an array)" : "expected an array");
  return value_.size();
}

std::string JsonField::str() const {
  if (!value_.is_string()) fail(value_.is_null() ? "missing (expected a string)" : "expected a string");
  return value_.get<std::string>();
}

bool JsonField::boolean() const {
  if (!value_.is_boolean()) fail(value_.is_null() ? "missing (expected true or false)" : "expected true or false");
  return value_.get<bool>();
}

int64_t JsonField::integer() const {
  if (!value_.is_number_integer()) fail(value_.is_null() ? "missing (expected an integer)" : "expected an integer");
  return value_.get<int64_t>();
}

const nlohmann::json& JsonField::object() const {
  if (!value_.is_object()) fail(value_.is_null() ? "missing (expected an object)" : "expected an object");
  return value_;
}

}  // namespace cadre::detail
