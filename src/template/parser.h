// Tokens -> Program. Jinja's grammar and operator precedence (jinja2/parser.py) for the subset
// chat templates use; any other tag, filter or test is refused by name with its line.
#pragma once

#include <memory>
#include <string>

#include "template/ast.h"

namespace cadre::tmpl {

// max_depth bounds nesting of blocks and expressions, so a hostile template cannot exhaust
// the stack while being parsed.
std::shared_ptr<const Program> parse(const std::string& source, int max_depth);

}  // namespace cadre::tmpl
