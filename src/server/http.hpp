// The HTTP vocabulary of the server's connection coroutines (Boost.Beast over Boost.Asio, C++20 coroutines): one
// request in, one response or one server-sent-event stream out.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace photon::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

using HttpRequest = http::request<http::string_body>;
using HttpStream = beast::tcp_stream;
/// Completion token of every awaited operation: errors come back as values, never as exceptions.
constexpr auto kAwait = net::as_tuple(net::use_awaitable);

/// Content types (named constants: GCC 12 cannot pass string literals in a co_await expression).
inline constexpr std::string_view kJsonType = "application/json";
inline constexpr std::string_view kTextType = "text/plain; charset=utf-8";
inline constexpr std::string_view kPrometheusType = "text/plain; version=0.0.4";

/// Headers every response carries besides content type and length (CORS, for instance).
using ExtraHeaders = std::vector<std::pair<std::string, std::string>>;

/// Writes one complete response. Returns false when the connection failed.
net::awaitable<bool> send_response(HttpStream& stream, const HttpRequest& req, http::status status,
                                   std::string_view content_type, std::string body, const ExtraHeaders& extra);

/// A server-sent-event stream: the header once, then `data: ...` events as chunks of a chunked body.
class EventStream {
 public:
  EventStream(HttpStream& stream, const HttpRequest& req, const ExtraHeaders& extra);
  /// Writes the response header (200, text/event-stream). False when the connection failed.
  net::awaitable<bool> open();
  /// Writes `data: <payload>\n\n`. False when the connection failed (the client went away).
  net::awaitable<bool> send(std::string_view payload);
  /// Ends the body (the last chunk). False when the connection failed.
  net::awaitable<bool> close();

 private:
  HttpStream& stream_;
  http::response<http::empty_body> header_;
  std::string frame_;
};

}  // namespace photon::server
