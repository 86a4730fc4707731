// Expressions, with Jinja's precedence (loosest first): `x if c else y`, or, and, not,
// comparisons and `in`, + -, ~, * / // %, **, unary - +, then postfix `.attr`, `[i]`,
// `[a:b]` and calls, then `|filter` and `is test` (which bind tighter than any operator).
#include <cerrno>
#include <cstdlib>

#include "template/builtins.h"
#include "template/parser_impl.h"

namespace cadre::tmpl {

ExprPtr Parser::make(Expr::Kind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

ExprPtr Parser::tuple_expression() {
  const int line = cur().line;
  ExprPtr first = expression();
  if (!is_op(",")) return first;
  auto t = make(Expr::TupleLit, line);
  t->args.push_back(std::move(first));
  while (is_op(",")) {
    next();
    if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd) break;
    t->args.push_back(expression());
  }
  return t;
}

ExprPtr Parser::expression() {
  Depth d(*this);
  const int line = cur().line;
  ExprPtr e = or_expression();
  Chain chain(*this);
  while (is_name("if")) {
    chain.link();
    next();
    auto c = make(Expr::Cond, line);
    c->args.push_back(std::move(e));
    c->args.push_back(or_expression());
    if (is_name("else")) {
      next();
      c->args.push_back(expression());
    } else {
      c->args.push_back(nullptr);
    }
    e = std::move(c);
  }
  return e;
}

namespace {
ExprPtr binary(Expr::Kind kind, const std::string& op, ExprPtr l, ExprPtr r, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  e->name = op;
  e->args.push_back(std::move(l));
  e->args.push_back(std::move(r));
  return e;
}
}  // namespace

ExprPtr Parser::or_expression() {
  ExprPtr e = and_expression();
  Chain chain(*this);
  while (is_name("or")) {
    chain.link();
    const int line = next().line;
    e = binary(Expr::Binary, "or", std::move(e), and_expression(), line);
  }
  return e;
}

ExprPtr Parser::and_expression() {
  ExprPtr e = not_expression();
  Chain chain(*this);
  while (is_name("and")) {
    chain.link();
    const int line = next().line;
    e = binary(Expr::Binary, "and", std::move(e), not_expression(), line);
  }
  return e;
}

ExprPtr Parser::not_expression() {
  if (!is_name("not")) return compare();
  Depth d(*this);
  auto e = make(Expr::Unary, next().line);
  e->name = "not";
  e->args.push_back(not_expression());
  return e;
}

ExprPtr Parser::compare() {
  const int line = cur().line;
  ExprPtr first = add_sub();
  ExprPtr cmp;
  Chain chain(*this);
  for (;;) {
    std::string op;
    if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
                                  cur().text == "<=" || cur().text == ">=")) {
      op = next().text;
    } else if (is_name("in")) {
      next();
      op = "in";
    } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
      next();
      next();
      op = "not in";
    } else {
      break;
    }
    if (!cmp) {
      cmp = make(Expr::Compare, line);
      cmp->args.push_back(std::move(first));
    }
    chain.link();
    cmp->ops.push_back(op);
    cmp->args.push_back(add_sub());
  }
  return cmp ? std::move(cmp) : std::move(first);
}

ExprPtr Parser::add_sub() {
  ExprPtr e = concat();
  Chain chain(*this);
  while (is_op("+") || is_op("-")) {
    chain.link();
    const Token& op = next();
    e = binary(Expr::Binary, op.text, std::move(e), concat(), op.line);
  }
  return e;
}

ExprPtr Parser::concat() {
  ExprPtr e = mul_div();
  Chain chain(*this);
  while (is_op("~")) {
    chain.link();
    const int line = next().line;
    e = binary(Expr::Binary, "~", std::move(e), mul_div(), line);
  }
  return e;
}

ExprPtr Parser::mul_div() {
  ExprPtr e = power();
  Chain chain(*this);
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    chain.link();
    const Token& op = next();
    e = binary(Expr::Binary, op.text, std::move(e), power(), op.line);
  }
  return e;
}

ExprPtr Parser::power() {
  ExprPtr e = unary(true);
  Chain chain(*this);
  while (is_op("**")) {
    chain.link();
    const int line = next().line;
    e = binary(Expr::Binary, "**", std::move(e), unary(true), line);
  }
  return e;
}

ExprPtr Parser::unary(bool with_filter) {
  Depth d(*this);
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    e = make(Expr::Unary, cur().line);
    e->name = next().text;
    e->args.push_back(unary(false));
  } else {
    e = primary();
  }
  e = postfix(std::move(e));
  return with_filter ? filters_and_tests(std::move(e)) : std::move(e);
}

