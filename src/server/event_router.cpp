#include "server/event_router.hpp"

#include <pthread.h>

namespace photon::server {

EventRouter::EventRouter(Engine& engine, std::function<void(const RequestEvent&)> on_finished)
    : engine_(engine), on_finished_(std::move(on_finished)), thread_([this] { run(); }) {}

EventRouter::~EventRouter() { stop(); }

void EventRouter::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mu_);
  for (auto& [id, channel] : routes_) channel->close();
  routes_.clear();
}

Result<uint64_t> EventRouter::submit(const std::function<Result<uint64_t>()>& submit,
                                     std::shared_ptr<EventChannel> channel) {
  std::lock_guard lock(mu_);
  if (stopping_) return Status(StatusCode::kCancelled, "the server is shutting down");
  Result<uint64_t> id = submit();
  if (id) routes_[*id] = std::move(channel);
  return id;
}

void EventRouter::forget(uint64_t id) {
  std::lock_guard lock(mu_);
  routes_.erase(id);
}

void EventRouter::cancel_all() {
  std::lock_guard lock(mu_);
  for (const auto& [id, channel] : routes_) (void)engine_.cancel(id);
}

size_t EventRouter::num_routed() const {
  std::lock_guard lock(mu_);
  return routes_.size();
}

void EventRouter::run() {
  pthread_setname_np(pthread_self(), "photon-events");
  while (!stopping_) {
    if (!engine_.wait_for_events(20)) continue;
    std::vector<RequestEvent> events = engine_.poll();
    std::lock_guard lock(mu_);
    for (RequestEvent& e : events) {
      if (e.finished && on_finished_) on_finished_(e);
      auto it = routes_.find(e.request_id);
      if (it == routes_.end()) continue;  // its connection went away
      const bool last = e.finished;
      if (!it->second->try_send(boost::system::error_code{}, std::move(e))) {
        // The client fell kChannelCapacity events behind: end its stream and the request.
        it->second->close();
        (void)engine_.cancel(it->first);
        routes_.erase(it);
        continue;
      }
      if (last) routes_.erase(it);
    }
  }
}

}  // namespace photon::server
