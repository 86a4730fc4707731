// Request semantics of the job store (see key_table.h). The same as the rendezvous KvStore
// contract: an empty expected value means "absent"; compare-and-set answers the value stored
// afterwards; add counts an absent key as 0 and stores decimal text.
#include "store/key_table.h"

#include <charconv>

#include "core/checked_math.h"

namespace cadre::store {

bool KeyTable::ready(const Request& r) const {
  if (r.op != Op::Wait && r.op != Op::Get) return true;
  for (const auto& k : r.keys)
    if (!values_.count(k)) return false;
  return true;
}

bool KeyTable::mutates(const Request& r) {
  return r.op == Op::Set || r.op == Op::Add || r.op == Op::CompareSet || r.op == Op::Delete || r.op == Op::SetSession;
}

Reply KeyTable::timed_out(const Request&) const { return {Status::TimedOut, "", 0}; }

Reply KeyTable::apply(const Request& r) {
  Reply out;
  switch (r.op) {
    case Op::Set:
    case Op::SetSession:  // the server forgets the key when the connection goes
      values_[r.keys[0]] = r.value;
      break;
    case Op::Get: {
      auto it = values_.find(r.keys[0]);
      if (it == values_.end()) return {Status::NotFound, "", 0};
      out.value = it->second;
      break;
    }
    case Op::Add: {
      std::string& v = values_[r.keys[0]];  // absent counts as 0
      int64_t current = 0;
      if (!v.empty()) {
        auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), current);
        if (ec != std::errc() || end != v.data() + v.size())
          return {Status::Failed, "add: the key holds '" + v.substr(0, 64) + "', not an integer", 0};
      }
      auto next = checked_add(current, r.delta);
      if (!next) return {Status::Failed, "add: the result does not fit 64 bits", 0};
      v = std::to_string(*next);
      out.number = *next;
      break;
    }
    case Op::CompareSet: {
      auto it = values_.find(r.keys[0]);
      const bool matches = r.value.empty() ? it == values_.end() : it != values_.end() && it->second == r.value;
      if (matches) {
        values_[r.keys[0]] = r.desired;
        out.value = r.desired;
      } else if (it == values_.end()) {
        return {Status::NotFound, "", 0};
      } else {
        out.value = it->second;
      }
      break;
    }
    case Op::Check: {
      bool all = true;
      for (const auto& k : r.keys) all = all && values_.count(k);
      out.number = all;
      break;
    }
    case Op::Delete:
      out.number = static_cast<int64_t>(values_.erase(r.keys[0]));
      break;
    case Op::NumKeys:
      out.number = static_cast<int64_t>(values_.size());
      break;
    case Op::Wait:
    case Op::Ping:
      break;
  }
  return out;
}

}  // namespace cadre::store
