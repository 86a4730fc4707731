// Jinja's tests (`x is defined`, `x is string`, `x is divisibleby 3`...), with Python's type
// rules: bools are numbers, strings and Undefined are iterable, dicts are sequences.
#include <map>

#include "template/builtins.h"
#include "template/evaluator.h"
#include "template/text.h"

namespace cadre::tmpl {
namespace {

using TestFn = bool (*)(Evaluator&, const Value&, const CallArgs&);

const Value& operand(Evaluator& ev, const CallArgs& a, const char* test) {
  if (a.positional.empty()) ev.fail(std::string("test '") + test + "' needs an argument");
  return a.positional[0];
}

bool t_defined(Evaluator&, const Value& v, const CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Evaluator&, const Value& v, const CallArgs&) { return v.is_undefined(); }
bool t_none(Evaluator&, const Value& v, const CallArgs&) { return v.is_none(); }
bool t_string(Evaluator&, const Value& v, const CallArgs&) { return v.is_string(); }
bool t_number(Evaluator&, const Value& v, const CallArgs&) { return v.is_number(); }
bool t_integer(Evaluator&, const Value& v, const CallArgs&) { return v.kind() == Kind::Int; }
bool t_float(Evaluator&, const Value& v, const CallArgs&) { return v.kind() == Kind::Float; }
bool t_boolean(Evaluator&, const Value& v, const CallArgs&) { return v.kind() == Kind::Bool; }
bool t_true(Evaluator&, const Value& v, const CallArgs&) { return v.kind() == Kind::Bool && v.as_bool(); }
bool t_false(Evaluator&, const Value& v, const CallArgs&) { return v.kind() == Kind::Bool && !v.as_bool(); }
bool t_mapping(Evaluator&, const Value& v, const CallArgs&) { return v.is_dict(); }
bool t_callable(Evaluator&, const Value& v, const CallArgs&) { return v.is_callable(); }

bool t_iterable(Evaluator&, const Value& v, const CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}

bool t_sequence(Evaluator&, const Value& v, const CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}

int64_t whole(Evaluator& ev, const Value& v, const char* test) {
  if (v.kind() != Kind::Int && v.kind() != Kind::Bool) ev.fail(std::string("test '") + test + "' needs an integer");
  return v.as_int();
}

bool t_even(Evaluator& ev, const Value& v, const CallArgs&) { return whole(ev, v, "even") % 2 == 0; }
bool t_odd(Evaluator& ev, const Value& v, const CallArgs&) { return whole(ev, v, "odd") % 2 != 0; }

bool t_divisibleby(Evaluator& ev, const Value& v, const CallArgs& a) {
  const int64_t d = whole(ev, operand(ev, a, "divisibleby"), "divisibleby");
  if (d == 0) ev.fail("integer division or modulo by zero");
  return whole(ev, v, "divisibleby") % d == 0;
}

bool t_eq(Evaluator& ev, const Value& v, const CallArgs& a) { return equals(v, operand(ev, a, "eq")); }
bool t_ne(Evaluator& ev, const Value& v, const CallArgs& a) { return !equals(v, operand(ev, a, "ne")); }
bool t_lt(Evaluator& ev, const Value& v, const CallArgs& a) { return compare(v, operand(ev, a, "lt")) < 0; }
bool t_le(Evaluator& ev, const Value& v, const CallArgs& a) { return compare(v, operand(ev, a, "le")) <= 0; }
bool t_gt(Evaluator& ev, const Value& v, const CallArgs& a) { return compare(v, operand(ev, a, "gt")) > 0; }
bool t_ge(Evaluator& ev, const Value& v, const CallArgs& a) { return compare(v, operand(ev, a, "ge")) >= 0; }
bool t_in(Evaluator& ev, const Value& v, const CallArgs& a) { return contains(ev, operand(ev, a, "in"), v); }

bool t_sameas(Evaluator& ev, const Value& v, const CallArgs& a) {
  const Value& o = operand(ev, a, "sameas");
  // Identity only matters for singletons in templates: none, true, false.
  if (v.is_none() || o.is_none() || v.kind() == Kind::Bool || o.kind() == Kind::Bool) return v.kind() == o.kind() && equals(v, o);
  return false;
}

bool t_lower(Evaluator&, const Value& v, const CallArgs&) {
  const std::string s = to_str(v);
  return text::lower(s) == s && text::upper(s) != s;
}

bool t_upper(Evaluator&, const Value& v, const CallArgs&) {
  const std::string s = to_str(v);
  return text::upper(s) == s && text::lower(s) != s;
}

const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> table = {
      {"defined", t_defined},   {"undefined", t_undefined}, {"none", t_none},       {"string", t_string},
      {"number", t_number},     {"integer", t_integer},     {"float", t_float},     {"boolean", t_boolean},
      {"true", t_true},         {"false", t_false},         {"mapping", t_mapping}, {"callable", t_callable},
      {"iterable", t_iterable}, {"sequence", t_sequence},   {"even", t_even},       {"odd", t_odd},
      {"divisibleby", t_divisibleby}, {"eq", t_eq},         {"equalto", t_eq},      {"==", t_eq},
      {"ne", t_ne},             {"!=", t_ne},               {"lt", t_lt},           {"lessthan", t_lt},
      {"<", t_lt},              {"le", t_le},               {"<=", t_le},           {"gt", t_gt},
      {"greaterthan", t_gt},    {">", t_gt},                {"ge", t_ge},           {">=", t_ge},
      {"in", t_in},             {"sameas", t_sameas},       {"lower", t_lower},     {"upper", t_upper}};
  return table;
}

}  // namespace

bool has_test(const std::string& name) { return tests().count(name) > 0; }

bool apply_test(Evaluator& ev, const std::string& name, const Value& v, const CallArgs& args) {
  return tests().at(name)(ev, v, args);
}

}  // namespace cadre::tmpl
