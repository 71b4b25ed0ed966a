#include "server/api_error.hpp"

#include <nlohmann/json.hpp>

namespace photon::server {

std::string ApiError::body() const {
  nlohmann::json e = {{"message", message}, {"type", type}};
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return nlohmann::json{{"error", e}}.dump();
}

ApiError ApiError::bad_request(std::string message, std::string param) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

ApiError ApiError::from_status(const Status& s) {
  ApiError e;
  e.message = s.message();
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kUnsupported:
    case StatusCode::kFormatError:
      e.status = 400;
      break;
    case StatusCode::kResourceExhausted:
    case StatusCode::kOutOfMemory:
      e.status = 429;
      e.type = "rate_limit_error";
      break;
    case StatusCode::kCancelled:  // the server is shutting down
      e.status = 503;
      e.type = "server_error";
      break;
    case StatusCode::kNotFound:
      e.status = 404;
      e.type = "not_found_error";
      break;
    default:
      e.status = 500;
      e.type = "server_error";
  }
  return e;
}

}  // namespace photon::server
