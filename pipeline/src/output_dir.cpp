#include "neuromkl/pipeline/output_dir.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include <filesystem>

#include <spdlog/spdlog.h>

#include "neuromkl/core/errors.hpp"

namespace neuromkl::pipeline {

namespace fs = std::filesystem;

namespace {
std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "host";
  std::string h(buf);
  for (char& c : h)
    if (c == '/' || c == '-') c = '_';
  return h;
}

/// "<final>.<tag>-<host>-<pid>" names a folder of a process on this host that no longer runs.
bool LeftByDeadProcess(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0) return false;
  const std::string rest = name.substr(prefix.size());  // "<host>-<pid>"
  const auto dash = rest.rfind('-');
  if (dash == std::string::npos || rest.substr(0, dash) != HostName()) return false;
  char* end = nullptr;
  const long pid = std::strtol(rest.c_str() + dash + 1, &end, 10);
  if (*end != '\0' || pid <= 0) return false;
  return kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}
}  // namespace

AtomicOutputDir::AtomicOutputDir(std::string finalDir, bool force) : final_(fs::path(finalDir).lexically_normal().string()), force_(force) {
  while (!final_.empty() && final_.size() > 1 && final_.back() == '/') final_.pop_back();
  std::error_code ec;
  if (fs::exists(final_, ec) && !force_)
    throw InputError("output:Exists", final_, "the output folder already exists; rerun with --force to replace it (the old results are kept until the new run succeeds)");
  const fs::path parent = fs::path(final_).parent_path();
  if (!parent.empty()) {
    fs::create_directories(parent, ec);
    if (ec) throw IoError("output:Mkdir", parent.string(), "cannot create the output's parent folder: " + ec.message());
  }
  // Leftovers of a run that was killed (kill -9, power loss) on this host: an unfinished temporary
  // folder is removed; previous results moved aside by an interrupted commit are put back.
  const std::string base = fs::path(final_).filename().string();
  for (const auto& e : fs::directory_iterator(parent.empty() ? fs::path(".") : parent, ec)) {
    const std::string name = e.path().filename().string();
    if (LeftByDeadProcess(name, base + ".tmp-")) {
      spdlog::info("removing the unfinished output {} of an interrupted run", e.path().string());
      fs::remove_all(e.path(), ec);
    } else if (LeftByDeadProcess(name, base + ".old-")) {
      if (!fs::exists(final_)) fs::rename(e.path(), final_, ec);
      else fs::remove_all(e.path(), ec);
    }
  }
  if (fs::exists(final_, ec) && !force_)
    throw InputError("output:Exists", final_, "the output folder already exists; rerun with --force to replace it (the old results are kept until the new run succeeds)");
  temp_ = final_ + ".tmp-" + HostName() + "-" + std::to_string(getpid());
  fs::remove_all(temp_, ec);
  fs::create_directories(temp_, ec);
  if (ec) throw IoError("output:Mkdir", temp_, "cannot create the temporary output folder: " + ec.message());
}

AtomicOutputDir::~AtomicOutputDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(temp_, ec);
}

void AtomicOutputDir::Commit() {
  std::error_code ec;
  const std::string old = final_ + ".old-" + HostName() + "-" + std::to_string(getpid());
  const bool replacing = fs::exists(final_, ec);
  if (replacing) {
    fs::rename(final_, old, ec);
    if (ec) throw IoError("output:Rename", final_, "cannot move the previous results aside: " + ec.message());
  }
  fs::rename(temp_, final_, ec);
  if (ec) {
    if (replacing) fs::rename(old, final_, ec);  // put the previous results back
    throw IoError("output:Rename", temp_, "cannot move the finished results into place: " + ec.message());
  }
  committed_ = true;
  if (replacing) fs::remove_all(old, ec);
  spdlog::debug("results committed to {}", final_);
}

}  // namespace neuromkl::pipeline
