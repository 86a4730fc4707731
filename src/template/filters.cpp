// Jinja's filters that chat templates use, with Jinja's semantics; `tojson` is
// transformers' override (json.dumps, no HTML escaping). Names outside these tables are
// refused when the template is parsed.
#include <cmath>
#include <cstdlib>
#include <map>

#include "template/builtins.h"
#include "template/evaluator.h"
#include "template/json.h"
#include "template/text.h"

namespace cadre::tmpl {
namespace {

using FilterFn = Value (*)(Evaluator&, const Value&, const CallArgs&);

const Value* opt(const CallArgs& a, size_t i, const char* name) {
  if (i < a.positional.size()) return &a.positional[i];
  return a.kw(name);
}

std::string soft_str(const Value& v) { return to_str(v); }

Value str_value(Evaluator& ev, std::string s) {
  ev.charge(s.size());
  return Value::string(std::move(s));
}

// Jinja's attribute getter for selectattr/map/join: dotted path, item lookup first.
Value attr_path(Evaluator& ev, Value v, const std::string& path) {
  size_t pos = 0;
  while (pos <= path.size()) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    char* end = nullptr;
    const long long idx = std::strtoll(part.c_str(), &end, 10);
    const bool numeric = !part.empty() && end && *end == '\0';
    v = get_item(ev, v, numeric ? Value::integer(idx) : Value::string(part));
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return v;
}

Value f_tojson(Evaluator& ev, const Value& v, const CallArgs& a) {
  JsonStyle style;
  if (const Value* e = opt(a, 0, "ensure_ascii")) style.ensure_ascii = e->truthy();
  if (const Value* ind = opt(a, 1, "indent"); ind && !ind->is_none()) {
    style.indented = true;
    style.item_sep = ",";
    style.indent = ind->is_string() ? ind->str_ref() : std::string(static_cast<size_t>(std::max<int64_t>(0, ind->as_int())), ' ');
  }
  if (const Value* sep = opt(a, 2, "separators"); sep && !sep->is_none()) {
    if (!sep->is_list() || sep->list_ref().size() != 2 || !sep->list_ref()[0].is_string() || !sep->list_ref()[1].is_string())
      ev.fail("tojson separators must be a pair of strings");
    style.item_sep = sep->list_ref()[0].str_ref();
    style.key_sep = sep->list_ref()[1].str_ref();
  }
  if (const Value* s = opt(a, 3, "sort_keys")) style.sort_keys = s->truthy();
  return str_value(ev, to_json(v, style));
}

Value f_trim(Evaluator& ev, const Value& v, const CallArgs& a) {
  const Value* chars = opt(a, 0, "chars");
  const std::string cs = chars && !chars->is_none() ? to_str(*chars) : "";
  return Value::string(text::strip(soft_str(v), text::Side::Both, chars && !chars->is_none() ? &cs : nullptr));
}

Value f_length(Evaluator& ev, const Value& v, const CallArgs&) { return Value::integer(static_cast<int64_t>(length_of(ev, v))); }
Value f_upper(Evaluator&, const Value& v, const CallArgs&) { return Value::string(text::upper(soft_str(v))); }
Value f_lower(Evaluator&, const Value& v, const CallArgs&) { return Value::string(text::lower(soft_str(v))); }
Value f_capitalize(Evaluator&, const Value& v, const CallArgs&) { return Value::string(text::capitalize(soft_str(v))); }
Value f_title(Evaluator&, const Value& v, const CallArgs&) { return Value::string(text::title(soft_str(v))); }
Value f_string(Evaluator& ev, const Value& v, const CallArgs&) { return v.is_string() ? v : str_value(ev, to_str(v)); }
Value f_safe(Evaluator&, const Value& v, const CallArgs&) { return v; }
Value f_list(Evaluator& ev, const Value& v, const CallArgs&) { return Value::list(iterate(ev, v)); }

Value f_default(Evaluator&, const Value& v, const CallArgs& a) {
  const Value* dflt = opt(a, 0, "default_value");
  const Value* boolean = opt(a, 1, "boolean");
  if (v.is_undefined() || (boolean && boolean->truthy() && !v.truthy())) return dflt ? *dflt : Value::string("");
  return v;
}

Value f_join(Evaluator& ev, const Value& v, const CallArgs& a) {
  const Value* sep = opt(a, 0, "d");
  const Value* attribute = opt(a, 1, "attribute");
  std::string out;
  bool first = true;
  for (const auto& item : iterate(ev, v)) {
    if (!first && sep) out += to_str(*sep);
    out += to_str(attribute && !attribute->is_none() ? attr_path(ev, item, to_str(*attribute)) : item);
    first = false;
    ev.charge(out.size());
  }
  return Value::string(std::move(out));
}

Value f_items(Evaluator& ev, const Value& v, const CallArgs&) {
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) ev.fail("can only get item pairs from a mapping");
  List out;
  for (const auto& [k, x] : v.dict_ref().items) out.push_back(Value::list({Value::string(k), x}, true));
  return Value::list(std::move(out));
}

Value f_first(Evaluator& ev, const Value& v, const CallArgs&) {
  const List items = iterate(ev, v);
  return items.empty() ? Value::undefined("no first item, sequence was empty") : items.front();
}

Value f_last(Evaluator& ev, const Value& v, const CallArgs&) {
  const List items = iterate(ev, v);
  return items.empty() ? Value::undefined("no last item, sequence was empty") : items.back();
}

Value f_reverse(Evaluator& ev, const Value& v, const CallArgs&) {
  if (v.is_string()) {
    std::u32string u = text::decode(v.str_ref());
    return Value::string(text::encode(std::u32string(u.rbegin(), u.rend())));
  }
  List items = iterate(ev, v);
  return Value::list(List(items.rbegin(), items.rend()));
}

Value f_int(Evaluator&, const Value& v, const CallArgs& a) {
  const Value* dflt = opt(a, 0, "default");
  if (v.is_number()) return Value::integer(v.kind() == Kind::Float ? static_cast<int64_t>(std::trunc(v.as_float())) : v.as_int());
  if (v.is_string()) {
    const std::string s = text::strip(v.str_ref(), text::Side::Both);
    char* end = nullptr;
    errno = 0;
    const long long i = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && *end == '\0' && errno == 0) return Value::integer(i);
    const double f = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0' && std::isfinite(f)) return Value::integer(static_cast<int64_t>(f));
  }
  return dflt ? *dflt : Value::integer(0);
}

