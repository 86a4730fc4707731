// The tokenizer: data text between tags, and the expression tokens inside `{{ }}` and `{% %}`.
// Whitespace rules follow jinja2/lexer.py so that rendered text matches byte for byte.
#include "template/lexer.h"

#include <cctype>
#include <cstring>

#include "template/text.h"
#include "template/value.h"

namespace cadre::tmpl {
namespace {

// Jinja splits the source on \r\n, \r and \n, joins with \n and drops one trailing newline.
std::string normalize(const std::string& src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

int count_lines(const std::string& s, size_t a, size_t b) {
  int n = 0;
  for (size_t i = a; i < b; ++i) n += s[i] == '\n';
  return n;
}

bool all_space(const std::string& s) {
  if (s.empty()) return false;
  for (char32_t c : text::decode(s))
    if (!text::is_space(c)) return false;
  return true;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t at = next_tag(pos_);
      if (at == std::string::npos) {
        emit(Tok::Data, src_.substr(pos_));
        break;
      }
      tag(at);
    }
    out_.push_back({Tok::End, "", line_});
    return std::move(out_);
  }

 private:
  size_t next_tag(size_t from) const {
    size_t at = from;
    while ((at = src_.find('{', at)) != std::string::npos) {
      if (at + 1 < src_.size() && std::strchr("{%#", src_[at + 1])) return at;
      ++at;
    }
    return at;
  }

  void emit(Tok type, std::string text) {
    const int lines = type == Tok::Data || type == Tok::String ? count_lines(text, 0, text.size()) : 0;
    if (type != Tok::Data || !text.empty()) out_.push_back({type, std::move(text), line_});
    line_ += lines;
  }

  // The text before a tag, with `{%-` and lstrip_blocks applied.
  void leading_text(size_t at, char kind, char sign) {
    std::string data = src_.substr(pos_, at - pos_);
    if (sign == '-') {
      const std::string kept = text::strip(data, text::Side::Right);
      line_ += count_lines(data, kept.size(), data.size());
      data = kept;
    } else if (sign != '+' && kind != '{') {
      const size_t nl = data.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && all_space(data.substr(l_pos))) data.resize(l_pos);
    }
    emit(Tok::Data, data);
  }

  void tag(size_t at) {
    const char kind = src_[at + 1];
    const char sign = at + 2 < src_.size() && (src_[at + 2] == '-' || src_[at + 2] == '+') ? src_[at + 2] : 0;
    leading_text(at, kind, sign);
    pos_ = at + 2 + (sign ? 1 : 0);
    if (kind == '#') return comment();
    out_.push_back({kind == '{' ? Tok::VarBegin : Tok::BlockBegin, "", line_});
    expression(kind == '{' ? '}' : '%');
  }

  void skip_space_after() {
    while (pos_ < src_.size()) {
      size_t n = 1;
      const unsigned char b = static_cast<unsigned char>(src_[pos_]);
      char32_t c = b;
      if (b >= 0x80) {
        const std::u32string u = text::decode(src_.substr(pos_, 4));
        c = u.empty() ? 0 : u[0];
        std::string enc;
        utf8_append(enc, c);
        n = enc.size();
      }
      if (!text::is_space(c)) break;
      line_ += c == '\n';
      pos_ += n;
    }
  }

  // After `%}` or `#}`: `-` strips all following whitespace, plain removes one newline
  // (trim_blocks), `+` keeps it. Sets line_starting_ as Jinja does.
  void tag_end(char sign, bool trim_newline) {
    line_starting_ = false;
    if (sign == '-') {
      const size_t before = pos_;
      skip_space_after();
      line_starting_ = pos_ > before && src_[pos_ - 1] == '\n';
    } else if (sign != '+' && trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ++line_;
      line_starting_ = true;
    }
  }

