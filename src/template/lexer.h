// Template source -> tokens, with whitespace handled as transformers' Jinja environment does
// it (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, `{%-`/`-%}` and `+`).
#pragma once

#include <string>
#include <vector>

namespace cadre::tmpl {

enum class Tok { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End };

struct Token {
  Tok type;
  std::string text;  // data text, name, unescaped string, number text or operator
  int line;
};

// Throws TemplateError naming the line for an unclosed tag, comment or string, or a character
// no Jinja token starts with.
std::vector<Token> tokenize(const std::string& source);

}  // namespace cadre::tmpl