Value f_float(Evaluator&, const Value& v, const CallArgs& a) {
  const Value* dflt = opt(a, 0, "default");
  if (v.is_number()) return Value::number(v.as_float());
  if (v.is_string()) {
    const std::string s = text::strip(v.str_ref(), text::Side::Both);
    char* end = nullptr;
    const double f = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return Value::number(f);
  }
  return dflt ? *dflt : Value::number(0.0);
}

Value f_abs(Evaluator& ev, const Value& v, const CallArgs&) {
  if (!v.is_number()) ev.fail("bad operand type for abs(): '" + v.type_name() + "'");
  if (v.kind() == Kind::Float) return Value::number(std::fabs(v.as_float()));
  if (v.as_int() == INT64_MIN) ev.fail("integer overflow");
  return Value::integer(std::llabs(v.as_int()));
}

Value f_replace(Evaluator& ev, const Value& v, const CallArgs& a) {
  const Value* from = opt(a, 0, "old");
  const Value* to = opt(a, 1, "new");
  const Value* count = opt(a, 2, "count");
  if (!from || !to) ev.fail("replace() needs the old and new strings");
  return str_value(ev, text::replace(soft_str(v), to_str(*from), to_str(*to), count && !count->is_none() ? count->as_int() : -1));
}

Value f_escape(Evaluator& ev, const Value& v, const CallArgs&) {
  std::string out;
  for (char c : soft_str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return str_value(ev, std::move(out));
}

// Jinja's indent(width=4, first=False, blank=False), including its quirk of appending a
// newline before splitting (so a trailing newline is not indented).
Value f_indent(Evaluator& ev, const Value& v, const CallArgs& a) {
  const Value* width = opt(a, 0, "width");
  const Value* first = opt(a, 1, "first");
  const Value* blank = opt(a, 2, "blank");
  const std::string pad = width && width->is_string() ? width->str_ref()
                                                      : std::string(static_cast<size_t>(std::max<int64_t>(0, width ? width->as_int() : 4)), ' ');
  const std::vector<std::string> lines = text::splitlines(soft_str(v) + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "\n";
    if (i && (!lines[i].empty() || (blank && blank->truthy()))) out += pad;
    out += lines[i];
  }
  if (first && first->truthy()) out = pad + out;
  return str_value(ev, std::move(out));
}

// select/reject(test, args...) and selectattr/rejectattr(attribute, test, args...).
Value select_items(Evaluator& ev, const Value& v, const CallArgs& a, bool by_attr, bool keep_when) {
  size_t i = 0;
  std::string attribute;
  if (by_attr) {
    if (a.positional.empty()) ev.fail("selectattr/rejectattr need an attribute name");
    attribute = to_str(a.positional[i++]);
  }
  std::string test = "truthy";
  if (i < a.positional.size()) test = to_str(a.positional[i++]);
  if (test != "truthy" && !has_test(test)) ev.fail("no test named '" + test + "' (not supported)");
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + static_cast<long>(i), a.positional.end());
  List out;
  for (const auto& item : iterate(ev, v)) {
    const Value subject = by_attr ? attr_path(ev, item, attribute) : item;
    const bool pass = test == "truthy" ? subject.truthy() : apply_test(ev, test, subject, rest);
    if (pass == keep_when) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_select(Evaluator& ev, const Value& v, const CallArgs& a) { return select_items(ev, v, a, false, true); }
Value f_reject(Evaluator& ev, const Value& v, const CallArgs& a) { return select_items(ev, v, a, false, false); }
Value f_selectattr(Evaluator& ev, const Value& v, const CallArgs& a) { return select_items(ev, v, a, true, true); }
Value f_rejectattr(Evaluator& ev, const Value& v, const CallArgs& a) { return select_items(ev, v, a, true, false); }

Value f_map(Evaluator& ev, const Value& v, const CallArgs& a) {
  List out;
  if (const Value* attribute = a.kw("attribute")) {
    const Value* dflt = a.kw("default");
    for (const auto& item : iterate(ev, v)) {
      Value x = attr_path(ev, item, to_str(*attribute));
      out.push_back(x.is_undefined() && dflt ? *dflt : x);
    }
    return Value::list(std::move(out));
  }
  if (a.positional.empty()) ev.fail("map() needs a filter name or attribute=");
  const std::string name = to_str(a.positional[0]);
  if (!has_filter(name) || name == "map") ev.fail("no filter named '" + name + "' (not supported)");
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const auto& item : iterate(ev, v)) out.push_back(apply_filter(ev, name, item, rest));
  return Value::list(std::move(out));
}

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> table = {
      {"tojson", f_tojson},   {"trim", f_trim},         {"length", f_length},     {"count", f_length},
      {"upper", f_upper},     {"lower", f_lower},       {"capitalize", f_capitalize}, {"title", f_title},
      {"string", f_string},   {"safe", f_safe},         {"list", f_list},         {"default", f_default},
      {"d", f_default},       {"join", f_join},         {"items", f_items},       {"first", f_first},
      {"last", f_last},       {"reverse", f_reverse},   {"int", f_int},           {"float", f_float},
      {"abs", f_abs},         {"replace", f_replace},   {"escape", f_escape},     {"e", f_escape},
      {"select", f_select},   {"reject", f_reject},     {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr},
      {"map", f_map},         {"indent", f_indent}};
  return table;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) > 0; }

Value apply_filter(Evaluator& ev, const std::string& name, const Value& v, const CallArgs& args) {
  ev.work(scan_cost(v));
  return filters().at(name)(ev, v, args);
}

}  // namespace cadre::tmpl