  void comment() {
    const int start = line_;
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) throw TemplateError("missing end of comment tag", start);
    const char sign = end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
    line_ += count_lines(src_, pos_, end);
    pos_ = end + 2;
    tag_end(sign, true);
  }

  bool at_end(char close, char& sign) {
    for (char s : {'-', '+', '\0'}) {
      if (s == '+' && close == '}') continue;
      size_t p = pos_;
      if (s) {
        if (src_[p] != s) continue;
        ++p;
      }
      if (src_.compare(p, 2, std::string(1, close) + "}") == 0) {
        sign = s;
        pos_ = p + 2;
        return true;
      }
    }
    return false;
  }

  void expression(char close) {
    const int start = line_;
    for (;;) {
      while (pos_ < src_.size() && std::isspace(static_cast<unsigned char>(src_[pos_]))) line_ += src_[pos_++] == '\n';
      if (pos_ >= src_.size()) throw TemplateError(close == '}' ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'", start);
      char sign = 0;
      if (at_end(close, sign)) {
        out_.push_back({close == '}' ? Tok::VarEnd : Tok::BlockEnd, "", line_});
        if (close == '%') {
          tag_end(sign, true);
        } else {
          tag_end(sign, false);
        }
        return;
      }
      token();
    }
  }

  void token() {
    const char c = src_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c))) return number();
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      const size_t a = pos_;
      while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
      return emit(Tok::Name, src_.substr(a, pos_ - a));
    }
    if (c == '\'' || c == '"') return string_literal(c);
    static const char* ops2[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : ops2)
      if (src_.compare(pos_, 2, op) == 0) {
        pos_ += 2;
        return emit(Tok::Op, op);
      }
    if (std::strchr("+-*/%~[](){}<>=.:|,;", c)) {
      ++pos_;
      return emit(Tok::Op, std::string(1, c));
    }
    throw TemplateError(std::string("unexpected char '") + c + "'", line_);
  }

  void digits(std::string& out) {
    while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) ||
                                  (src_[pos_] == '_' && pos_ + 1 < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))))) {
      if (src_[pos_] != '_') out += src_[pos_];
      ++pos_;
    }
  }

  void number() {
    std::string num;
    digits(num);
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      is_float = true;
      num += src_[pos_++];
      digits(num);
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
        is_float = true;
        num += 'e';
        num.append(src_, pos_ + 1, p - pos_ - 1);
        pos_ = p;
        digits(num);
      }
    }
    emit(is_float ? Tok::Float : Tok::Int, num);
  }

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  }

  // Python's unicode-escape decoding of the literal's body, as Jinja applies it.
  bool escape(std::string& out, size_t& p) {
    const char e = src_[p];
    static const char* simple = "\\'\"abfnrtv";
    static const char* values = "\\'\"\a\b\f\n\r\t\v";
    if (const char* hit = std::strchr(simple, e); hit && e) {
      out += values[hit - simple];
      ++p;
      return true;
    }
    if (e == '\n') {
      ++p;
      return true;
    }
    if (e >= '0' && e <= '7') {
      int v = 0, n = 0;
      while (n < 3 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7') v = v * 8 + (src_[p++] - '0'), ++n;
      utf8_append(out, static_cast<char32_t>(v));
      return true;
    }
    const int width = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (!width) return false;
    char32_t v = 0;
    for (int i = 1; i <= width; ++i) {
      const int h = p + i < src_.size() ? hex_value(src_[p + i]) : -1;
      if (h < 0) throw TemplateError("truncated \\" + std::string(1, e) + " escape in a string literal", line_);
      v = v * 16 + static_cast<char32_t>(h);
    }
    if (v > 0x10FFFF) throw TemplateError("illegal Unicode character in a string literal", line_);
    utf8_append(out, v);
    p += width + 1;
    return true;
  }

  void string_literal(char quote) {
    std::string out;
    size_t p = pos_ + 1;
    while (p < src_.size() && src_[p] != quote) {
      if (src_[p] == '\\' && p + 1 < src_.size()) {
        ++p;
        if (src_[p] == 'N') throw TemplateError("\\N{...} escapes are not supported", line_);
        if (!escape(out, p)) out += '\\';
        continue;
      }
      out += src_[p++];
    }
    if (p >= src_.size()) throw TemplateError("unterminated string literal", line_);
    const int lines = count_lines(src_, pos_, p);
    out_.push_back({Tok::String, std::move(out), line_});
    line_ += lines;
    pos_ = p + 1;
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) { return Lexer(normalize(source)).run(); }

}  // namespace cadre::tmpl
