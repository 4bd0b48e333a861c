#pragma once
#include <cstddef>

namespace neuromkl::kernels {

/// Asks the kernel for transparent huge pages on a fresh buffer of `bytes` (from 4 MB; a hint, results are
/// unaffected). On a virtualised machine the first touch of large fresh kernels costs about as much CPU as
/// computing them; with huge pages there are 512 times fewer faults.
void AdviseHugePages(const void* data, std::size_t bytes);

}  // namespace neuromkl::kernels
