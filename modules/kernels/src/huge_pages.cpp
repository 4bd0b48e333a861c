#include "neuromkl/kernels/huge_pages.hpp"

#include <cstdint>

#include <sys/mman.h>

namespace neuromkl::kernels {

void AdviseHugePages(const void* data, std::size_t bytes) {
  if (bytes < (std::size_t{4} << 20)) return;
  constexpr std::uintptr_t kPage = 4096;
  // From the page holding the first entry (a hint, harmless on a neighbour's page): a block from
  // mmap then starts on a huge-page boundary and is covered from its first byte.
  const auto begin = reinterpret_cast<std::uintptr_t>(data) & ~(kPage - 1);
  const auto end = reinterpret_cast<std::uintptr_t>(data) + bytes;
  madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

}  // namespace neuromkl::kernels
