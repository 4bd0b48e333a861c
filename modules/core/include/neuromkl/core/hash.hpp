#pragma once
// A fast non-cryptographic 64-bit content hash, for cache keys and input fingerprints.
#include <cstdint>
#include <string>
#include <string_view>

namespace neuromkl {

class Hasher {
 public:
  Hasher& Update(const void* data, std::size_t bytes);
  Hasher& Update(std::string_view text);
  Hasher& Update(double value);
  Hasher& Update(std::uint64_t value);
  std::uint64_t Digest() const;
  std::string Hex() const;  ///< 16 hex digits

 private:
  std::uint64_t state_ = 0x9E3779B97F4A7C15ULL;
  std::uint64_t length_ = 0;
};

/// Hash of a file's bytes; IoError if it cannot be read.
std::uint64_t HashFile(const std::string& path);
std::string HexDigest(std::uint64_t value);

}  // namespace neuromkl
