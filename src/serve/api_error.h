// An error answered to an HTTP client in OpenAI's shape:
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// with its HTTP status (400 bad request, 401 bad key, 404 unknown model or path, 413 body too
// large, 429 queue full, 503 shutting down).
#pragma once

#include <stdexcept>
#include <string>

namespace cadre {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = "", std::string code = "",
           std::string type = "invalid_request_error")
      : std::runtime_error(message), status(status), param(std::move(param)), code(std::move(code)), type(std::move(type)) {}
  int status;
  std::string param, code, type;
};

// The JSON body for an error.
std::string api_error_body(const ApiError& error);

}  // namespace cadre
