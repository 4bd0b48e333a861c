#pragma once
// Atlases: an integer label image plus a table naming each label; resampled onto the image
// grid by nearest neighbour in world coordinates; intersected with a mask; turned into a
// RegionIndex (the voxels of each region), which is all the kernel stage needs.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "neuromkl/io/volume.hpp"

namespace neuromkl::atlas {

struct LabelEntry {
  std::int64_t label = 0;
  std::string name;
};

/// A label table read from TSV/CSV/whitespace text. Files with a header use the columns
/// "label"/"value"/"index"/"code" and "name"; header-less files (AAL's ROI_MNI_V4.txt,
/// MRIcron's aal.nii.txt) are read by column: every all-integer column is a candidate label
/// column and the longest text column is the name. Which integer column codes the image is
/// decided against the image's values (see ChooseLabelColumn).
struct LabelTable {
  std::string path;
  std::vector<std::string> names;                             ///< one per row
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> labelColumns;  ///< candidate codings
};
LabelTable ReadLabelTable(const std::string& path);

struct Atlas {
  std::string imagePath, tablePath;
  io::Geometry geometry;
  std::vector<std::int32_t> labels;   ///< one per voxel, 0 = background
  std::vector<LabelEntry> regions;    ///< table order, restricted to labels present in the image
  std::string labelColumn;            ///< which table column matched the image coding
  std::vector<std::string> warnings;  ///< labels without names, names absent from the image
};

/// Resolves a built-in atlas name ("aal") to its image and table paths; nullopt if unknown.
struct AtlasFiles {
  std::string image, table;
};
std::optional<AtlasFiles> BuiltinAtlas(const std::string& name);
std::vector<std::string> BuiltinAtlasNames();
/// Folder holding atlases/ (NEUROMKL_DATA_DIR environment variable, else the build-time default).
std::string DataDir();

/// Reads the label image and its table. Errors: non-integer label values, no labels at all,
/// a table none of whose columns matches the image labels.
Atlas LoadAtlas(const std::string& imagePath, const std::string& tablePath);

/// Nearest-neighbour resampling of integer labels onto `target`, through LPS world coordinates.
/// Target voxels whose centre falls outside the source grid get 0.
std::vector<std::int32_t> ResampleLabels(const io::Geometry& source, const std::vector<std::int32_t>& labels,
                                         const io::Geometry& target);
/// Same for a float image (masks), nearest neighbour.
std::vector<float> ResampleNearest(const io::Geometry& source, const std::vector<float>& values, const io::Geometry& target);

struct RegionVoxels {
  std::int64_t label = 0;
  std::string name;
  std::vector<std::int64_t> voxels;   ///< linear indices on the image grid, ascending
  std::int64_t atlasVoxels = 0;       ///< voxels of the label on the image grid before masking
};

/// Each region's voxels on the image grid, after the (optional) mask.
struct RegionIndex {
  io::Geometry grid;
  std::vector<RegionVoxels> regions;        ///< regions with at least one voxel, table order
  std::vector<RegionVoxels> emptyRegions;   ///< regions with no voxel left (reported, excluded)
  bool resampled = false;
  std::int64_t maskVoxels = -1;             ///< -1: no mask
  std::vector<std::string> warnings;
  std::int64_t TotalVoxels() const;
};

/// Puts the atlas (and mask, if given) on the image grid. Errors: atlas and image do not
/// overlap in world space [atlas:NoOverlap]; no label left inside the mask [atlas:NoLabelInMask].
RegionIndex BuildRegionIndex(const Atlas& atlas, const io::Geometry& imageGrid, const io::Volume* mask,
                             const std::string& maskPath = "");

}  // namespace neuromkl::atlas
