// Renders a Program: scopes (a for loop's body and a macro get their own, as in Jinja), the
// output buffer and every limit of Limits. Internal to the template library; the builtins
// call back into it to invoke callables, charge work and report errors at the current line.
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "template/ast.h"
#include "template/template.h"

namespace cadre::tmpl {

class Evaluator {
 public:
  Evaluator(const Limits& limits, std::tm now);
  std::string render(const Program& program, const Dict& variables);

  [[noreturn]] void fail(const std::string& message) const;
  // Accounts for a string or list of `bytes` being built: refused past the per-value and
  // whole-render limits.
  void charge(size_t bytes);
  // Accounts for `bytes` scanned or copied without building a new value (len, in, ==,
  // iteration): a loop over a huge string must run out of budget, not run for hours.
  void work(size_t bytes);
  void count_iteration();
  Value call(const Value& fn, const CallArgs& args);
  const std::tm& now() const { return now_; }
  int line() const { return line_; }

 private:
  using Frame = std::unordered_map<std::string, Value>;
  enum class Flow { Normal, Break, Continue };
  // Counts the evaluator's own recursion (nested blocks, expressions, macro bodies).
  struct Nesting {
    explicit Nesting(Evaluator& e);
    ~Nesting() { --ev.depth_; }
    Evaluator& ev;
  };

  Flow exec(const Body& body);
  Flow exec(const Node& node);
  void exec_if(const Node& node, Flow& flow);
  Flow exec_for(const Node& node);
  void exec_set(const Node& node);
  void exec_macro(const Node& node);
  std::string capture(const Body& body);
  void assign(const std::vector<std::string>& targets, const Value& value);
  void emit(const std::string& text);

  Value eval(const Expr& e);
  Value eval_name(const Expr& e);
  Value eval_binary(const Expr& e);
  Value eval_compare(const Expr& e);
  Value eval_call(const Expr& e);
  Value eval_filter(const Expr& e);
  Value eval_test(const Expr& e);
  Value eval_slice(const Expr& e);
  Value eval_literal_collection(const Expr& e);
  CallArgs eval_args(const Expr& e, size_t first);
  Value arithmetic(const std::string& op, const Value& a, const Value& b);
  Value call_macro(const Node& macro, const CallArgs& args);

  const Limits limits_;
  std::tm now_;
  std::vector<std::shared_ptr<Frame>> frames_;  // innermost last; [0] the globals
  std::string out_;
  uint64_t iterations_ = 0, work_ = 0;
  int call_depth_ = 0;
  int depth_ = 0;
  int line_ = 0;
};

}  // namespace cadre::tmpl
