// Statements: text, `{{ expr }}`, if/elif/else, for (with `if` filter and else), set (name,
// `ns.attr`, tuple targets, block form), macro, break/continue (transformers enables Jinja's
// loopcontrols), `with`, and transformers' `{% generation %}` (rendered as its body).
#include "template/parser.h"

#include "template/parser_impl.h"

namespace cadre::tmpl {
namespace {

// Tags Jinja knows but this subset does not render: refused by name, not as a syntax error.
bool jinja_tag(const std::string& name) {
  for (const char* t : {"call", "filter", "raw", "include", "import", "from", "extends", "block", "autoescape", "trans",
                        "pluralize", "do", "debug"})
    if (name == t) return true;
  return false;
}

}  // namespace

Parser::Depth::Depth(Parser& parser) : p(parser) {
  if (++p.depth_ > p.max_depth_) p.fail("template nests deeper than " + std::to_string(p.max_depth_) + " levels");
}

void Parser::Chain::link() {
  ++links;
  if (++p.depth_ > p.max_depth_) p.fail("template nests deeper than " + std::to_string(p.max_depth_) + " levels");
}

void Parser::fail(const std::string& message) const { throw TemplateError(message, cur().line); }

void Parser::fail_unexpected() const {
  const Token& t = cur();
  switch (t.type) {
    case Tok::End: fail("unexpected end of template");
    case Tok::BlockEnd: fail("unexpected '%}'");
    case Tok::VarEnd: fail("unexpected '}}'");
    case Tok::String: fail("unexpected string literal");
    default: fail("unexpected '" + t.text + "'");
  }
}

void Parser::expect_op(const char* op) {
  if (!is_op(op)) fail(std::string("expected '") + op + "'" + (cur().type == Tok::Op ? ", got '" + cur().text + "'" : ""));
  next();
}

std::string Parser::expect_name() {
  if (cur().type != Tok::Name) fail("expected a name");
  return next().text;
}

void Parser::end_block() {
  if (cur().type != Tok::BlockEnd) fail_unexpected();
  next();
}

Body Parser::parse_template() {
  std::string ended_by;
  Body body = body_until({}, ended_by);
  return body;
}

// Statements up to one of `ends` (consumed, with its name in ended_by) or the end of input.
Body Parser::body_until(std::initializer_list<const char*> ends, std::string& ended_by) {
  Depth d(*this);
  Body body;
  const int start = cur().line;
  for (;;) {
    const Token& t = cur();
    if (t.type == Tok::End) {
      if (ends.size() == 0) return body;
      throw TemplateError("unexpected end of template: missing '" + std::string(*(ends.end() - 1)) + "'", start);
    }
    if (t.type == Tok::Data) {
      auto n = std::make_unique<Node>();
      n->kind = Node::Text;
      n->line = t.line;
      n->text = next().text;
      body.push_back(std::move(n));
    } else if (t.type == Tok::VarBegin) {
      auto n = std::make_unique<Node>();
      n->kind = Node::Output;
      n->line = next().line;
      n->expr = tuple_expression();
      if (cur().type != Tok::VarEnd) fail_unexpected();
      next();
      body.push_back(std::move(n));
    } else {
      next();  // BlockBegin
      if (cur().type == Tok::Name)
        for (const char* end : ends)
          if (cur().text == end) {
            ended_by = next().text;
            return body;
          }
      body.push_back(statement());
    }
  }
}

std::unique_ptr<Node> Parser::statement() {
  if (cur().type != Tok::Name) fail("expected a tag name");
  const Token& t = next();
  const std::string name = t.text;
  if (name == "if") return if_statement(t.line);
  if (name == "for") return for_statement(t.line);
  if (name == "set") return set_statement(t.line);
  if (name == "macro") return macro_statement(t.line);
  if (name == "with" || name == "generation") return block_statement(Node::Scope, t.line, name == "with" ? "endwith" : "endgeneration");
  if (name == "break" || name == "continue") {
    auto n = std::make_unique<Node>();
    n->kind = name == "break" ? Node::Break : Node::Continue;
    n->line = t.line;
    end_block();
    return n;
  }
  if (jinja_tag(name)) throw TemplateError("unsupported tag '" + name + "'", t.line);
  throw TemplateError("unknown tag '" + name + "'", t.line);
}

std::unique_ptr<Node> Parser::if_statement(int line) {
  auto n = std::make_unique<Node>();
  n->kind = Node::If;
  n->line = line;
  ExprPtr cond = tuple_expression();
  for (;;) {
    end_block();
    std::string ended_by;
    Body body = body_until({"elif", "else", "endif"}, ended_by);
    n->branches.emplace_back(std::move(cond), std::move(body));
    if (ended_by == "endif") break;
    if (ended_by == "else") {
      end_block();
      n->branches.emplace_back(nullptr, body_until({"endif"}, ended_by));
      break;
    }
    cond = tuple_expression();
  }
  end_block();
  return n;
}

// Assignment targets: `x` or `a, b` (optionally in parentheses), up to the name `stop_name`
// or the `=`.
std::vector<std::string> Parser::targets(const char* stop_name) {
  std::vector<std::string> names;
  const bool paren = is_op("(");
  if (paren) next();
  for (;;) {
    names.push_back(expect_name());
    if (!is_op(",")) break;
    next();
    if ((stop_name && is_name(stop_name)) || is_op("=") || is_op(")")) break;
  }
  if (paren) expect_op(")");
  return names;
}

std::unique_ptr<Node> Parser::for_statement(int line) {
  auto n = std::make_unique<Node>();
  n->kind = Node::For;
  n->line = line;
  n->targets = targets("in");
  if (!is_name("in")) fail("expected 'in'");
  next();
  n->expr = or_expression();
  if (is_op(",")) fail("a tuple of iterables in a for loop is not supported");
  if (is_name("if")) {
    next();
    n->filter = expression();
  }
  if (is_name("recursive")) fail("recursive for loops are not supported");
  end_block();
  std::string ended_by;
  n->body = body_until({"else", "endfor"}, ended_by);
  if (ended_by == "else") {
    end_block();
    n->else_body = body_until({"endfor"}, ended_by);
  }
  end_block();
  return n;
}

std::unique_ptr<Node> Parser::set_statement(int line) {
  auto n = std::make_unique<Node>();
  n->kind = Node::Set;
  n->line = line;
  if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == ".") {
    n->targets.push_back(next().text);
    next();
    n->attr = expect_name();
  } else {
    n->targets = targets(nullptr);
  }
  if (is_op("=")) {
    next();
    n->expr = tuple_expression();
    end_block();
    return n;
  }
  if (!n->attr.empty() || n->targets.size() != 1) fail("expected '='");
  if (is_op("|")) fail("filters on a block set are not supported");
  end_block();
  n->kind = Node::SetBlock;
  std::string ended_by;
  n->body = body_until({"endset"}, ended_by);
  end_block();
  return n;
}

