#pragma once
// On-disk kernel store: one float64 .npy per kernel plus index.json (names, labels, voxel counts,
// excluded regions, subject order, cache key). Python: json.load(index) + numpy.load(file).
#include <string>

#include "neuromkl/kernels/kernel_set.hpp"

namespace neuromkl::exporting {

/// Writes the store into `dir` (created). IoError on failure.
void SaveKernelStore(const std::string& dir, const kernels::KernelSet& set, const std::string& key, const std::string& description);
/// Reads a store. InputError naming the file when something is missing or inconsistent.
kernels::KernelSet LoadKernelStore(const std::string& dir, std::string* key = nullptr);

}  // namespace neuromkl::exporting
