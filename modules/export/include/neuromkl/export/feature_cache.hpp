#pragma once
// On-disk feature store, the kernel cache's entry for a study on features: the feature matrix as it is held (the masked
// voxels of the kept regions, one row per subject; float32, or uint8 / int16 codes with one scale per row) in
// features.npy, and index.json (subjects, storage, region offsets, the regions' metadata and exclusions, the xxh3 of the
// matrix's values and of every other file). Python: json.load(index) + numpy.load("features.npy", mmap_mode="r").
#include <cstdint>
#include <memory>
#include <string>

#include "neuromkl/gram/features.hpp"
#include "neuromkl/kernels/kernel_set.hpp"

namespace neuromkl::exporting {

/// What a study's feature stage makes: the matrix and the header of its kernel set (set.featureForm; no kernel matrix).
struct FeatureEntry {
  std::shared_ptr<gram::FeatureMatrix> features;
  kernels::KernelSet set;
  std::int64_t droppedVoxels = 0;  ///< voxels nan_policy drop_voxel set to 0
};

/// Writes the entry into `dir` (created), the matrix from where it is held (no copy). IoError on failure.
void SaveFeatureStore(const std::string& dir, const FeatureEntry& entry, const std::string& key, const std::string& description);
/// Reads an entry into a matrix of its own, every file checked against its checksum: InputError naming the file when
/// something is missing, inconsistent or damaged (store:Checksum). `key`: the key it was written under.
FeatureEntry LoadFeatureStore(const std::string& dir, std::string* key = nullptr);

}  // namespace neuromkl::exporting
