#pragma once
// Small file helpers shared by the modules that write results.
#include <optional>
#include <string>

namespace neuromkl {

/// Writes `text` to a temporary sibling and renames it over `path`, so readers (and a rerun after a
/// crash) see the old file or the new one, never half of one. IoError "<codePrefix>:Write" or
/// "<codePrefix>:Rename" naming the file.
void WriteFileAtomically(const std::string& path, const std::string& text, const std::string& codePrefix);

/// Writes `text` to `path` (inside a folder that is committed as a whole later, so no temporary
/// file is needed). IoError "output:Write" naming the file when the write fails (disk full).
void WriteTextFile(const std::string& path, const std::string& text);

/// Why `path` is not a regular file: "it does not exist", "it is a directory", "it is a symbolic link loop", "it is a
/// broken symbolic link (to T)", "it is not a regular file (a device, socket or pipe)"; empty when it is one. For
/// messages that must say what was found, not just "missing".
std::string WhyNotAFile(const std::string& path);

/// The bytes of a file, or nullopt when it cannot be opened (optional files: stamps, checkpoints).
std::optional<std::string> TryReadText(const std::string& path);

}  // namespace neuromkl
