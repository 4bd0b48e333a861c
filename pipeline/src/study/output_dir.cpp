#include "neuromkl/pipeline/output_dir.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <filesystem>
#include <fstream>

#include <spdlog/spdlog.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/pipeline/study_run.hpp"

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

/// The absolute, symlink-resolved form of `p` (as far as it exists).
fs::path Canonical(const fs::path& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(fs::absolute(p, ec), ec);
  return ec ? fs::absolute(p).lexically_normal() : c;
}

/// Is `inner` equal to `outer` or inside it (both canonical)?
bool Within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (o->empty() && std::next(o) == outer.end()) break;  // trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

/// A results.json written by neuromkl (before output folders carried the marker).
bool HoldsNeuromklResults(const fs::path& dir) {
  std::ifstream in(dir / "results.json");
  if (!in) return false;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text.find("\"neuromkl_version\"") != std::string::npos;
}

void WriteMarker(const std::string& dir) {
  const std::string path = dir + "/" + kOutputMarker;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << "neuromkl output folder\nformat 1\nneuromkl " << NeuromklVersion() << "\n";
  out.flush();
  if (!out) throw IoError("output:Write", path, "cannot write the output marker file");
}
void RemoveCreatedParents(const std::vector<std::string>& createdParents) {
  std::error_code ec;
  for (const auto& p : createdParents) fs::remove(p, ec);  // refuses a folder that holds anything
}
}  // namespace

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

std::string TemporarySuffix() { return HostName() + "-" + std::to_string(getpid()); }

void RemoveDeadTemporaries(const std::string& dir, const std::string& what) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const auto tmp = name.find(".tmp-");
    if (tmp != std::string::npos && LeftByDeadProcess(name, name.substr(0, tmp + 5))) {
      spdlog::info("removing the unfinished {} {} of an interrupted run", what, e.path().string());
      fs::remove_all(e.path(), ec);
    }
  }
}

std::string CacheStagingFolder(const std::string& entry) { return entry + ".tmp-" + TemporarySuffix(); }

void LandStagedCacheEntry(const std::string& folder, const std::string& entry) {
  std::error_code ec;
  fs::remove_all(entry, ec);
  fs::rename(folder, entry, ec);
  if (ec) throw IoError("cache:Rename", entry, ec.message());
}

void LandCacheEntry(const std::string& entry, const std::function<void(const std::string& folder)>& write) {
  const std::string tmp = CacheStagingFolder(entry);
  try {
    write(tmp);
    LandStagedCacheEntry(tmp, entry);
  } catch (const Error&) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

fs::path NearestExistingFolder(const std::string& path) {
  std::error_code ec;
  fs::path existing = fs::absolute(fs::path(path), ec).lexically_normal();
  while (!existing.empty() && !fs::exists(existing, ec) && existing != existing.parent_path()) existing = existing.parent_path();
  return existing.empty() ? fs::path(".") : existing;
}

void CheckOutputWritable(const std::string& finalDir) {
  std::error_code ec;
  const fs::path existing = NearestExistingFolder(fs::absolute(fs::path(finalDir), ec).lexically_normal().parent_path().string());
  if (!fs::is_directory(existing, ec))
    throw InputError("output:NotWritable", finalDir, "the output folder cannot be created: " + existing.string() + " on its path is a file, not a folder");
  const fs::path probe = existing / (".neuromkl-probe-" + TemporarySuffix());
  if (!fs::create_directory(probe, ec) || ec)
    throw InputError("output:NotWritable", finalDir,
                     "the output folder cannot be created: no folder can be made in " + existing.string() + " (" +
                         (ec ? ec.message() : std::string("it exists already")) + "; a read-only or unwritable location): choose another --out or /output/dir");
  fs::remove(probe, ec);
}

OutputClaim::OutputClaim(const std::string& finalDir) : path_(finalDir + ".claim") {
  // The claim is a symbolic link whose target names its owner ("<host>-<pid>"): made atomically (it fails when one
  // exists), readable without opening it, and it needs no data block, so a full disk still lets a run claim and then
  // fail (and clean up) where it writes.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (symlink(TemporarySuffix().c_str(), path_.c_str()) == 0) return;
    if (errno != EEXIST) throw IoError("output:Mkdir", path_, std::string("cannot claim the output folder: ") + std::strerror(errno));
    std::error_code ec;
    const std::string owner = fs::read_symlink(path_, ec).string();
    // A claim of a process of this host that no longer runs (killed): taken over.
    if (!owner.empty() && LeftByDeadProcess(owner, "") && attempt == 0) {
      unlink(path_.c_str());
      continue;
    }
    const auto dash = owner.rfind('-');
    const std::string who = dash == std::string::npos ? "another process" : "process " + owner.substr(dash + 1) + " on " + owner.substr(0, dash);
    throw InputError("output:Busy", finalDir,
                     "another neuromkl run (" + who + ") is writing this output folder (it holds " + path_ +
                         "); wait for it to finish or choose another --out (if no run is writing there, remove " + path_ + ")");
  }
  throw InputError("output:Busy", finalDir, "the output folder's claim " + path_ + " keeps changing: another run is starting there");
}

