// Expression evaluation with Python's semantics for the operators (int/float arithmetic,
// str and list concatenation and repetition, chained comparisons, `and`/`or` returning an
// operand) and Jinja's for names, attributes, filters and tests.
#include <cmath>
#include <limits>

#include "template/builtins.h"
#include "template/evaluator.h"
#include "template/text.h"

namespace cadre::tmpl {

Value Evaluator::eval(const Expr& e) {
  Nesting nesting(*this);
  line_ = e.line;
  switch (e.kind) {
    case Expr::Literal: return e.value;
    case Expr::Name: return eval_name(e);
    case Expr::ListLit:
    case Expr::TupleLit:
    case Expr::DictLit: return eval_literal_collection(e);
    case Expr::Attr: {
      const Value obj = eval(*e.args[0]);
      if (obj.is_undefined()) fail(obj.hint().empty() ? "undefined value has no attribute '" + e.name + "'" : obj.hint());
      return get_attribute(*this, obj, e.name);
    }
    case Expr::Item: {
      const Value obj = eval(*e.args[0]);
      const Value key = eval(*e.args[1]);
      if (obj.is_undefined()) fail(obj.hint().empty() ? "undefined value is not subscriptable" : obj.hint());
      return get_item(*this, obj, key);
    }
    case Expr::Slice: return eval_slice(e);
    case Expr::Call: return eval_call(e);
    case Expr::Filter: return eval_filter(e);
    case Expr::Test: return eval_test(e);
    case Expr::Unary: {
      const Value v = eval(*e.args[0]);
      if (e.name == "not") return Value::boolean(!v.truthy());
      if (!v.is_number()) fail("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
      if (e.name == "+") return v.kind() == Kind::Bool ? Value::integer(v.as_int()) : v;
      if (v.kind() == Kind::Float) return Value::number(-v.as_float());
      if (v.as_int() == std::numeric_limits<int64_t>::min()) fail("integer overflow");
      return Value::integer(-v.as_int());
    }
    case Expr::Binary: return eval_binary(e);
    case Expr::Compare: return eval_compare(e);
    case Expr::Cond: {
      if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
      return e.args[2] ? eval(*e.args[2]) : Value::undefined("the inline if expression was false and has no else");
    }
  }
  return Value();
}

Value Evaluator::eval_name(const Expr& e) {
  for (auto it = frames_.rbegin(); it != frames_.rend(); ++it)
    if (auto found = (*it)->find(e.name); found != (*it)->end()) return found->second;
  return Value::undefined("'" + e.name + "' is undefined");
}

Value Evaluator::eval_literal_collection(const Expr& e) {
  if (e.kind == Expr::DictLit) {
    Dict d;
    for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
      const Value key = eval(*e.args[i]);
      if (!key.is_string()) fail("dict keys other than strings are not supported");
      d.set(key.str_ref(), eval(*e.args[i + 1]));
    }
    return Value::dict(std::move(d));
  }
  List items;
  for (const auto& a : e.args) items.push_back(eval(*a));
  return Value::list(std::move(items), e.kind == Expr::TupleLit);
}

CallArgs Evaluator::eval_args(const Expr& e, size_t first) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
  for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v));
  return args;
}

Value Evaluator::call(const Value& fn, const CallArgs& args) {
  if (fn.is_undefined()) fail(fn.hint().empty() ? "undefined value is not callable" : fn.hint());
  if (!fn.is_callable()) fail("'" + fn.type_name() + "' object is not callable");
  const int line = line_;
  Value result = fn.callable_ref().fn(*this, args);
  line_ = line;
  return result;
}

Value Evaluator::eval_call(const Expr& e) {
  const Value fn = eval(*e.args[0]);
  CallArgs args = eval_args(e, 1);
  line_ = e.line;
  return call(fn, args);
}

Value Evaluator::eval_filter(const Expr& e) {
  const Value v = eval(*e.args[0]);
  CallArgs args = eval_args(e, 1);
  line_ = e.line;
  return apply_filter(*this, e.name, v, args);
}

