// The processes of a multi-process tensor-parallel group, connected in a star around rank 0 over TCP: the control
// plane that carries each step's batch from the scheduler (rank 0) to the other ranks, and the bootstrap that hands
// them NCCL's unique id. The data plane (all-reduce, all-gather) runs through a Communicator.
//
// Rank 0 listens on the address every rank is given (host:port, as torchrun's MASTER_ADDR / MASTER_PORT or
// SGLang's --dist-init-addr); each other rank connects, retrying until the timeout, and introduces itself. Messages
// are length-prefixed byte strings.
//
// Thread safety: one thread at a time per group. Errors: kInvalidArgument for a malformed address or rank,
// kIoError when a peer cannot be reached in time or closes its connection (its message names the rank).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <photon/status.hpp>

namespace photon {

class ProcessGroup {
 public:
  /// Joins the group of `size` processes as `rank` (0 <= rank < size, size >= 2) at `address` ("host:port"; rank 0
  /// binds it, the others connect to it). Returns once every rank is connected (rank 0) or this one is (others).
  static Result<std::unique_ptr<ProcessGroup>> join(const std::string& address, int rank, int size,
                                                    std::chrono::milliseconds timeout = std::chrono::seconds(300));
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  /// Rank 0 sends `bytes` to every other rank; the others receive into `bytes` (resized). Blocks until done.
  Status broadcast(std::vector<uint8_t>& bytes);
  /// Rank 0 receives every rank's bytes into `all` (index = rank, its own included); the others send `mine`.
  Status gather(std::span<const uint8_t> mine, std::vector<std::vector<uint8_t>>* all);

 private:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  Status send_to(int peer, std::span<const uint8_t> bytes);
  Status receive_from(int peer, std::vector<uint8_t>& bytes);

  int rank_;
  int size_;
  std::vector<int> sockets_;  // rank 0: socket of rank r at index r (index 0 unused); others: [0] is rank 0's
};

/// Splits "host:port" (host may be a name, an IPv4 address or a bracketed IPv6 address); errors say what is wrong.
Status parse_host_port(const std::string& address, std::string* host, uint16_t* port);

}  // namespace photon