ExprPtr Parser::primary() {
  Depth d(*this);
  const Token& t = cur();
  if (t.type == Tok::Name) {
    next();
    if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
      auto e = make(Expr::Literal, t.line);
      e->value = Value::boolean(t.text[0] == 't' || t.text[0] == 'T');
      return e;
    }
    auto e = make(t.text == "none" || t.text == "None" ? Expr::Literal : Expr::Name, t.line);
    if (e->kind == Expr::Literal) e->value = Value::none();
    e->name = t.text;
    return e;
  }
  if (t.type == Tok::String) {
    auto e = make(Expr::Literal, t.line);
    std::string s = next().text;
    while (cur().type == Tok::String) s += next().text;  // adjacent literals join, as in Python
    e->value = Value::string(std::move(s));
    return e;
  }
  if (t.type == Tok::Int || t.type == Tok::Float) {
    auto e = make(Expr::Literal, t.line);
    errno = 0;
    if (t.type == Tok::Int) {
      const long long v = std::strtoll(t.text.c_str(), nullptr, 10);
      if (errno == ERANGE) fail("integer literal " + t.text + " is too large");
      e->value = Value::integer(v);
    } else {
      e->value = Value::number(std::strtod(t.text.c_str(), nullptr));
    }
    next();
    return e;
  }
  if (is_op("(")) {
    const int line = next().line;
    if (is_op(")")) {
      next();
      return make(Expr::TupleLit, line);
    }
    ExprPtr e = expression();
    if (is_op(",")) {
      auto tuple = make(Expr::TupleLit, line);
      tuple->args.push_back(std::move(e));
      while (is_op(",")) {
        next();
        if (is_op(")")) break;
        tuple->args.push_back(expression());
      }
      e = std::move(tuple);
    }
    expect_op(")");
    return e;
  }
  if (is_op("[")) return collection("]", Expr::ListLit);
  if (is_op("{")) return dict_literal();
  fail_unexpected();
}

ExprPtr Parser::collection(const char* close, Expr::Kind kind) {
  auto e = make(kind, next().line);
  while (!is_op(close)) {
    if (!e->args.empty()) expect_op(",");
    if (is_op(close)) break;
    e->args.push_back(expression());
  }
  next();
  return e;
}

ExprPtr Parser::dict_literal() {
  auto e = make(Expr::DictLit, next().line);
  while (!is_op("}")) {
    if (!e->args.empty()) expect_op(",");
    if (is_op("}")) break;
    e->args.push_back(expression());
    expect_op(":");
    e->args.push_back(expression());
  }
  next();
  return e;
}

ExprPtr Parser::postfix(ExprPtr e) {
  Chain chain(*this);
  for (;;) {
    chain.link();
    if (is_op(".")) {
      const int line = next().line;
      auto a = make(Expr::Attr, line);
      if (cur().type == Tok::Int) {  // `x.0` is x[0] in Jinja
        a = make(Expr::Item, line);
        a->args.push_back(std::move(e));
        a->args.push_back(primary());
      } else {
        a->name = expect_name();
        a->args.push_back(std::move(e));
      }
      e = std::move(a);
    } else if (is_op("[")) {
      e = subscript(std::move(e));
    } else if (is_op("(")) {
      e = call(std::move(e));
    } else {
      return e;
    }
  }
}

// obj[i] or obj[start:stop:step]; Slice's args are obj, start, stop, step (null when absent).
ExprPtr Parser::subscript(ExprPtr obj) {
  const int line = next().line;
  ExprPtr parts[3];
  int colons = 0;
  for (;;) {
    if (is_op("]")) break;
    if (is_op(":")) {
      if (++colons > 2) fail_unexpected();
      next();
      continue;
    }
    if (parts[colons]) fail_unexpected();
    parts[colons] = expression();
  }
  next();
  auto e = make(colons ? Expr::Slice : Expr::Item, line);
  e->args.push_back(std::move(obj));
  if (!colons) {
    if (!parts[0]) fail("empty subscript");
    e->args.push_back(std::move(parts[0]));
  } else {
    for (auto& p : parts) e->args.push_back(std::move(p));
  }
  return e;
}

// callee(args...): Call's args are the callee, then the positional arguments.
ExprPtr Parser::call(ExprPtr callee) {
  auto e = make(Expr::Call, cur().line);
  e->args.push_back(std::move(callee));
  call_args(*e);
  return e;
}

void Parser::call_args(Expr& call) {
  expect_op("(");
  while (!is_op(")")) {
    if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
    if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
      std::string key = next().text;
      next();
      call.kwargs.emplace_back(std::move(key), expression());
    } else {
      if (!call.kwargs.empty()) fail("positional argument follows keyword argument");
      call.args.push_back(expression());
    }
    if (!is_op(")")) expect_op(",");
  }
  next();
}

ExprPtr Parser::filters_and_tests(ExprPtr e) {
  Chain chain(*this);
  for (;;) {
    chain.link();
    if (is_op("|")) {
      e = filter(std::move(e));
    } else if (is_name("is")) {
      e = test(std::move(e));
    } else if (is_op("(")) {
      e = call(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr Parser::filter(ExprPtr e) {
  const int line = next().line;
  auto f = make(Expr::Filter, line);
  f->name = expect_name();
  if (!has_filter(f->name)) fail("no filter named '" + f->name + "' (not supported)");
  f->args.push_back(std::move(e));
  if (is_op("(")) call_args(*f);
  return f;
}

ExprPtr Parser::test(ExprPtr e) {
  const int line = next().line;
  auto t = make(Expr::Test, line);
  if (is_name("not")) {
    next();
    t->negated = true;
  }
  t->name = expect_name();
  if (!has_test(t->name)) fail("no test named '" + t->name + "' (not supported)");
  t->args.push_back(std::move(e));
  if (is_op("(")) {
    call_args(*t);
  } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int || cur().type == Tok::Float ||
              is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail("you cannot chain multiple tests with is");
    t->args.push_back(postfix(primary()));
  }
  return t;
}

}  // namespace cadre::tmpl
