// The parser's state, shared by its two halves: statements (parser.cpp) and expressions
// (parse_expr.cpp). Internal to the template library.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "template/ast.h"
#include "template/lexer.h"

namespace cadre::tmpl {

class Parser {
 public:
  Parser(std::vector<Token> tokens, int max_depth) : toks_(std::move(tokens)), max_depth_(max_depth) {}
  Body parse_template();

  // Expressions (parse_expr.cpp).
  ExprPtr expression();               // conditional expression, no bare tuple
  ExprPtr tuple_expression();         // `a, b` builds a tuple (as in `{{ a, b }}`)
  ExprPtr or_expression();            // no `x if c else y` (a for loop's iterable)

 private:
  // Token stream.
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == Tok::Name && cur().text == name; }
  const Token& next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }
  void expect_op(const char* op);
  std::string expect_name();
  [[noreturn]] void fail(const std::string& message) const;
  [[noreturn]] void fail_unexpected() const;

  struct Depth {
    Depth(Parser& p);
    ~Depth() { --p.depth_; }
    Parser& p;
  };
  // A run of operators (`a + b + c`, `x|f|g`, `a.b.c`) builds a tree as deep as the run is
  // long, so each link counts as a level of nesting until the run is parsed.
  struct Chain {
    explicit Chain(Parser& parser) : p(parser) {}
    ~Chain() { p.depth_ -= links; }
    void link();
    Parser& p;
    int links = 0;
  };

  // Statements (parser.cpp).
  Body body_until(std::initializer_list<const char*> ends, std::string& ended_by);
  std::unique_ptr<Node> statement();
  std::unique_ptr<Node> if_statement(int line);
  std::unique_ptr<Node> for_statement(int line);
  std::unique_ptr<Node> set_statement(int line);
  std::unique_ptr<Node> macro_statement(int line);
  std::unique_ptr<Node> block_statement(Node::Kind kind, int line, const char* end);
  std::vector<std::string> targets(const char* stop_name);
  void end_block();

  // Expression levels, loosest first (parse_expr.cpp).
  ExprPtr and_expression();
  ExprPtr not_expression();
  ExprPtr compare();
  ExprPtr add_sub();
  ExprPtr concat();
  ExprPtr mul_div();
  ExprPtr power();
  ExprPtr unary(bool with_filter);
  ExprPtr primary();
  ExprPtr postfix(ExprPtr e);
  ExprPtr filters_and_tests(ExprPtr e);
  ExprPtr subscript(ExprPtr obj);
  ExprPtr collection(const char* close, Expr::Kind kind);
  ExprPtr dict_literal();
  ExprPtr call(ExprPtr callee);
  void call_args(Expr& call);
  ExprPtr filter(ExprPtr e);
  ExprPtr test(ExprPtr e);
  ExprPtr make(Expr::Kind kind, int line);

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int max_depth_;
};

}  // namespace cadre::tmpl
