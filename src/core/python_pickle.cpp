// Pickle protocol 2 opcodes (Python's Lib/pickle.py names them).
#include "core/python_pickle.h"

#include "core/error.h"

namespace cadre {
namespace {

void little_endian(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

PickleWriter::PickleWriter() { out_ = "\x80\x02"; }  // PROTO 2

PickleWriter& PickleWriter::none() {
  out_ += 'N';
  return *this;
}

PickleWriter& PickleWriter::boolean(bool v) {
  out_ += v ? '\x88' : '\x89';  // NEWTRUE, NEWFALSE
  return *this;
}

PickleWriter& PickleWriter::integer(int64_t v) {
  if (v >= INT32_MIN && v <= INT32_MAX) {
    out_ += 'J';  // BININT: 4 bytes, signed
    little_endian(out_, static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int32_t>(v))), 4);
  } else {
    out_ += '\x8a';  // LONG1: length, then two's complement little-endian
    out_ += '\x08';
    little_endian(out_, static_cast<uint64_t>(v), 8);
  }
  return *this;
}

PickleWriter& PickleWriter::string(const std::string& utf8) {
  CADRE_CHECK(utf8.size() <= UINT32_MAX, "pickle: string of ", utf8.size(), " bytes");
  out_ += 'X';  // BINUNICODE: 4-byte length, UTF-8
  little_endian(out_, utf8.size(), 4);
  out_ += utf8;
  return *this;
}

PickleWriter& PickleWriter::global(const std::string& module, const std::string& name) {
  out_ += 'c' + module + '\n' + name + '\n';  // GLOBAL
  return *this;
}

PickleWriter& PickleWriter::mark() {
  out_ += '(';
  return *this;
}

PickleWriter& PickleWriter::tuple() {
  out_ += 't';
  return *this;
}

PickleWriter& PickleWriter::list() {
  out_ += "l";  // LIST: the items since the mark
  return *this;
}

PickleWriter& PickleWriter::dict() {
  out_ += 'd';  // DICT: key/value pairs since the mark
  return *this;
}

PickleWriter& PickleWriter::new_object() {
  out_ += ")\x81";  // EMPTY_TUPLE, NEWOBJ: cls.__new__(cls)
  return *this;
}

PickleWriter& PickleWriter::build() {
  out_ += 'b';
  return *this;
}

PickleWriter& PickleWriter::reduce() {
  out_ += 'R';
  return *this;
}

std::string PickleWriter::finish() { return out_ + '.'; }

}  // namespace cadre
