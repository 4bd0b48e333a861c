#include "neuromkl/core/system.hpp"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <utility>

#include <sys/mman.h>
#include <unistd.h>

namespace neuromkl {

void AdviseHugePages(const void* data, std::size_t bytes) {
  if (bytes < (std::size_t{4} << 20)) return;
  constexpr std::uintptr_t kPage = 4096;
  // From the page holding the first entry (a hint, harmless on a neighbour's page): a block from
  // mmap then starts on a huge-page boundary and is covered from its first byte.
  const auto begin = reinterpret_cast<std::uintptr_t>(data) & ~(kPage - 1);
  const auto end = reinterpret_cast<std::uintptr_t>(data) + bytes;
  madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

std::uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(size) : (8ULL << 30);
}

namespace {
/// The first number in a file (e.g. a cgroup's memory limit); nullopt if unreadable or not a number ("max").
std::optional<std::uint64_t> ReadNumber(const char* path) {
  std::ifstream in(path);
  std::uint64_t value = 0;
  if (in >> value) return value;
  return std::nullopt;
}
}  // namespace

std::uint64_t AvailableMemoryBytes() {
  std::uint64_t available = 0;
  {
    std::ifstream meminfo("/proc/meminfo");
    std::string key, unit;
    std::uint64_t kib = 0;
    while (meminfo >> key >> kib >> unit)
      if (key == "MemAvailable:") {
        available = kib * 1024;
        break;
      }
  }
  if (available == 0) available = PhysicalMemoryBytes() / 2;
  // A job's memory limit (cgroup v2 or v1, e.g. a cluster scheduler's --mem) is what the run may use,
  // whatever the node has free.
  const std::pair<const char*, const char*> cgroups[] = {{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
                                                         {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
  for (const auto& [limitPath, usagePath] : cgroups) {
    const auto limit = ReadNumber(limitPath), usage = ReadNumber(usagePath);
    if (limit && usage && *limit < (1ULL << 60)) available = std::min(available, *limit > *usage ? *limit - *usage : 0);
  }
  return available;
}

}  // namespace neuromkl
