#pragma once
// Small file helpers shared by the modules that write results.
#include <string>

namespace neuromkl {

/// Writes `text` to a temporary sibling and renames it over `path`, so readers (and a rerun after a
/// crash) see the old file or the new one, never half of one. IoError "<codePrefix>:Write" or
/// "<codePrefix>:Rename" naming the file.
void WriteFileAtomically(const std::string& path, const std::string& text, const std::string& codePrefix);

}  // namespace neuromkl
