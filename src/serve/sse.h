// Server-Sent Events as the OpenAI API streams them: one `data: <json>` event per chunk, a
// final `data: [DONE]`, and comment lines that keep a waiting connection alive (and reveal a
// client that went away).
#pragma once

#include <string>

namespace cadre {

inline std::string sse_event(const std::string& json) { return "data: " + json + "\n\n"; }
inline std::string sse_done() { return "data: [DONE]\n\n"; }
inline std::string sse_comment(const std::string& text) { return ": " + text + "\n\n"; }

}  // namespace cadre
