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
    if (!out) throw IoError(codePrefix + ":Write", tmp, "cannot write the file (disk full?)");
  }
  fs::rename(tmp, path, ec);
  if (ec) throw IoError(codePrefix + ":Rename", path, ec.message());
}

void WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw IoError("output:Write", path, "cannot write the file (disk full?)");
}

std::optional<std::string> TryReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace neuromkl
