// Hands each engine event to the connection that waits for it. One thread polls the engine (Engine::poll drains
// every request's events at once) and pushes each event into its request's channel; the connection's coroutine
// receives from the channel on its own executor. Submitting and registering happen under one lock, so no event of a
// new request can arrive before its channel is known.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <boost/asio/experimental/concurrent_channel.hpp>
#include <photon/engine.hpp>

namespace photon::server {

/// Events of the requests of one HTTP request (n copies), in order.
using EventChannel =
    boost::asio::experimental::concurrent_channel<void(boost::system::error_code, photon::RequestEvent)>;

class EventRouter {
 public:
  /// Events a channel buffers before its connection reads them; a client that falls this far behind is cut off.
  static constexpr size_t kChannelCapacity = 1 << 14;

  /// Starts the polling thread over `engine` (not owned; outlives the router). `on_finished` sees every request's
  /// last event, routed or not (a cancelled request's too), on the polling thread.
  EventRouter(Engine& engine, std::function<void(const RequestEvent&)> on_finished);
  /// Calls stop().
  ~EventRouter();
  EventRouter(const EventRouter&) = delete;
  EventRouter& operator=(const EventRouter&) = delete;

  /// Runs `submit` (which calls Engine::submit and returns its result) and, on success, routes the new request's
  /// events to `channel` until its last one; kCancelled once stop() began. Thread-safe.
  Result<uint64_t> submit(const std::function<Result<uint64_t>()>& submit, std::shared_ptr<EventChannel> channel);
  /// Stops routing `id` (its later events are dropped). Thread-safe.
  void forget(uint64_t id);
  /// Cancels every routed request (they finish at the next step, and their last events are still routed).
  void cancel_all();
  /// Stops the polling thread and closes every channel still registered (their receivers get an error); later
  /// events are not routed. Idempotent. Call it while the channels' executors still run.
  void stop();
  /// Requests whose last event has not been routed yet.
  size_t num_routed() const;

 private:
  void run();

  Engine& engine_;
  std::function<void(const RequestEvent&)> on_finished_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<EventChannel>> routes_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace photon::server
