// A one-line progress bar on standard error, drawn only when standard error is a terminal.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace photon::cli {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label);
  /// Redraws (at most ~10 times a second) with `done` of `total` units; `unit` is "B" for bytes or a word.
  void update(uint64_t done, uint64_t total);
  /// Clears the line (if one was drawn).
  void finish();
  ~ProgressBar() { finish(); }

 private:
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace photon::cli
