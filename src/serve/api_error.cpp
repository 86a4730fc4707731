// OpenAI's error body.
#include "serve/api_error.h"

#include <nlohmann/json.hpp>

namespace cadre {

std::string api_error_body(const ApiError& e) {
  nlohmann::json j = {{"error",
                       {{"message", e.what()},
                        {"type", e.type},
                        {"param", e.param.empty() ? nlohmann::json() : nlohmann::json(e.param)},
                        {"code", e.code.empty() ? nlohmann::json() : nlohmann::json(e.code)}}}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace cadre
