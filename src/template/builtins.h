// What a template can reach besides its variables: Jinja's filters and tests, attribute and
// item access (with the str/dict/list methods templates call), and the globals transformers
// defines (raise_exception, strftime_now, namespace, dict) plus range. Nothing else exists.
#pragma once

#include <string>

#include "template/value.h"

namespace cadre::tmpl {

class Evaluator;

bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value apply_filter(Evaluator& ev, const std::string& name, const Value& v, const CallArgs& args);
bool apply_test(Evaluator& ev, const std::string& name, const Value& v, const CallArgs& args);

// `obj.name`: for dicts a method of that name first, then the key (Jinja's getattr order);
// `obj[key]`: the item first, then the attribute. Missing: Undefined. Names starting with '_'
// are never reachable (Jinja's sandbox).
Value get_attribute(Evaluator& ev, const Value& obj, const std::string& name);
Value get_item(Evaluator& ev, const Value& obj, const Value& key);

// Python's sequence protocol as templates use it: items of a list, keys of a dict,
// characters of a string; Undefined iterates as empty. Fails for anything else.
List iterate(Evaluator& ev, const Value& v);
// len(): characters of a string, items of a list or dict.
size_t length_of(Evaluator& ev, const Value& v);
// `in`: substring, list element or dict key.
bool contains(Evaluator& ev, const Value& container, const Value& item);

Dict make_globals();

// What scanning or copying v costs, in bytes, for Evaluator::work.
size_t scan_cost(const Value& v);

}  // namespace cadre::tmpl
