// libFuzzer target: the .npy reader (precomputed kernels and the kernel cache).
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = neuromkl::fuzz::WriteInput(data, size, ".npy");
  try {
    (void)neuromkl::ReadNpy(path);
  } catch (const neuromkl::Error&) {
  }
  return 0;
}
