#include "core/process_group.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

namespace photon {
namespace {

using Clock = std::chrono::steady_clock;

Status unavailable(std::string message) { return Status(StatusCode::kIoError, std::move(message)); }

// Resolves host:port into the addresses getaddrinfo offers (TCP).
Result<addrinfo*> resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list);
  if (rc != 0) return unavailable(fmt::format("cannot resolve '{}': {}", host, gai_strerror(rc)));
  return list;
}

void tune(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // steps are small, latency-bound messages
}

Status send_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return unavailable(fmt::format("send failed: {}", std::strerror(errno)));
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::ok();
}

Status receive_all(int fd, void* data, size_t n) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return unavailable("the connection was closed");
    if (r < 0) return unavailable(fmt::format("receive failed: {}", std::strerror(errno)));
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::ok();
}

// A rank introduces itself with this magic, its rank and the group size, so that a stray connection or a process of
// another group is refused instead of joining.
constexpr uint32_t kHello = 0x50485447;  // "PHTG"

}  // namespace

Status parse_host_port(const std::string& address, std::string* host, uint16_t* port) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("address '{}' must be host:port, e.g. 10.0.0.1:29500", address));
  }
  std::string h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  const std::string p = address.substr(colon + 1);
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(p.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || value < 1 || value > 65535) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("address '{}': the port must be a number from 1 to 65535", address));
  }
  *host = h;
  *port = static_cast<uint16_t>(value);
  return Status::ok();
}

