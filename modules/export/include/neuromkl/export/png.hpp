#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace neuromkl::exporting {

/// An 8-bit RGB PNG (zlib-compressed, no filter) as bytes.
std::string EncodePng(int width, int height, const std::vector<std::uint8_t>& rgb);
std::string Base64(const std::string& bytes);

}  // namespace neuromkl::exporting
