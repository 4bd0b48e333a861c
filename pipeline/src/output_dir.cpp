#include "neuromkl/pipeline/output_dir.hpp"

#include <unistd.h>

#include <filesystem>

#include <spdlog/spdlog.h>

#include "neuromkl/core/errors.hpp"

namespace neuromkl::pipeline {

namespace fs = std::filesystem;

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
  temp_ = final_ + ".tmp-" + std::to_string(getpid());
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
  const std::string old = final_ + ".old-" + std::to_string(getpid());
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
