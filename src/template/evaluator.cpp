// Statement execution: output, if, for (Jinja's loop variable, filtering and else), set,
// macros, scopes and the limits that keep a hostile template from running away.
#include "template/evaluator.h"

#include "template/builtins.h"

namespace cadre::tmpl {

Evaluator::Evaluator(const Limits& limits, std::tm now) : limits_(limits), now_(now) {}

void Evaluator::fail(const std::string& message) const { throw TemplateError(message, line_); }

Evaluator::Nesting::Nesting(Evaluator& e) : ev(e) {
  if (++ev.depth_ > ev.limits_.max_eval_depth)
    ev.fail("rendering nests deeper than " + std::to_string(ev.limits_.max_eval_depth) + " levels");
}

void Evaluator::charge(size_t bytes) {
  if (bytes > limits_.max_output_bytes)
    fail("a value of " + std::to_string(bytes) + " bytes exceeds the limit of " + std::to_string(limits_.max_output_bytes));
  work(bytes);
}

void Evaluator::work(size_t bytes) {
  work_ += bytes;
  if (work_ > limits_.max_work_bytes)
    fail("rendering built or scanned more than " + std::to_string(limits_.max_work_bytes) + " bytes");
}

void Evaluator::count_iteration() {
  if (++iterations_ > limits_.max_iterations)
    fail("more than " + std::to_string(limits_.max_iterations) + " loop iterations and macro calls");
}

void Evaluator::emit(const std::string& text) {
  if (out_.size() + text.size() > limits_.max_output_bytes)
    fail("rendered output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
  charge(text.size());
  out_ += text;
}

std::string Evaluator::render(const Program& program, const Dict& variables) {
  frames_.clear();
  frames_.push_back(std::make_shared<Frame>());
  for (auto& [k, v] : make_globals().items) (*frames_[0])[k] = v;
  frames_.push_back(std::make_shared<Frame>());
  for (const auto& [k, v] : variables.items) (*frames_[1])[k] = v;
  out_.clear();
  depth_ = call_depth_ = 0;
  try {
    if (exec(program.body) != Flow::Normal) fail("'break' or 'continue' outside a loop");
  } catch (const TemplateRaised&) {
    throw;
  } catch (const TemplateError& e) {
    if (e.line() == 0) throw TemplateError(e.message(), line_);
    throw;
  }
  return std::move(out_);
}

Evaluator::Flow Evaluator::exec(const Body& body) {
  for (const auto& node : body) {
    const Flow flow = exec(*node);
    if (flow != Flow::Normal) return flow;
  }
  return Flow::Normal;
}

Evaluator::Flow Evaluator::exec(const Node& node) {
  Nesting nesting(*this);
  line_ = node.line;
  Flow flow = Flow::Normal;
  switch (node.kind) {
    case Node::Text: emit(node.text); break;
    case Node::Output: emit(to_str(eval(*node.expr))); break;
    case Node::If: exec_if(node, flow); break;
    case Node::For: return exec_for(node);
    case Node::Set: exec_set(node); break;
    case Node::SetBlock: assign(node.targets, Value::string(capture(node.body))); break;
    case Node::Macro: exec_macro(node); break;
    case Node::Break: return Flow::Break;
    case Node::Continue: return Flow::Continue;
    case Node::Scope:
      frames_.push_back(std::make_shared<Frame>());
      flow = exec(node.body);
      frames_.pop_back();
      break;
  }
  return flow;
}

void Evaluator::exec_if(const Node& node, Flow& flow) {
  for (const auto& [cond, body] : node.branches) {
    if (cond) line_ = cond->line;
    if (!cond || eval(*cond).truthy()) {
      flow = exec(body);
      return;
    }
  }
}

namespace {

Value loop_object(size_t i, const List& items) {
  const size_t n = items.size();
  Dict d;
  d.set("index0", Value::integer(static_cast<int64_t>(i)));
  d.set("index", Value::integer(static_cast<int64_t>(i + 1)));
  d.set("revindex0", Value::integer(static_cast<int64_t>(n - i - 1)));
  d.set("revindex", Value::integer(static_cast<int64_t>(n - i)));
  d.set("first", Value::boolean(i == 0));
  d.set("last", Value::boolean(i + 1 == n));
  d.set("length", Value::integer(static_cast<int64_t>(n)));
  d.set("depth", Value::integer(1));
  d.set("depth0", Value::integer(0));
  d.set("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
  d.set("nextitem", i + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
  d.set("cycle", Value::callable("loop.cycle", [i](Evaluator& ev, const CallArgs& args) {
          if (args.positional.empty()) ev.fail("no items for cycling given");
          return args.positional[i % args.positional.size()];
        }));
  return Value::dict(std::move(d));
}

}  // namespace

// Each iteration runs in a fresh scope: a `set` inside the body is gone at the next
// iteration and after the loop (why templates use namespace()).
Evaluator::Flow Evaluator::exec_for(const Node& node) {
  List items = iterate(*this, eval(*node.expr));
  if (node.filter) {
    List kept;
    for (auto& item : items) {
      count_iteration();
      frames_.push_back(std::make_shared<Frame>());
      assign(node.targets, item);
      const bool keep = eval(*node.filter).truthy();
      frames_.pop_back();
      if (keep) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    frames_.push_back(std::make_shared<Frame>());
    const Flow flow = exec(node.else_body);
    frames_.pop_back();
    return flow;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    count_iteration();
    frames_.push_back(std::make_shared<Frame>());
    assign(node.targets, items[i]);
    (*frames_.back())["loop"] = loop_object(i, items);
    const Flow flow = exec(node.body);
    frames_.pop_back();
    if (flow == Flow::Break) break;
  }
  return Flow::Normal;
}

void Evaluator::assign(const std::vector<std::string>& targets, const Value& value) {
  Frame& frame = *frames_.back();
  if (targets.size() == 1) {
    frame[targets[0]] = value;
    return;
  }
  const List parts = iterate(*this, value);
  if (parts.size() != targets.size())
    fail(parts.size() > targets.size() ? "too many values to unpack (expected " + std::to_string(targets.size()) + ")"
                                       : "not enough values to unpack (expected " + std::to_string(targets.size()) + ", got " +
                                             std::to_string(parts.size()) + ")");
  for (size_t i = 0; i < targets.size(); ++i) frame[targets[i]] = parts[i];
}

void Evaluator::exec_set(const Node& node) {
  Value value = eval(*node.expr);
  if (node.attr.empty()) return assign(node.targets, value);
  Value ns;
  for (auto it = frames_.rbegin(); it != frames_.rend(); ++it)
    if (auto found = (*it)->find(node.targets[0]); found != (*it)->end()) {
      ns = found->second;
      break;
    }
  if (!ns.is_namespace()) fail("cannot assign attribute on non-namespace object '" + node.targets[0] + "'");
  if (node.attr[0] == '_')
    fail("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + node.attr + "'");
  ns.ns_ref().set(node.attr, std::move(value));
}

std::string Evaluator::capture(const Body& body) {
  std::string saved = std::move(out_);
  out_.clear();
  const Flow flow = exec(body);
  std::string captured = std::move(out_);
  out_ = std::move(saved);
  if (flow != Flow::Normal) fail("'break' or 'continue' outside a loop");
  return captured;
}

// A macro sees the template's top-level names and its parameters (not the scope of a loop it
// is defined in; capturing that scope would also make the frame own the macro that owns it).
void Evaluator::exec_macro(const Node& node) {
  const Node* macro = &node;
  (*frames_.back())[node.text] = Value::callable(node.text, [macro](Evaluator& ev, const CallArgs& args) {
    auto saved = std::move(ev.frames_);
    ev.frames_ = {saved[0], saved[1]};
    try {
      Value result = ev.call_macro(*macro, args);
      ev.frames_ = std::move(saved);
      return result;
    } catch (...) {
      ev.frames_ = std::move(saved);
      throw;
    }
  });
}

Value Evaluator::call_macro(const Node& macro, const CallArgs& args) {
  count_iteration();
  if (++call_depth_ > limits_.max_call_depth) fail("macro calls nest deeper than " + std::to_string(limits_.max_call_depth));
  if (args.positional.size() > macro.targets.size()) fail("macro '" + macro.text + "' was given too many arguments");
  auto frame = std::make_shared<Frame>();
  for (size_t i = 0; i < macro.targets.size(); ++i) {
    const std::string& param = macro.targets[i];
    if (i < args.positional.size()) (*frame)[param] = args.positional[i];
    else if (const Value* kw = args.kw(param)) (*frame)[param] = *kw;
    else if (macro.defaults[i]) (*frame)[param] = eval(*macro.defaults[i]);
    else (*frame)[param] = Value::undefined("'" + param + "' is undefined");
  }
  for (const auto& [name, value] : args.keyword) {
    bool known = false;
    for (const auto& p : macro.targets) known = known || p == name;
    if (!known) fail("macro '" + macro.text + "' takes no keyword argument '" + name + "'");
  }
  frames_.push_back(frame);
  const int line = line_;
  std::string text = capture(macro.body);
  line_ = line;
  --call_depth_;
  return Value::string(std::move(text));
}

}  // namespace cadre::tmpl
