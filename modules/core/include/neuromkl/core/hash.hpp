#pragma once
// Content hashes for cache keys and input fingerprints: XXH3-128 (xxHash, Debian's libxxhash).
// A collision here would silently reuse wrong kernels, so the hash is 128 bits wide and from a
// well-tested library rather than home-made.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

struct XXH3_state_s;  // xxhash.h stays out of this header

namespace neuromkl {

struct Digest128 {
  std::uint64_t high = 0, low = 0;
  bool operator==(const Digest128&) const = default;
  std::string Hex() const;  ///< 32 hex digits
};

class Hasher {
 public:
  Hasher();
  Hasher& Update(const void* data, std::size_t bytes);
  Hasher& Update(std::string_view text);  ///< length-prefixed, so ("ab", "c") and ("a", "bc") differ
  Hasher& Update(double value);
  Hasher& Update(std::uint64_t value);
  Hasher& Update(const Digest128& digest);
  Digest128 Digest() const;
  std::string Hex() const;  ///< 32 hex digits

 private:
  std::unique_ptr<XXH3_state_s, void (*)(XXH3_state_s*)> state_;
};

/// Hash of a file's bytes; IoError if it cannot be read.
Digest128 HashFile(const std::string& path);

}  // namespace neuromkl