OutputClaim::~OutputClaim() { unlink(path_.c_str()); }

void CheckReplaceable(const std::string& path, const std::vector<std::string>& inputs) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(path, ec);
  const auto refuse = [&](const std::string& why) { throw InputError("output:Refused", path, "--force refused: " + why); };
  if (fs::is_symlink(st)) refuse("it is a symbolic link, not an output folder written by neuromkl");
  if (!fs::is_directory(st))
    refuse(fs::is_regular_file(st) ? "it is a regular file, not an output folder (neuromkl replaces only folders it wrote)"
                                   : "it is not a folder (neuromkl replaces only folders it wrote)");
  const fs::path target = Canonical(path);
  const fs::path cwd = Canonical(fs::current_path(ec));
  if (!ec && Within(cwd, target))
    refuse(cwd == target ? "it is the current working directory" : "it contains the current working directory (" + cwd.string() + ")");
  for (const auto& input : inputs) {
    if (input.empty()) continue;
    if (Within(Canonical(input), target)) refuse("it contains an input of the study (" + input + ")");
  }
  if (!fs::exists(fs::path(path) / kOutputMarker, ec) && !HoldsNeuromklResults(path)) {
    std::string why = "it was not written by neuromkl (no ";
    why += kOutputMarker;
    why += " marker file and no neuromkl results.json); remove it yourself or choose another --out";
    refuse(why);
  }
}

AtomicOutputDir::AtomicOutputDir(std::string finalDir, bool force, const std::vector<std::string>& inputs)
    : final_(fs::path(finalDir).lexically_normal().string()), force_(force) {
  while (!final_.empty() && final_.size() > 1 && final_.back() == '/') final_.pop_back();
  std::error_code ec;
  if (fs::exists(fs::symlink_status(final_, ec)) && !force_)
    throw InputError("output:Exists", final_, "the output folder already exists; rerun with --force to replace it (the old results are kept until the new run succeeds)");
  if (fs::exists(fs::symlink_status(final_, ec))) CheckReplaceable(final_, inputs);
  CheckOutputWritable(final_);
  const fs::path parent = fs::path(final_).parent_path();
  if (!parent.empty()) {
    for (fs::path p = parent; !p.empty() && !fs::exists(fs::symlink_status(p, ec)); p = p.parent_path()) {
      createdParents_.push_back(p.string());
      if (p == p.parent_path()) break;
    }
    fs::create_directories(parent, ec);
    if (ec) {
      RemoveCreatedParents(createdParents_);
      throw IoError("output:Mkdir", parent.string(), "cannot create the output's parent folder: " + ec.message());
    }
  }
  // A constructor that throws runs no destructor: what was made so far is removed here.
  try {
    claim_ = std::make_unique<OutputClaim>(final_);
    Prepare(inputs);
  } catch (...) {
    if (!temp_.empty()) fs::remove_all(temp_, ec);
    claim_.reset();
    RemoveCreatedParents(createdParents_);
    throw;
  }
}

void AtomicOutputDir::Prepare(const std::vector<std::string>& inputs) {
  std::error_code ec;
  const fs::path parent = fs::path(final_).parent_path();
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
  if (fs::exists(fs::symlink_status(final_, ec))) CheckReplaceable(final_, inputs);  // may have been put back above
  const std::string temp = final_ + ".tmp-" + TemporarySuffix();
  fs::remove_all(temp, ec);
  fs::create_directories(temp, ec);
  if (ec) throw IoError("output:Mkdir", temp, "cannot create the temporary output folder: " + ec.message());
  temp_ = temp;
  WriteMarker(temp_);
}

AtomicOutputDir::~AtomicOutputDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(temp_, ec);
  claim_.reset();
  // A failed run leaves no trace: the parent folders it created are removed again, if still empty
  // (fs::remove refuses a folder that holds anything, e.g. another run's results).
  RemoveCreatedParents(createdParents_);
}

void AtomicOutputDir::Commit() {
  std::error_code ec;
  const std::string old = final_ + ".old-" + TemporarySuffix();
  const bool replacing = fs::exists(fs::symlink_status(final_, ec));
  // Without --force nothing is replaced, even what appeared while this run worked (another program's folder).
  if (replacing && !force_)
    throw InputError("output:Exists", final_, "the output folder appeared while this run worked; its results are not replaced without --force");
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
  claim_.reset();
  if (replacing) fs::remove_all(old, ec);
  spdlog::debug("results committed to {}", final_);
}

}  // namespace neuromkl::pipeline
