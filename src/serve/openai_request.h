// Requests of the OpenAI HTTP API, parsed and checked: POST /v1/completions and
// /v1/chat/completions bodies become an ApiRequest, or an ApiError (400) naming the field:
// malformed JSON, a wrong type, a value out of range, and every field this server does not
// implement (it is refused, never silently ignored).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chat/chat_message.h"
#include "generate/sequence.h"
#include "serve/api_error.h"

namespace cadre {

enum class Endpoint { Completions, Chat };

struct ApiRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::string model;
  std::string prompt;                 // completions, as text
  std::vector<int> prompt_token_ids;  // completions, as token ids (then `prompt` is unused)
  std::vector<ChatMessage> messages;  // chat
  GenerationParams params;            // max_tokens is -1 when the request left it out
  int64_t n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool seeded = false;         // a seed was given (otherwise the server draws one)
};

// `max_n` bounds `n` (the server's batch). ApiError(400) on anything wrong.
ApiRequest parse_completion_request(const std::string& body, int64_t max_n);
ApiRequest parse_chat_request(const std::string& body, int64_t max_n);

}  // namespace cadre