Value Evaluator::eval_test(const Expr& e) {
  const Value v = eval(*e.args[0]);
  CallArgs args = eval_args(e, 1);
  line_ = e.line;
  return Value::boolean(apply_test(*this, e.name, v, args) != e.negated);
}

namespace {

// Python's slice.indices(): clamps start/stop for the step's direction.
std::vector<size_t> slice_positions(Evaluator& ev, int64_t n, const Value& start, const Value& stop, const Value& step) {
  auto as_index = [&](const Value& v, const char* what) {
    if (v.kind() != Kind::Int && v.kind() != Kind::Bool) ev.fail(std::string("slice ") + what + " must be an integer or none");
    return v.as_int();
  };
  const int64_t st = step.is_none() || step.is_undefined() ? 1 : as_index(step, "step");
  if (st == 0) ev.fail("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (v.is_none() || v.is_undefined()) return dflt;
    int64_t i = as_index(v, "index");
    if (i < 0) i += n;
    if (st > 0) return std::min(std::max<int64_t>(i, 0), n);
    return std::min(std::max<int64_t>(i, -1), n - 1);
  };
  const int64_t a = clamp(start, st > 0 ? 0 : n - 1), b = clamp(stop, st > 0 ? n : -1);
  std::vector<size_t> out;
  for (int64_t i = a; st > 0 ? i < b : i > b; i += st) out.push_back(static_cast<size_t>(i));
  return out;
}

}  // namespace

Value Evaluator::eval_slice(const Expr& e) {
  const Value obj = eval(*e.args[0]);
  Value parts[3];
  for (int i = 0; i < 3; ++i) parts[i] = e.args[i + 1] ? eval(*e.args[i + 1]) : Value::none();
  line_ = e.line;
  work(scan_cost(obj));
  if (obj.is_string()) {
    const std::u32string u = text::decode(obj.str_ref());
    std::u32string out;
    for (size_t i : slice_positions(*this, static_cast<int64_t>(u.size()), parts[0], parts[1], parts[2])) out += u[i];
    return Value::string(text::encode(out));
  }
  if (obj.is_list()) {
    List out;
    for (size_t i : slice_positions(*this, static_cast<int64_t>(obj.list_ref().size()), parts[0], parts[1], parts[2]))
      out.push_back(obj.list_ref()[i]);
    return Value::list(std::move(out), obj.is_tuple());
  }
  if (obj.is_undefined()) fail(obj.hint().empty() ? "undefined value is not subscriptable" : obj.hint());
  fail("'" + obj.type_name() + "' object is not subscriptable");
}

Value Evaluator::eval_binary(const Expr& e) {
  const std::string& op = e.name;
  if (op == "and" || op == "or") {
    Value a = eval(*e.args[0]);
    if (a.truthy() == (op == "or")) return a;
    return eval(*e.args[1]);
  }
  const Value a = eval(*e.args[0]);
  const Value b = eval(*e.args[1]);
  line_ = e.line;
  if (op == "~") {
    std::string s = to_str(a) + to_str(b);
    charge(s.size());
    return Value::string(std::move(s));
  }
  for (const Value* v : {&a, &b})
    if (v->is_undefined()) fail(v->hint().empty() ? "undefined value used in an expression" : v->hint());
  return arithmetic(op, a, b);
}

namespace {

bool both_int(const Value& a, const Value& b) {
  return (a.kind() == Kind::Int || a.kind() == Kind::Bool) && (b.kind() == Kind::Int || b.kind() == Kind::Bool);
}

int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

}  // namespace