std::unique_ptr<Node> Parser::macro_statement(int line) {
  auto n = std::make_unique<Node>();
  n->kind = Node::Macro;
  n->line = line;
  n->text = expect_name();
  expect_op("(");
  while (!is_op(")")) {
    n->targets.push_back(expect_name());
    if (is_op("=")) {
      next();
      n->defaults.push_back(expression());
    } else {
      if (!n->defaults.empty() && n->defaults.back()) fail("non-default argument follows default argument");
      n->defaults.push_back(nullptr);
    }
    if (!is_op(")")) expect_op(",");
  }
  next();
  end_block();
  std::string ended_by;
  n->body = body_until({"endmacro"}, ended_by);
  end_block();
  return n;
}

std::unique_ptr<Node> Parser::block_statement(Node::Kind kind, int line, const char* end) {
  auto n = std::make_unique<Node>();
  n->kind = kind;
  n->line = line;
  // `with a = 1, b = 2`: each assignment becomes a Set at the start of the new scope.
  while (cur().type == Tok::Name) {
    auto set = std::make_unique<Node>();
    set->kind = Node::Set;
    set->line = cur().line;
    set->targets.push_back(next().text);
    expect_op("=");
    set->expr = expression();
    n->body.push_back(std::move(set));
    if (is_op(",")) next();
  }
  end_block();
  std::string ended_by;
  for (auto& s : body_until({end}, ended_by)) n->body.push_back(std::move(s));
  end_block();
  return n;
}

std::shared_ptr<const Program> parse(const std::string& source, int max_depth) {
  auto program = std::make_shared<Program>();
  Parser parser(tokenize(source), max_depth);
  program->body = parser.parse_template();
  return program;
}

}  // namespace cadre::tmpl
