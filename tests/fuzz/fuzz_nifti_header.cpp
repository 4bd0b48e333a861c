// libFuzzer target: our NIfTI-1 / NIfTI-2 / Analyze header reader and voxel decoder. The first
// byte chooses a single .nii file or a .hdr/.img pair (the same bytes as both halves).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "fuzz_input.hpp"
#include "image_header.hpp"
#include "neuromkl/core/errors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool pair = data[0] & 1;
  std::string path = neuromkl::fuzz::WriteInput(data + 1, size - 1, pair ? ".hdr" : ".nii");
  if (pair) std::filesystem::copy_file(path, path.substr(0, path.size() - 4) + ".img", std::filesystem::copy_options::overwrite_existing);
  try {
    const auto h = neuromkl::io::detail::ReadImageHeader(path);
    (void)neuromkl::io::detail::GeometryFromHeader(h);
    std::vector<float> voxels;
    neuromkl::io::detail::DecodeVolumes(h, 0, 1, voxels);
  } catch (const neuromkl::Error&) {
  }
  return 0;
}
