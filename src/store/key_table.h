// The job store's contents and what each request does to them: the semantics shared by every
// connection, without sockets (the server serialises requests on one thread).
#pragma once

#include <string>
#include <unordered_map>

#include "store/wire.h"

namespace cadre::store {

class KeyTable {
 public:
  // True when `request` can be answered now: a Get that waits, or a Wait, needs its keys.
  bool ready(const Request& request) const;
  // Answers a request (a waiting one only once ready(), or when its time is up: then it is
  // TimedOut). Changes the table for Set, Add, CompareSet and Delete.
  Reply apply(const Request& request);
  Reply timed_out(const Request& request) const;
  // True for requests that may change what ready() says for others.
  static bool mutates(const Request& request);

 private:
  std::unordered_map<std::string, std::string> values_;
};

}  // namespace cadre::store
