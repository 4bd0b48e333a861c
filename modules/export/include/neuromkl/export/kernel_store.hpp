#pragma once
// On-disk kernel store: one float64 .npy per kernel plus index.json (names, labels, voxel counts,
// excluded regions, subject order, cache key). Python: json.load(index) + numpy.load(file).
#include <string>
#include <vector>

#include "neuromkl/kernels/kernel_set.hpp"

namespace neuromkl::exporting {

/// Writes the store into `dir` (created). IoError on failure.
/// `moved`: the set's float64 kernels when they were moved out of it (a study's kernels), else null: the set's own.
void SaveKernelStore(const std::string& dir, const kernels::KernelSet& set, const std::string& key, const std::string& description,
                     const std::vector<Eigen::MatrixXd>* moved = nullptr);
/// The name of kernel r's file in a store.
std::string KernelStoreFile(std::size_t r, const std::string& name);
/// The store's index (and a compact set's raw diagonals) for kernel files already in `dir` under KernelStoreFile's
/// names, with their xxh3 checksums `hashes` (hex): the store of a set whose kernels were written where they are held
/// (kernels::KernelSet::distributed, by the MPI ranks). IoError on failure.
void SaveKernelStoreIndex(const std::string& dir, const kernels::KernelSet& set, const std::string& key, const std::string& description,
                          const std::vector<std::string>& hashes);
/// Reads a store. InputError naming the file when something is missing or inconsistent.
kernels::KernelSet LoadKernelStore(const std::string& dir, std::string* key = nullptr);

/// A store's index without its kernels: the set's metadata (names, exclusions, subjects, intensity scales, a compact
/// store's raw diagonals and centring; `set.kernels` and `set.compact.kernels` empty), each kernel's file (a path in
/// the store) and checksum, and whether the files hold float32 values. For readers that load each kernel where it
/// is held (the MPI ranks of a study whose kernels do not fit one). Same errors as LoadKernelStore for the index.
struct KernelStoreIndex {
  kernels::KernelSet set;
  std::vector<std::string> files, hashes;
  bool float32 = false;
};
KernelStoreIndex ReadKernelStoreIndex(const std::string& dir, std::string* key = nullptr);
/// One kernel file of a store, checked against its checksum (InputError store:Checksum): float64, or float32 and
/// n x n (store:Corrupt otherwise).
Eigen::MatrixXd ReadStoreKernel(const std::string& file, const std::string& hash);
Eigen::MatrixXf ReadStoreKernelFloat32(const std::string& file, const std::string& hash, Eigen::Index n);

}  // namespace neuromkl::exporting