Value Evaluator::arithmetic(const std::string& op, const Value& a, const Value& b) {
  auto type_error = [&]() {
    fail("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
  };
  if (a.is_number() && b.is_number()) {
    if (both_int(a, b)) {
      const int64_t x = a.as_int(), y = b.as_int();
      int64_t r = 0;
      if ((op == "/" || op == "//" || op == "%") && y == 0) fail("division by zero");
      if (op == "+" && __builtin_add_overflow(x, y, &r)) fail("integer overflow");
      if (op == "-" && __builtin_sub_overflow(x, y, &r)) fail("integer overflow");
      if (op == "*" && __builtin_mul_overflow(x, y, &r)) fail("integer overflow");
      if (op == "+" || op == "-" || op == "*") return Value::integer(r);
      if (op == "/") return Value::number(static_cast<double>(x) / static_cast<double>(y));
      if (op == "//") return Value::integer(floor_div(x, y));
      if (op == "%") return Value::integer(x - floor_div(x, y) * y);
      if (y < 0) return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
      int64_t p = 1, base = x;
      for (int64_t n = y; n > 0; n >>= 1) {  // by squaring: the exponent can be huge
        if ((n & 1) && __builtin_mul_overflow(p, base, &p)) fail("integer overflow");
        if (n > 1 && __builtin_mul_overflow(base, base, &base)) {
          if (x == 0 || x == 1 || x == -1) break;
          fail("integer overflow");
        }
      }
      if (x == -1) p = (y % 2) ? -1 : 1;
      return Value::integer(p);
    }
    const double x = a.as_float(), y = b.as_float();
    if ((op == "/" || op == "//" || op == "%") && y == 0) fail("float division by zero");
    if (op == "+") return Value::number(x + y);
    if (op == "-") return Value::number(x - y);
    if (op == "*") return Value::number(x * y);
    if (op == "/") return Value::number(x / y);
    if (op == "//") return Value::number(std::floor(x / y));
    if (op == "%") return Value::number(x - std::floor(x / y) * y);
    return Value::number(std::pow(x, y));
  }
  if (op == "+" && a.is_string() && b.is_string()) {
    charge(a.str_ref().size() + b.str_ref().size());
    return Value::string(a.str_ref() + b.str_ref());
  }
  if (op == "+" && a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    charge((a.list_ref().size() + b.list_ref().size()) * sizeof(Value));
    List out = a.list_ref();
    out.insert(out.end(), b.list_ref().begin(), b.list_ref().end());
    return Value::list(std::move(out), a.is_tuple());
  }
  if (op == "*" && (a.is_string() || a.is_list() || b.is_string() || b.is_list())) {
    const Value& seq = a.is_number() ? b : a;
    const Value& count = a.is_number() ? a : b;
    if (!count.is_number() || count.kind() == Kind::Float) type_error();
    const int64_t n = std::max<int64_t>(count.as_int(), 0);
    const size_t unit = seq.is_string() ? seq.str_ref().size() : seq.list_ref().size() * sizeof(Value);
    if (unit && static_cast<uint64_t>(n) > limits_.max_output_bytes / unit + 1) charge(limits_.max_output_bytes + 1);
    charge(unit * static_cast<size_t>(n));
    if (seq.is_string()) {
      std::string out;
      for (int64_t i = 0; i < n; ++i) out += seq.str_ref();
      return Value::string(std::move(out));
    }
    List out;
    for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list_ref().begin(), seq.list_ref().end());
    return Value::list(std::move(out), seq.is_tuple());
  }
  if (op == "%" && a.is_string()) fail("string formatting with '%' is not supported");
  type_error();
  return Value();
}

Value Evaluator::eval_compare(const Expr& e) {
  Value left = eval(*e.args[0]);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.args[i + 1]);
    line_ = e.line;
    work(scan_cost(left) + scan_cost(right));
    const std::string& op = e.ops[i];
    bool ok;
    if (op == "==") ok = equals(left, right);
    else if (op == "!=") ok = !equals(left, right);
    else if (op == "in") ok = contains(*this, right, left);
    else if (op == "not in") ok = !contains(*this, right, left);
    else {
      const int c = compare(left, right);
      ok = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
    }
    if (!ok) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

}  // namespace cadre::tmpl
