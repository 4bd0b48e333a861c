#pragma once
// What the machine offers: its memory, and a hint for large fresh buffers.
#include <cstddef>
#include <cstdint>

namespace neuromkl {

/// Asks the kernel for transparent huge pages on a fresh buffer of `bytes` (from 4 MB; a hint, results are
/// unaffected). On a virtualised machine the first touch of large fresh kernels costs about as much CPU as
/// computing them; with huge pages there are 512 times fewer faults.
void AdviseHugePages(const void* data, std::size_t bytes);

/// Total physical memory in bytes (8 GiB when the system does not say).
std::uint64_t PhysicalMemoryBytes();

/// Memory the system reports available now (Linux: MemAvailable, or half the physical memory if unknown),
/// capped by the process's cgroup limit minus its usage (e.g. a cluster job's memory request).
std::uint64_t AvailableMemoryBytes();

}  // namespace neuromkl
