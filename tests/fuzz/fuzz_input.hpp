#pragma once
// Shared by the fuzz targets: the parsers read files, so each input is written to a per-process
// temporary file first. A neuromkl::Error is the expected answer to a bad input; any other
// exception escapes and libFuzzer reports it (an "unexpected failure" in the CLI is a finding).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

namespace neuromkl::fuzz {

inline std::string WriteInput(const std::uint8_t* data, std::size_t size, const std::string& suffix) {
  const std::string path = "/tmp/neuromkl_fuzz_" + std::to_string(getpid()) + suffix;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

}  // namespace neuromkl::fuzz
