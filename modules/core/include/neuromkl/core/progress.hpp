#pragma once
// Progress for long stages: a bar redrawn in place when stderr is a terminal, otherwise one
// log line at most every few seconds (CI logs, cluster jobs). Thread-safe Advance().
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>

namespace neuromkl {

class Progress {
 public:
  Progress(std::string label, std::size_t total);
  ~Progress();
  void Advance(std::size_t steps = 1);
  void Finish();

 private:
  void Draw(std::size_t done, bool final);
  std::string label_;
  std::size_t total_;
  std::atomic<std::size_t> done_{0};
  bool terminal_;
  bool finished_ = false;
  std::mutex mutex_;
  std::chrono::steady_clock::time_point start_, lastDraw_;
};

/// Global switch: --quiet disables progress output.
void SetProgressEnabled(bool enabled);

}  // namespace neuromkl
