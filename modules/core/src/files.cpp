#include "neuromkl/core/files.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "neuromkl/core/errors.hpp"

namespace neuromkl {

void WriteFileAtomically(const std::string& path, const std::string& text, const std::string& codePrefix) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (const fs::path parent = fs::path(path).parent_path(); !parent.empty()) fs::create_directories(parent, ec);
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    // close() flushes: a small text sits in the stream's buffer until then, so a full disk shows only here (the
    // destructor would swallow it and the rename below would land an empty file under the final name).
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      throw IoError(codePrefix + ":Write", path, "cannot write the file (disk full?)");
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw IoError(codePrefix + ":Rename", path, ec.message());
  }
}

void WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();  // flushes: a full disk shows here, not silently in the destructor
  if (!out) throw IoError("output:Write", path, "cannot write the file (disk full?)");
}

std::string WhyNotAFile(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!ec && fs::is_regular_file(st)) return "";
  if (!ec && fs::is_directory(st)) return "it is a directory";
  if (ec == std::errc::too_many_symbolic_link_levels) return "it is a symbolic link loop";
  std::error_code lec;
  if (fs::is_symlink(fs::symlink_status(path, lec))) {
    const fs::path target = fs::read_symlink(path, lec);
    return "it is a broken symbolic link (to " + target.string() + ")";
  }
  if (ec == std::errc::permission_denied) return "it cannot be reached (no permission on a folder of its path)";
  if (ec || !fs::exists(st)) return "it does not exist";
  return "it is not a regular file (a device, socket or pipe)";
}

std::optional<std::string> TryReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace neuromkl
