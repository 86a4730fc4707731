// One message of a conversation, as chat requests and chat training data carry it.
#pragma once

#include <string>

namespace cadre {

struct ChatMessage {
  std::string role;  // system | user | assistant (a template may accept others)
  std::string content;
};

}  // namespace cadre
