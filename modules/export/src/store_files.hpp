#pragma once
// Shared by the kernel store and the feature store (private to this module): the regions' metadata in an index.json,
// reading an index, and a file checked against its checksum.
#include <string>

#include "json_format.hpp"
#include "neuromkl/kernels/kernel_set.hpp"

namespace neuromkl::exporting {

/// One kernel's (region's) metadata as an index.json entry.
Json KernelInfoJson(const kernels::KernelInfo& k);
/// The parsed index at `path`: InputError store:Missing or store:Corrupt (not JSON) naming `what` ("kernel index").
Json ReadStoreIndex(const std::string& path, const std::string& what);
/// `file`, once its bytes match `expected` (xxh3, hex): InputError store:Checksum naming `what` ("kernel file") otherwise.
const std::string& CheckedStoreFile(const std::string& file, const std::string& expected, const std::string& what);

}  // namespace neuromkl::exporting
