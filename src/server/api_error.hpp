// An OpenAI-style API error: the HTTP status and the body {"error": {"message", "type", "param", "code"}} that
// OpenAI's clients parse.
#pragma once

#include <string>

#include <photon/status.hpp>

namespace photon::server {

struct ApiError {
  int status = 400;  ///< HTTP status
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  ///< the request field at fault, or empty
  std::string code;   ///< a short machine-readable reason, or empty

  /// The JSON body.
  std::string body() const;
  static ApiError bad_request(std::string message, std::string param = {});
  /// An engine error as the API reports it: invalid arguments and unsupported features 400, resource limits 429,
  /// not found 404, cancelled (shutting down) 503, everything else 500.
  static ApiError from_status(const Status& status);
};

}  // namespace photon::server
