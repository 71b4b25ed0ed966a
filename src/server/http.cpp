#include "server/http.hpp"

#include <cstring>
#include <iterator>

#include <fmt/format.h>
#include <boost/asio/write.hpp>

namespace photon::server {

net::awaitable<bool> send_response(HttpStream& stream, const HttpRequest& req, http::status status,
                                   std::string_view content_type, std::string body, const ExtraHeaders& extra) {
  http::response<http::string_body> res{status, req.version()};
  res.set(http::field::server, "photon");
  res.set(http::field::content_type, content_type);
  for (const auto& [name, value] : extra) res.set(name, value);
  res.keep_alive(req.keep_alive());
  res.body() = std::move(body);
  res.prepare_payload();
  auto [ec, n] = co_await http::async_write(stream, res, kAwait);
  co_return !ec;
}

EventStream::EventStream(HttpStream& stream, const HttpRequest& req, const ExtraHeaders& extra)
    : stream_(stream), header_{http::status::ok, req.version()} {
  header_.set(http::field::server, "photon");
  header_.set(http::field::content_type, "text/event-stream");
  header_.set(http::field::cache_control, "no-cache");
  for (const auto& [name, value] : extra) header_.set(name, value);
  header_.keep_alive(req.keep_alive());
  header_.chunked(true);
}

net::awaitable<bool> EventStream::open() {
  http::response_serializer<http::empty_body> serializer{header_};
  auto [ec, n] = co_await http::async_write_header(stream_, serializer, kAwait);
  co_return !ec;
}

net::awaitable<bool> EventStream::send(std::string_view payload) {
  // One chunk of the chunked body, framed here into one buffer and written straight to the socket: one syscall per
  // event with no gather list, timer or rate policy of the stream in between (the stream has no deadline set).
  const size_t size = payload.size() + std::strlen("data: \n\n");
  frame_.clear();
  fmt::format_to(std::back_inserter(frame_), "{:x}\r\ndata: ", size);
  frame_.append(payload).append("\n\n\r\n");
  auto [ec, n] = co_await net::async_write(stream_.socket(), net::buffer(frame_), kAwait);
  co_return !ec;
}

net::awaitable<bool> EventStream::close() {
  auto [ec, n] = co_await net::async_write(stream_, http::make_chunk_last(), kAwait);
  co_return !ec;
}

}  // namespace photon::server
