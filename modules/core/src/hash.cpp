#include "neuromkl/core/hash.hpp"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "neuromkl/core/errors.hpp"

namespace neuromkl {

namespace {
constexpr std::uint64_t kMul = 0xFF51AFD7ED558CCDULL;
inline std::uint64_t Mix(std::uint64_t h, std::uint64_t word) {
  h ^= word * 0xC4CEB9FE1A85EC53ULL;
  h = (h << 31) | (h >> 33);
  return h * kMul + 0x2545F4914F6CDD1DULL;
}
}  // namespace

Hasher& Hasher::Update(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    state_ = Mix(state_, w);
  }
  if (i < bytes) {
    std::uint64_t w = 0;
    std::memcpy(&w, p + i, bytes - i);
    state_ = Mix(state_, w ^ (0xA5ULL << 56));
  }
  length_ += bytes;
  return *this;
}

Hasher& Hasher::Update(std::string_view text) {
  Update(static_cast<std::uint64_t>(text.size()));
  return Update(text.data(), text.size());
}
Hasher& Hasher::Update(double value) { return Update(&value, sizeof value); }
Hasher& Hasher::Update(std::uint64_t value) { return Update(&value, sizeof value); }

std::uint64_t Hasher::Digest() const {
  std::uint64_t h = state_ ^ length_;
  h ^= h >> 33;
  h *= kMul;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ULL;
  h ^= h >> 33;
  return h;
}

std::string HexDigest(std::uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

std::string Hasher::Hex() const { return HexDigest(Digest()); }

std::uint64_t HashFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("io:Unreadable", path, "cannot open the file for reading");
  Hasher h;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h.Update(buf.data(), static_cast<std::size_t>(in.gcount()));
  }
  return h.Digest();
}

}  // namespace neuromkl
