// The values a chat template computes with: Python's None, bool, int, float, str, list, tuple
// and dict as Jinja sees them, plus Jinja's Undefined, namespace() objects and callables.
// Strings are UTF-8 and shared (message contents are copied by pointer, not by byte).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace cadre::tmpl {

// A template that cannot be parsed or rendered. line() is the template line (0 when unknown).
class TemplateError : public std::runtime_error {
 public:
  TemplateError(const std::string& message, int line)
      : std::runtime_error(line > 0 ? "chat template line " + std::to_string(line) + ": " + message : message),
        message_(message), line_(line) {}
  const std::string& message() const { return message_; }
  int line() const { return line_; }

 private:
  std::string message_;
  int line_;
};

// raise_exception(msg) in the template: what() is exactly the template's message, as
// transformers' TemplateError carries it.
class TemplateRaised : public TemplateError {
 public:
  TemplateRaised(const std::string& message, int line) : TemplateError(message, 0), raised_line_(line) {}
  int raised_line() const { return raised_line_; }

 private:
  int raised_line_;
};

class Value;
using List = std::vector<Value>;

// Insertion-ordered string-keyed map (Python dicts keep insertion order; JSON keys are strings).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value value);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* kw(const std::string& name) const;
};

class Evaluator;
using NativeFn = std::function<Value(Evaluator&, const CallArgs&)>;

struct Callable {
  std::string name;
  NativeFn fn;
};

enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };

class Value {
 public:
  Value() = default;  // Undefined
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(std::string s);
  static Value list(List items, bool tuple = false);
  static Value dict(Dict d);
  static Value ns(Dict d);
  static Value callable(std::string name, NativeFn fn);
  // An Undefined that remembers what was looked up, for the error when it is used.
  static Value undefined(std::string hint);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_tuple() const { return kind_ == Kind::List && tuple_; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Namespace; }
  bool is_callable() const { return kind_ == Kind::Callable; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::Float ? static_cast<int64_t>(f_) : kind_ == Kind::Bool ? b_ : i_; }
  double as_float() const { return kind_ == Kind::Float ? f_ : static_cast<double>(as_int()); }
  const std::string& str_ref() const { return *s_; }
  const List& list_ref() const { return *list_; }
  const Dict& dict_ref() const { return *dict_; }
  Dict& ns_ref() const { return *dict_; }  // namespaces are the one mutable object
  const Callable& callable_ref() const { return *fn_; }
  const std::string& hint() const { return hint_; }

  bool truthy() const;
  std::string type_name() const;  // Python's type name, for error messages

 private:
  Kind kind_ = Kind::Undefined;
  bool b_ = false;
  bool tuple_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Callable> fn_;
  std::string hint_;
};

// Python's str() (what {{ }} prints) and repr() (how containers print their items).
std::string to_str(const Value& v);
std::string to_repr(const Value& v);
std::string float_repr(double f);

// Python ==, and the ordering comparisons Python allows (numbers, strings); throws
// TemplateError(line 0) on incomparable types.
bool equals(const Value& a, const Value& b);
int compare(const Value& a, const Value& b);

}  // namespace cadre::tmpl
