// Reading fields of a Hugging Face tokenizer.json with errors that name the file and the
// field's path ("tokenizer.json: field 'model.merges[3]': ..."), as cadre::ConfigError.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace cadre::detail {

class JsonField {
 public:
  JsonField(const nlohmann::json& value, std::string file, std::string path)
      : value_(value), file_(std::move(file)), path_(std::move(path)) {}

  const nlohmann::json& value() const { return value_; }
  const std::string& path() const { return path_; }
  const std::string& file() const { return file_; }
  bool is_null() const { return value_.is_null(); }

  // A member: missing or null members read as null (tokenizers' serde defaults do the same).
  JsonField operator[](const char* key) const;
  JsonField at(size_t index) const;
  size_t size() const;  // of an array (throws otherwise)

  std::string str() const;
  bool boolean() const;
  bool boolean_or(bool fallback) const { return is_null() ? fallback : boolean(); }
  int64_t integer() const;
  const nlohmann::json& object() const;  // throws unless an object

  // Throws ConfigError: "<file>: field '<path>': <why>".
  [[noreturn]] void fail(const std::string& why) const;

 private:
  const nlohmann::json& value_;
  std::string file_, path_;
};

}  // namespace cadre::detail
