// Attribute and item access, iteration, the str/dict/list methods templates call, and the
// globals (range, namespace, dict, raise_exception, strftime_now).
#include "template/builtins.h"

#include <cstdio>

#include "template/evaluator.h"
#include "template/text.h"

namespace cadre::tmpl {
namespace {

// Jinja's sandbox refuses ranges over 100000 items (jinja2.sandbox.MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

const Value& arg(Evaluator& ev, const CallArgs& a, size_t i, const char* name, const char* fn) {
  if (i < a.positional.size()) return a.positional[i];
  if (const Value* kw = a.kw(name)) return *kw;
  ev.fail(std::string(fn) + "() missing required argument '" + name + "'");
}

const Value* opt(const CallArgs& a, size_t i, const char* name) {
  if (i < a.positional.size()) return &a.positional[i];
  return a.kw(name);
}

const std::string& need_str(Evaluator& ev, const Value& v, const char* fn) {
  if (!v.is_string()) ev.fail(std::string(fn) + "() argument must be str, not " + v.type_name());
  return v.str_ref();
}

long maxsplit_of(const CallArgs& a, size_t i) {
  const Value* m = opt(a, i, "maxsplit");
  return m && m->is_number() ? static_cast<long>(m->as_int()) : -1;
}

Value strings(const std::vector<std::string>& parts) {
  List out;
  for (const auto& p : parts) out.push_back(Value::string(p));
  return Value::list(std::move(out));
}

bool affix(Evaluator& ev, const std::string& s, const Value& which, bool prefix) {
  auto one = [&](const Value& v) {
    const std::string& p = need_str(ev, v, prefix ? "startswith" : "endswith");
    return p.size() <= s.size() && (prefix ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0);
  };
  if (which.is_list()) {
    for (const auto& v : which.list_ref())
      if (one(v)) return true;
    return false;
  }
  return one(which);
}

Value string_method(Evaluator& ev, const std::string& s, const std::string& name, const CallArgs& a) {
  using text::Side;
  ev.work(s.size());
  auto chars = [&]() -> const std::string* {
    const Value* c = opt(a, 0, "chars");
    return c && !c->is_none() ? &need_str(ev, *c, name.c_str()) : nullptr;
  };
  if (name == "strip") return Value::string(text::strip(s, Side::Both, chars()));
  if (name == "lstrip") return Value::string(text::strip(s, Side::Left, chars()));
  if (name == "rstrip") return Value::string(text::strip(s, Side::Right, chars()));
  if (name == "upper") return Value::string(text::upper(s));
  if (name == "lower") return Value::string(text::lower(s));
  if (name == "title") return Value::string(text::title(s));
  if (name == "capitalize") return Value::string(text::capitalize(s));
  if (name == "startswith" || name == "endswith") return Value::boolean(affix(ev, s, arg(ev, a, 0, "prefix", name.c_str()), name == "startswith"));
  if (name == "split" || name == "rsplit") {
    const Value* sep = opt(a, 0, "sep");
    const std::string* sp = sep && !sep->is_none() ? &need_str(ev, *sep, "split") : nullptr;
    if (sp && sp->empty()) ev.fail("empty separator");
    return strings(name == "split" ? text::split(s, sp, maxsplit_of(a, 1)) : text::rsplit(s, sp, maxsplit_of(a, 1)));
  }
  if (name == "replace") {
    const Value* count = opt(a, 2, "count");
    std::string out = text::replace(s, need_str(ev, arg(ev, a, 0, "old", "replace"), "replace"),
                                    need_str(ev, arg(ev, a, 1, "new", "replace"), "replace"), count ? count->as_int() : -1);
    ev.charge(out.size());
    return Value::string(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "count") {
    const std::string& sub = need_str(ev, arg(ev, a, 0, "sub", name.c_str()), name.c_str());
    if (name == "count") return Value::integer(static_cast<int64_t>(text::split(s, &sub, -1).size() - 1));
    const size_t at = name == "find" ? s.find(sub) : s.rfind(sub);
    return Value::integer(at == std::string::npos ? -1 : static_cast<int64_t>(text::length(s.substr(0, at))));
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const auto& item : iterate(ev, arg(ev, a, 0, "iterable", "join"))) {
      if (!first) out += s;
      out += need_str(ev, item, "join");
      first = false;
      ev.charge(out.size());
    }
    return Value::string(std::move(out));
  }
  ev.fail("str method '" + name + "' is not supported");
}

bool is_string_method(const std::string& n) {
  for (const char* m : {"strip", "lstrip", "rstrip", "upper", "lower", "title", "capitalize", "startswith", "endswith",
                        "split", "rsplit", "replace", "find", "rfind", "count", "join", "format", "splitlines"})
    if (n == m) return true;
  return false;
}

Value dict_method(Evaluator& ev, const Dict& d, const std::string& name, const CallArgs& a) {
  if (name == "get") {
    const Value& key = arg(ev, a, 0, "key", "get");
    const Value* found = key.is_string() ? d.find(key.str_ref()) : nullptr;
    if (found) return *found;
    const Value* dflt = opt(a, 1, "default");
    return dflt ? *dflt : Value::none();
  }
  List out;
  for (const auto& [k, v] : d.items) {
    if (name == "keys") out.push_back(Value::string(k));
    else if (name == "values") out.push_back(v);
    else out.push_back(Value::list({Value::string(k), v}, true));
  }
  return Value::list(std::move(out));
}

Value bound(const std::string& name, std::function<Value(Evaluator&, const CallArgs&)> fn) {
  return Value::callable(name, std::move(fn));
}

}  // namespace

Value get_attribute(Evaluator& ev, const Value& obj, const std::string& name) {
  if (name.empty() || name[0] == '_') return Value::undefined("access to attribute '" + name + "' is not allowed");
  if (obj.is_dict()) {
    if (name == "items" || name == "keys" || name == "values" || name == "get")
      return bound(name, [obj, name](Evaluator& e, const CallArgs& a) { return dict_method(e, obj.dict_ref(), name, a); });
    if (const Value* v = obj.dict_ref().find(name)) return *v;
    return Value::undefined("'dict object' has no attribute '" + name + "'");
  }
  if (obj.is_namespace()) {
    if (const Value* v = obj.dict_ref().find(name)) return *v;
    return Value::undefined("'Namespace' object has no attribute '" + name + "'");
  }
  if (obj.is_string() && is_string_method(name))
    return bound(name, [obj, name](Evaluator& e, const CallArgs& a) { return string_method(e, obj.str_ref(), name, a); });
  if (obj.is_list() && (name == "index" || name == "count"))
    return bound(name, [obj, name](Evaluator& e, const CallArgs& a) {
      const Value& x = arg(e, a, 0, "value", name.c_str());
      int64_t n = 0;
      for (size_t i = 0; i < obj.list_ref().size(); ++i)
        if (equals(obj.list_ref()[i], x)) {
          if (name == "index") return Value::integer(static_cast<int64_t>(i));
          ++n;
        }
      if (name == "index") e.fail(to_repr(x) + " is not in list");
      return Value::integer(n);
    });
  return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
}

Value get_item(Evaluator& ev, const Value& obj, const Value& key) {
  if ((obj.is_dict() || obj.is_namespace()) && key.is_string()) {
    if (const Value* v = obj.dict_ref().find(key.str_ref())) return *v;
    return get_attribute(ev, obj, key.str_ref());
  }
  const bool int_key = key.kind() == Kind::Int || key.kind() == Kind::Bool;
  if ((obj.is_list() || obj.is_string()) && int_key) {
    if (obj.is_list()) {
      int64_t i = key.as_int(), n = static_cast<int64_t>(obj.list_ref().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("list index out of range");
      return obj.list_ref()[static_cast<size_t>(i)];
    }
    ev.work(obj.str_ref().size());
    const std::u32string u = text::decode(obj.str_ref());
    int64_t i = key.as_int(), n = static_cast<int64_t>(u.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined("string index out of range");
    return Value::string(text::encode(u.substr(static_cast<size_t>(i), 1)));
  }
  if (key.is_string()) return get_attribute(ev, obj, key.str_ref());
  return Value::undefined("'" + obj.type_name() + " object' has no item " + to_repr(key));
}

size_t scan_cost(const Value& v) {
  if (v.is_string()) return v.str_ref().size();
  if (v.is_list()) return v.list_ref().size() * sizeof(Value);
  if (v.is_dict() || v.is_namespace()) return v.dict_ref().items.size() * sizeof(Value);
  return 0;
}

List iterate(Evaluator& ev, const Value& v) {
  ev.work(scan_cost(v));
  switch (v.kind()) {
    case Kind::Undefined: return {};
    case Kind::List: return v.list_ref();
    case Kind::Dict: {
      List keys;
      for (const auto& kv : v.dict_ref().items) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case Kind::String: {
      List chars;
      for (char32_t c : text::decode(v.str_ref())) chars.push_back(Value::string(text::encode(std::u32string(1, c))));
      return chars;
    }
    default: ev.fail("'" + v.type_name() + "' object is not iterable");
  }
}

size_t length_of(Evaluator& ev, const Value& v) {
  ev.work(scan_cost(v));
  switch (v.kind()) {
    case Kind::Undefined: return 0;
    case Kind::String: return text::length(v.str_ref());
    case Kind::List: return v.list_ref().size();
    case Kind::Dict: return v.dict_ref().items.size();
    default: ev.fail("object of type '" + v.type_name() + "' has no len()");
  }
}

bool contains(Evaluator& ev, const Value& container, const Value& item) {
  ev.work(scan_cost(container));
  switch (container.kind()) {
    case Kind::Undefined: return false;
    case Kind::String:
      if (!item.is_string()) ev.fail("'in <string>' requires string as left operand, not " + item.type_name());
      return container.str_ref().find(item.str_ref()) != std::string::npos;
    case Kind::List:
      for (const auto& v : container.list_ref())
        if (equals(v, item)) return true;
      return false;
    case Kind::Dict: return item.is_string() && container.dict_ref().find(item.str_ref()) != nullptr;
    default: ev.fail("argument of type '" + container.type_name() + "' is not iterable");
  }
}

namespace {

Value range_fn(Evaluator& ev, const CallArgs& a) {
  if (!a.keyword.empty() || a.positional.empty() || a.positional.size() > 3) ev.fail("range() takes 1 to 3 integer arguments");
  for (const auto& v : a.positional)
    if (v.kind() != Kind::Int && v.kind() != Kind::Bool) ev.fail("'" + v.type_name() + "' object cannot be interpreted as an integer");
  const bool one = a.positional.size() == 1;
  const int64_t start = one ? 0 : a.positional[0].as_int(), stop = one ? a.positional[0].as_int() : a.positional[1].as_int();
  const int64_t step = a.positional.size() == 3 ? a.positional[2].as_int() : 1;
  if (step == 0) ev.fail("range() arg 3 must not be zero");
  const long double count = step > 0 ? (static_cast<long double>(stop) - start) / step : (static_cast<long double>(start) - stop) / -step;
  if (count > kMaxRange) ev.fail("range too big: the sandbox refuses ranges larger than 100000");
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value::integer(i));
  return Value::list(std::move(out));
}

Dict kwargs_dict(Evaluator& ev, const CallArgs& a, const char* fn, bool check_names) {
  Dict d;
  for (const auto& p : a.positional) {
    if (!p.is_dict()) ev.fail(std::string(fn) + "() takes a mapping and keyword arguments only");
    for (const auto& kv : p.dict_ref().items) d.set(kv.first, kv.second);
  }
  for (const auto& [k, v] : a.keyword) d.set(k, v);
  for (const auto& kv : d.items)
    if (check_names && !kv.first.empty() && kv.first[0] == '_')
      ev.fail("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + kv.first + "'");
  return d;
}

Value strftime_fn(Evaluator& ev, const CallArgs& a) {
  const std::string& fmt = need_str(ev, arg(ev, a, 0, "format", "strftime_now"), "strftime_now");
  if (fmt.size() > 256) ev.fail("strftime_now() format longer than 256 bytes");
  char buf[4096];
  const size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &ev.now());
  return Value::string(std::string(buf, n));
}

}  // namespace

Dict make_globals() {
  Dict g;
  g.set("range", Value::callable("range", range_fn));
  g.set("namespace", Value::callable("namespace", [](Evaluator& ev, const CallArgs& a) { return Value::ns(kwargs_dict(ev, a, "namespace", true)); }));
  g.set("dict", Value::callable("dict", [](Evaluator& ev, const CallArgs& a) { return Value::dict(kwargs_dict(ev, a, "dict", false)); }));
  g.set("raise_exception", Value::callable("raise_exception", [](Evaluator& ev, const CallArgs& a) -> Value {
          throw TemplateRaised(to_str(arg(ev, a, 0, "message", "raise_exception")), ev.line());
        }));
  g.set("strftime_now", Value::callable("strftime_now", strftime_fn));
  return g;
}

}  // namespace cadre::tmpl
