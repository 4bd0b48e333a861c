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

/// A label table, its format detected from the content:
/// - FSL atlas XML (`<atlas>...<label index="i" ...>Name</label>`): a label image codes region i
///   as value i + 1 (FSL's convention), a 4-D probabilistic image holds region i in volume i;
/// - FreeSurfer colour LUT (`value name R G B A` per line, `#` comments);
/// - TSV/CSV/whitespace text: BIDS `dseg.tsv` (columns `index`, `name`), files with a header use
///   the columns "label"/"value"/"index"/"code" and "name"; header-less files (AAL's
///   ROI_MNI_V4.txt, MRIcron's aal.nii.txt) are read by column: every all-integer column is a
///   candidate label column and the longest text column is the name.
/// Which integer column codes the image is decided against the image's values.
struct LabelTable {
  std::string path;
  std::string format;                                         ///< "fsl_xml", "freesurfer_lut", "tsv" (text tables)
  std::vector<std::string> names;                             ///< one per row
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> labelColumns;  ///< candidate codings
  std::vector<std::int64_t> volumeIndex;  ///< FSL XML: the 0-based volume of each row in a 4-D probabilistic image
  std::vector<std::size_t> lines;         ///< the 1-based line of the file each row comes from (for messages)
};
LabelTable ReadLabelTable(const std::string& path);

struct Atlas {
  std::string imagePath, tablePath;
  io::Geometry geometry;
  std::vector<std::int32_t> labels;   ///< one per voxel, 0 = background
  std::vector<LabelEntry> regions;    ///< table order, restricted to labels present in the image
  std::string labelColumn;            ///< which table column matched the image coding
  std::string tableFormat;            ///< LabelTable::format
  std::vector<std::string> warnings;  ///< labels without names, names absent from the image
  // A 4-D probabilistic atlas (LoadProbabilisticAtlas): `labels` is empty; region r (label r + 1)
  // is volume `regionVolume[r]` of `probabilities` (values in [0, 1]).
  bool probabilistic = false;
  std::vector<float> probabilities;   ///< volumes x voxels, volume-major
  std::vector<std::int64_t> regionVolume;
  double threshold = 0;               ///< a voxel belongs to a region when its probability is > threshold
};

/// Resolves a built-in atlas name ("aal") to its image and table paths; nullopt if unknown.
struct AtlasFiles {
  std::string image, table;
};
std::optional<AtlasFiles> BuiltinAtlas(const std::string& name);
std::vector<std::string> BuiltinAtlasNames();
/// Where the data folder (the one holding atlases/) was found, and how.
struct DataDirLookup {
  std::string dir;                 ///< empty: not found
  std::string how;                 ///< "beside the binary ...", "NEUROMKL_DATA_DIR", "the source tree of ...", "not found"
  std::vector<std::string> tried;  ///< the folders beside the binary that were looked at
};
/// Finds the data folder: first beside the binary that holds this code (an installed CLI's
/// <prefix>/share/neuromkl, the installed Python module's, a pip-installed package's data/), then the
/// NEUROMKL_DATA_DIR environment variable, then, for a binary inside its build tree, the source tree.
/// Never the source tree for a binary outside its build tree.
DataDirLookup FindDataDir();
/// FindDataDir's folder; when none was found, the first folder looked at beside the binary (so that
/// messages about a missing file name where the installed data were expected).
std::string DataDir();

/// Reads the label image and its table. Errors: non-integer label values, no labels at all,
/// a table none of whose columns matches the image labels.
Atlas LoadAtlas(const std::string& imagePath, const std::string& tablePath);

/// Reads a 4-D probabilistic atlas (one volume per region) and its table: the table's k-th row
/// names volume k (FSL XML: the row's index attribute). Probabilities in [0, 1]; images in percent
/// (maximum in (1, 100], as FSL's) are divided by 100 (noted in warnings). Errors: values outside
/// [0, 100] or non-finite [atlas:BadProbability], rows != volumes [atlas:TableMismatch].
Atlas LoadProbabilisticAtlas(const std::string& imagePath, const std::string& tablePath, double threshold);

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
  /// Probabilistic regions: the probability p of each voxel (same order as `voxels`); empty = all 1.
  /// The region kernel is then K = X diag(p) X' (features sqrt(p) x) and its voxel map carries p.
  std::vector<float> weights;
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
/// Probabilistic atlases: every volume resampled (nearest neighbour), voxels with p > threshold.
RegionIndex BuildRegionIndex(const Atlas& atlas, const io::Geometry& imageGrid, const io::Volume* mask,
                             const std::string& maskPath = "");

/// Several atlases in one study (e.g. cortical + subcortical): regions of part k > 0 get label
/// k * 1000000 + label (labels stay unique) and every name gets "<prefix>_" when a prefix is given.
/// A voxel may belong to regions of several parts.
RegionIndex CombineRegionIndices(std::vector<RegionIndex> parts, const std::vector<std::string>& prefixes);
inline constexpr std::int64_t kAtlasPartLabelStride = 1000000;

}  // namespace neuromkl::atlas
