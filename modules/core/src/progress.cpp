#include "neuromkl/core/progress.hpp"

#include <unistd.h>

#include <cstdio>

#include <spdlog/spdlog.h>

namespace neuromkl {

namespace {
std::atomic<bool> gProgressEnabled{true};
}

void SetProgressEnabled(bool enabled) { gProgressEnabled = enabled; }

Progress::Progress(std::string label, std::size_t total)
    : label_(std::move(label)),
      total_(total),
      terminal_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      lastDraw_(start_) {}

Progress::~Progress() { Finish(); }

void Progress::Advance(std::size_t steps) {
  const std::size_t done = done_.fetch_add(steps) + steps;
  if (!gProgressEnabled) return;
  const auto now = std::chrono::steady_clock::now();
  const auto interval = terminal_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(5000);
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock() || now - lastDraw_ < interval) return;
  lastDraw_ = now;
  Draw(done, false);
}

void Progress::Draw(std::size_t done, bool final) {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (terminal_) {
    const int width = 30;
    const int filled = total_ ? static_cast<int>(width * done / total_) : width;
    std::fprintf(stderr, "\r%-18s [%.*s%*s] %zu/%zu %.1fs%s", label_.c_str(), filled,
                 "##############################", width - filled, "", done, total_, seconds, final ? "\n" : "");
    std::fflush(stderr);
  } else if (!final) {
    spdlog::info("{}: {}/{} ({:.1f} s)", label_, done, total_, seconds);
  }
}

void Progress::Finish() {
  if (finished_) return;
  finished_ = true;
  if (gProgressEnabled && terminal_) Draw(done_.load(), true);
}

}  // namespace neuromkl
