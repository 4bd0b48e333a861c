#include "neuromkl/core/hash.hpp"

#include <fmt/format.h>
#include <xxhash.h>

#include <fstream>
#include <new>
#include <vector>

#include "neuromkl/core/errors.hpp"

namespace neuromkl {

namespace {
void FreeState(XXH3_state_s* s) { XXH3_freeState(s); }
}  // namespace

std::string Digest128::Hex() const { return fmt::format("{:016x}{:016x}", high, low); }

Hasher::Hasher() : state_(XXH3_createState(), &FreeState) {
  if (!state_ || XXH3_128bits_reset(state_.get()) == XXH_ERROR) throw std::bad_alloc();
}

Hasher& Hasher::Update(const void* data, std::size_t bytes) {
  XXH3_128bits_update(state_.get(), data, bytes);  // cannot fail on a valid state and a non-null pointer
  return *this;
}

Hasher& Hasher::Update(std::string_view text) {
  Update(static_cast<std::uint64_t>(text.size()));
  return Update(text.data(), text.size());
}
Hasher& Hasher::Update(double value) { return Update(&value, sizeof value); }
Hasher& Hasher::Update(std::uint64_t value) { return Update(&value, sizeof value); }
Hasher& Hasher::Update(const Digest128& digest) { return Update(digest.high).Update(digest.low); }

Digest128 Hasher::Digest() const {
  const XXH128_hash_t h = XXH3_128bits_digest(state_.get());
  return {h.high64, h.low64};
}

std::string Hasher::Hex() const { return Digest().Hex(); }

Digest128 HashFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("io:Unreadable", path, "cannot open the file for reading");
  Hasher h;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h.Update(buf.data(), static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) throw IoError("io:Unreadable", path, "read error while hashing the file");
  return h.Digest();
}

}  // namespace neuromkl