Result<std::unique_ptr<ProcessGroup>> ProcessGroup::join(const std::string& address, int rank, int size,
                                                         std::chrono::milliseconds timeout) {
  if (size < 2 || rank < 0 || rank >= size) {
    return Status(
        StatusCode::kInvalidArgument,
        fmt::format("rank {} of a group of {} processes: the rank must be from 0 to {}", rank, size, size - 1));
  }
  std::string host;
  uint16_t port = 0;
  PHOTON_RETURN_IF_ERROR(parse_host_port(address, &host, &port));
  std::unique_ptr<ProcessGroup> g(new ProcessGroup(rank, size));
  const auto deadline = Clock::now() + timeout;
  const auto remaining_ms = [&] {
    return static_cast<int>(
        std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
  };

  if (rank == 0) {
    PHOTON_ASSIGN_OR_RETURN(addrinfo * list, resolve(host, port, true));
    int listener = -1;
    std::string last_error = "no address";
    for (addrinfo* a = list; a != nullptr && listener < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      const int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, size) == 0) {
        listener = fd;
      } else {
        last_error = std::strerror(errno);
        ::close(fd);
      }
    }
    freeaddrinfo(list);
    if (listener < 0) {
      return unavailable(
          fmt::format("rank 0 cannot listen on {}: {} (is the port in use? pick another)", address, last_error));
    }
    g->sockets_.assign(static_cast<size_t>(size), -1);
    int joined = 1;
    Status failure;
    while (joined < size) {
      pollfd pfd{listener, POLLIN, 0};
      const int ready = ::poll(&pfd, 1, remaining_ms());
      if (ready <= 0) {
        failure =
            unavailable(fmt::format("rank 0 waited {} ms on {} and {} of {} ranks joined; start every rank "
                                    "with the same address and --tensor-parallel-size",
                                    timeout.count(), address, joined - 1, size - 1));
        break;
      }
      const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      tune(fd);
      uint32_t hello[3] = {};
      if (!receive_all(fd, hello, sizeof(hello)).is_ok() || hello[0] != kHello ||
          hello[2] != static_cast<uint32_t>(size) || hello[1] == 0 || hello[1] >= static_cast<uint32_t>(size) ||
          g->sockets_[hello[1]] >= 0) {
        ::close(fd);  // not one of ours, another group's size, or a rank that already joined
        continue;
      }
      g->sockets_[hello[1]] = fd;
      ++joined;
    }
    ::close(listener);
    if (!failure.is_ok()) return failure;
    // Every rank is in: release them together.
    for (int r = 1; r < size; ++r) {
      const uint8_t go = 1;
      PHOTON_RETURN_IF_ERROR(g->send_to(r, {&go, 1}));
    }
    return g;
  }

  // Other ranks: connect (rank 0 may not be listening yet), introduce, wait for the go.
  std::string last_error;
  int fd = -1;
  while (fd < 0) {
    PHOTON_ASSIGN_OR_RETURN(addrinfo * list, resolve(host, port, false));
    for (addrinfo* a = list; a != nullptr && fd < 0; a = a->ai_next) {
      const int s = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (s < 0) continue;
      if (::connect(s, a->ai_addr, a->ai_addrlen) == 0) {
        fd = s;
      } else {
        last_error = std::strerror(errno);
        ::close(s);
      }
    }
    freeaddrinfo(list);
    if (fd >= 0) break;
    if (Clock::now() >= deadline) {
      return unavailable(
          fmt::format("rank {} could not reach rank 0 at {} within {} ms ({}); start rank 0 with "
                      "the same address",
                      rank, address, timeout.count(), last_error));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  tune(fd);
  g->sockets_.assign(1, fd);
  const uint32_t hello[3] = {kHello, static_cast<uint32_t>(rank), static_cast<uint32_t>(size)};
  PHOTON_RETURN_IF_ERROR(send_all(fd, hello, sizeof(hello)));
  std::vector<uint8_t> go;
  pollfd pfd{fd, POLLIN, 0};
  if (::poll(&pfd, 1, remaining_ms()) <= 0) {
    return unavailable(fmt::format("rank {} joined rank 0 at {} but the group was not complete within {} ms", rank,
                                   address, timeout.count()));
  }
  PHOTON_RETURN_IF_ERROR(g->receive_from(0, go).with_context(
      fmt::format("rank {}: rank 0 at {} refused this rank (a duplicate rank or another group size?)", rank, address)));
  return g;
}

ProcessGroup::~ProcessGroup() {
  for (int fd : sockets_) {
    if (fd >= 0) ::close(fd);
  }
}

Status ProcessGroup::send_to(int peer, std::span<const uint8_t> bytes) {
  const int fd = sockets_[rank_ == 0 ? static_cast<size_t>(peer) : 0];
  const uint64_t n = bytes.size();
  Status s = send_all(fd, &n, sizeof(n));
  if (s.is_ok() && n > 0) s = send_all(fd, bytes.data(), bytes.size());
  if (!s.is_ok()) return s.with_context(fmt::format("rank {} -> rank {}", rank_, peer));
  return s;
}

Status ProcessGroup::receive_from(int peer, std::vector<uint8_t>& bytes) {
  const int fd = sockets_[rank_ == 0 ? static_cast<size_t>(peer) : 0];
  uint64_t n = 0;
  Status s = receive_all(fd, &n, sizeof(n));
  if (s.is_ok()) {
    bytes.resize(n);
    if (n > 0) s = receive_all(fd, bytes.data(), n);
  }
  if (!s.is_ok()) return s.with_context(fmt::format("rank {} <- rank {}", rank_, peer));
  return s;
}

Status ProcessGroup::broadcast(std::vector<uint8_t>& bytes) {
  if (rank_ != 0) return receive_from(0, bytes);
  for (int r = 1; r < size_; ++r) PHOTON_RETURN_IF_ERROR(send_to(r, bytes));
  return Status::ok();
}

Status ProcessGroup::gather(std::span<const uint8_t> mine, std::vector<std::vector<uint8_t>>* all) {
  if (rank_ != 0) return send_to(0, mine);
  all->resize(static_cast<size_t>(size_));
  (*all)[0].assign(mine.begin(), mine.end());
  for (int r = 1; r < size_; ++r) PHOTON_RETURN_IF_ERROR(receive_from(r, (*all)[static_cast<size_t>(r)]));
  return Status::ok();
}

}  // namespace photon
