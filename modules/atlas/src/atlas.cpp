#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/io/nifti.hpp"

namespace neuromkl::atlas {

namespace {

namespace fs = std::filesystem;

bool HoldsAtlases(const fs::path& dir) {
  std::error_code ec;
  return !dir.empty() && fs::is_directory(dir / "atlases", ec);
}

/// The file this code was loaded from: the Python extension module (neuromkl._core) when the atlas library
/// is linked into it (dladdr names shared objects by absolute path), else the executable. Empty when it cannot
/// be told.
fs::path LoadedFile() {
  Dl_info info{};
  std::error_code ec;
  if (dladdr(reinterpret_cast<void*>(&HoldsAtlases), &info) != 0 && info.dli_fname && fs::path(info.dli_fname).is_absolute()) {
    const fs::path file = fs::canonical(info.dli_fname, ec);
    if (!ec) return file;
  }
  const fs::path exe = fs::canonical("/proc/self/exe", ec);
  return ec ? fs::path() : exe;
}

bool Inside(const fs::path& file, const fs::path& dir) {
  std::error_code ec;
  const fs::path base = fs::canonical(dir, ec);
  if (ec) return false;
  const auto rel = file.lexically_relative(base);
  return !rel.empty() && *rel.begin() != "..";
}

}  // namespace

DataDirLookup FindDataDir() {
  DataDirLookup lookup;
  // 1. Relative to the binary: an installed CLI (<prefix>/bin -> <prefix>/share/neuromkl), the Python module
  // installed beside it (<prefix>/lib/python3/dist-packages/neuromkl) or a pip-installed package (its data/).
  const fs::path file = LoadedFile();
  if (!file.empty()) {
    const fs::path dir = file.parent_path();
    for (const fs::path& candidate : {dir / NEUROMKL_DATA_FROM_BINDIR, dir / NEUROMKL_DATA_FROM_PYTHONDIR, dir / "data"}) {
      const fs::path normal = candidate.lexically_normal();
      lookup.tried.push_back(normal.string());
      if (HoldsAtlases(normal)) {
        lookup.dir = normal.string();
        lookup.how = "beside the binary " + file.string();
        return lookup;
      }
    }
  }
  // 2. The environment, for a binary moved away from its data.
  if (const char* env = std::getenv("NEUROMKL_DATA_DIR"); env && *env) {
    lookup.dir = env;
    lookup.how = "NEUROMKL_DATA_DIR";
    return lookup;
  }
  // 3. A binary in its build tree reads the source tree it was built from.
  if (!file.empty() && Inside(file, NEUROMKL_BUILD_TREE) && HoldsAtlases(NEUROMKL_SOURCE_TREE)) {
    lookup.dir = NEUROMKL_SOURCE_TREE;
    lookup.how = "the source tree of the build tree " NEUROMKL_BUILD_TREE;
    return lookup;
  }
  lookup.how = "not found";
  return lookup;
}

std::string DataDir() {
  const DataDirLookup found = FindDataDir();
  // Not found: the installed location, so that a missing file's message names where it was expected.
  return found.dir.empty() && !found.tried.empty() ? found.tried.front() : found.dir;
}

std::vector<std::string> BuiltinAtlasNames() { return {"aal"}; }

std::optional<AtlasFiles> BuiltinAtlas(const std::string& name) {
  if (name == "aal") {
    const std::string dir = DataDir() + "/atlases/aal/";
    return AtlasFiles{dir + "ROI_MNI_V4.nii.gz", dir + "aal116_labels.tsv"};
  }
  return std::nullopt;
}

namespace {
/// A code listed twice would give two regions the same voxels (or one name to another's voxels): an
/// error naming both lines, never a silent choice.
void CheckUniqueCodes(const LabelTable& table, const std::vector<std::int64_t>& codes, const std::string& column) {
  std::map<std::int64_t, std::size_t> seen;
  for (std::size_t r = 0; r < codes.size(); ++r) {
    const auto [it, inserted] = seen.emplace(codes[r], r);
    if (inserted) continue;
    auto lineOf = [&](std::size_t row) { return row < table.lines.size() ? table.lines[row] : row + 1; };
    throw InputError("atlas:DuplicateLabel", table.path,
                     fmt::format("label code {} (column {}) is listed twice: line {} ({}) and line {} ({}); each code must name one region",
                                 codes[r], column, lineOf(it->second), table.names[it->second], lineOf(r), table.names[r]));
  }
}
}  // namespace

Atlas LoadAtlas(const std::string& imagePath, const std::string& tablePath) {
  io::LabelVolume image;
  try {
    image = io::ReadLabelVolume(imagePath);
  } catch (const InputError& e) {
    if (e.code() != "io:Not3D") throw;
    throw InputError("atlas:FourD", imagePath,
                     "expected a 3-D label image, found a 4-D image: for a probabilistic atlas (one volume per region) set "
                     "\"probabilistic\": true in /atlas");
  }
  if (image.nonInteger > 0)
    throw InputError("atlas:NonIntegerLabels", imagePath,
                     fmt::format("expected an integer label image, found {} voxels with non-integer or non-finite values (stored as {}; "
                                 "a probability map? set \"probabilistic\": true in /atlas, or threshold it into labels)",
                                 image.nonInteger, image.datatype));
  if (image.outOfRange > 0)
    throw InputError("atlas:LabelRange", imagePath,
                     fmt::format("label codes are 32-bit integers (-2147483648 to 2147483647); found {} voxels beyond that range "
                                 "(stored as {}), the first with label {}: renumber the labels",
                                 image.outOfRange, image.datatype, image.firstOutOfRange));
  Atlas atlas;
  atlas.imagePath = imagePath;
  atlas.tablePath = tablePath;
  atlas.geometry = image.geometry;
  atlas.labels = std::move(image.labels);
  std::set<std::int32_t> present;
  for (const std::int32_t label : atlas.labels)
    if (label != 0) present.insert(label);
  if (present.empty()) throw InputError("atlas:NoLabels", imagePath, "the atlas image has no non-zero label");

  LabelTable table = ReadLabelTable(tablePath);
  for (const auto& [column, codes] : table.labelColumns)
    for (auto code : codes)
      if (code < INT32_MIN || code > INT32_MAX)
        throw InputError("atlas:LabelRange", tablePath,
                         fmt::format("label code {} in column {} is beyond the 32-bit label codes (-2147483648 to 2147483647)", code, column));
  atlas.tableFormat = table.format;
  // The table column that codes the image: the one matching most image labels.
  std::size_t best = 0, bestHits = 0;
  for (std::size_t c = 0; c < table.labelColumns.size(); ++c) {
    std::size_t hits = 0;
    for (auto v : table.labelColumns[c].second) hits += present.count(static_cast<std::int32_t>(v));
    if (hits > bestHits) {
      best = c;
      bestHits = hits;
    }
  }
  if (bestHits == 0)
    throw InputError("atlas:TableMismatch", tablePath,
                     fmt::format("no label of the table occurs in the atlas image {} (image labels range {}..{}, {} distinct); "
                                 "is this the table of another atlas?",
                                 imagePath, *present.begin(), *present.rbegin(), present.size()));
  atlas.labelColumn = table.labelColumns[best].first;
  const auto& codes = table.labelColumns[best].second;
  CheckUniqueCodes(table, codes, atlas.labelColumn);
  std::set<std::int32_t> named;
  std::vector<std::string> absent;
  for (std::size_t r = 0; r < codes.size(); ++r) {
    const auto code = static_cast<std::int32_t>(codes[r]);
    named.insert(code);
    if (present.count(code)) atlas.regions.push_back({code, table.names[r]});
    else absent.push_back(fmt::format("{} ({})", table.names[r], code));
  }
  if (!absent.empty())
    atlas.warnings.push_back(fmt::format("{} label(s) of the table do not occur in the atlas image: {}", absent.size(),
                                         fmt::join(absent, ", ")));
  std::vector<std::string> unnamed;
  for (auto v : present)
    if (!named.count(v)) {
      unnamed.push_back(std::to_string(v));
      atlas.regions.push_back({v, "label_" + std::to_string(v)});
    }
  if (!unnamed.empty())
    atlas.warnings.push_back(fmt::format("{} label value(s) of the image are missing from the table {} and are named label_<value>: {}",
                                         unnamed.size(), tablePath, fmt::join(unnamed, ", ")));
  return atlas;
}

Atlas LoadProbabilisticAtlas(const std::string& imagePath, const std::string& tablePath, double threshold) {
  io::Volume4D image = io::ReadVolume4D(imagePath);
  Atlas atlas;
  atlas.imagePath = imagePath;
  atlas.tablePath = tablePath;
  atlas.geometry = image.geometry;
  atlas.probabilistic = true;
  atlas.threshold = threshold;
  float lo = 0, hi = 0;
  std::int64_t nonFinite = 0;
  for (float v : image.data) {
    if (!std::isfinite(v)) {
      ++nonFinite;
      continue;
    }
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (nonFinite > 0 || lo < 0 || hi > 100)
    throw InputError("atlas:BadProbability", imagePath,
                     fmt::format("expected probabilities in [0, 1] (or percent in [0, 100], as FSL stores them), found values in "
                                 "[{:g}, {:g}]{}",
                                 lo, hi, nonFinite ? fmt::format(" and {} non-finite values", nonFinite) : std::string()));
  if (hi > 1.0f) {
    for (float& v : image.data) v /= 100.0f;
    atlas.warnings.push_back(fmt::format("probabilistic atlas {} holds percentages (maximum {:g}): divided by 100", imagePath, hi));
  }
  atlas.probabilities = std::move(image.data);
  const LabelTable table = ReadLabelTable(tablePath);
  atlas.tableFormat = table.format;
  const std::size_t rows = table.names.size();
  if (static_cast<std::int64_t>(rows) != image.volumes)
    throw InputError("atlas:TableMismatch", tablePath,
                     fmt::format("the table names {} regions but the probabilistic atlas {} has {} volumes (one per region expected)",
                                 rows, imagePath, image.volumes));
  if (!table.volumeIndex.empty()) CheckUniqueCodes(table, table.volumeIndex, "index");
  for (std::size_t r = 0; r < rows; ++r) {
    const std::int64_t volume = table.volumeIndex.empty() ? static_cast<std::int64_t>(r) : table.volumeIndex[r];
    if (volume < 0 || volume >= image.volumes)
      throw InputError("atlas:TableMismatch", tablePath,
                       fmt::format("line {} ({}) names volume {}, but the image has volumes 0..{}", r < table.lines.size() ? table.lines[r] : r + 1,
                                   table.names[r], volume,
                                   image.volumes - 1));
    atlas.regionVolume.push_back(volume);
    atlas.regions.push_back({volume + 1, table.names[r]});
  }
  atlas.labelColumn = table.volumeIndex.empty() ? "row order" : "index";
  return atlas;
}

namespace {
constexpr double kTieTolerance = 1e-4;

template <typename T>
std::vector<T> ResampleImpl(const io::Geometry& source, const std::vector<T>& values, const io::Geometry& target) {
  std::vector<T> out(static_cast<std::size_t>(target.VoxelCount()), T{0});
  for (std::int64_t k = 0; k < target.dims[2]; ++k)
    for (std::int64_t j = 0; j < target.dims[1]; ++j)
      for (std::int64_t i = 0; i < target.dims[0]; ++i) {
        const auto p = target.IndexToLps({double(i), double(j), double(k)});
        const auto idx = source.LpsToIndex(p);
        std::array<std::int64_t, 3> n{};
        bool inside = true;
        for (int d = 0; d < 3; ++d) {
          // Ties (a target centre exactly between two source centres, common between grids of
          // 2 and 4.5 mm) round up; 1e-4 voxel absorbs the float32 rounding of NIfTI headers.
          n[d] = static_cast<std::int64_t>(std::floor(idx[d] + 0.5 + kTieTolerance));
          inside &= n[d] >= 0 && n[d] < source.dims[d];
        }
        if (inside) out[static_cast<std::size_t>(target.Linear(i, j, k))] = values[static_cast<std::size_t>(source.Linear(n[0], n[1], n[2]))];
      }
  return out;
}
}  // namespace

std::vector<std::int32_t> ResampleLabels(const io::Geometry& source, const std::vector<std::int32_t>& labels,
                                         const io::Geometry& target) {
  return ResampleImpl(source, labels, target);
}

std::vector<float> ResampleNearest(const io::Geometry& source, const std::vector<float>& values, const io::Geometry& target) {
  return ResampleImpl(source, values, target);
}

std::int64_t RegionIndex::TotalVoxels() const {
  std::int64_t n = 0;
  for (const auto& r : regions) n += static_cast<std::int64_t>(r.voxels.size());
  return n;
}

namespace {

std::vector<char> MaskOnGrid(const io::Volume& mask, const io::Geometry& imageGrid, std::int64_t& count) {
  std::vector<float> m = mask.geometry.DifferenceFrom(imageGrid).empty() ? mask.data : ResampleNearest(mask.geometry, mask.data, imageGrid);
  std::vector<char> inMask(m.size());
  count = 0;
  for (std::size_t i = 0; i < m.size(); ++i) {
    inMask[i] = std::isfinite(m[i]) && m[i] != 0.0f;
    count += inMask[i];
  }
  return inMask;
}

/// Probabilistic regions: each volume on the image grid, voxels with p > threshold, weighted by p.
RegionIndex BuildProbabilisticIndex(const Atlas& atlas, const io::Geometry& imageGrid, const io::Volume* mask, const std::string& maskPath) {
  RegionIndex index;
  index.grid = imageGrid;
  const bool sameGrid = atlas.geometry.DifferenceFrom(imageGrid).empty();
  if (!sameGrid) {
    index.resampled = true;
    index.warnings.push_back("probabilistic atlas " + atlas.imagePath + " (" + atlas.geometry.Describe() +
                             ") resampled onto the image grid (" + imageGrid.Describe() + ") by nearest neighbour in world coordinates");
  }
  std::vector<char> inMask;
  if (mask) inMask = MaskOnGrid(*mask, imageGrid, index.maskVoxels);
  const auto atlasVoxels = static_cast<std::size_t>(atlas.geometry.VoxelCount());
  for (std::size_t r = 0; r < atlas.regions.size(); ++r) {
    const auto first = atlas.probabilities.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(atlas.regionVolume[r]) * atlasVoxels);
    std::vector<float> volume(first, first + static_cast<std::ptrdiff_t>(atlasVoxels));
    if (!sameGrid) volume = ResampleNearest(atlas.geometry, volume, imageGrid);
    RegionVoxels region;
    region.label = atlas.regions[r].label;
    region.name = atlas.regions[r].name;
    for (std::size_t v = 0; v < volume.size(); ++v) {
      if (!(volume[v] > atlas.threshold) || volume[v] <= 0.0f) continue;
      ++region.atlasVoxels;
      if (mask && !inMask[v]) continue;
      region.voxels.push_back(static_cast<std::int64_t>(v));
      region.weights.push_back(volume[v]);
    }
    (region.voxels.empty() ? index.emptyRegions : index.regions).push_back(std::move(region));
  }
  if (index.regions.empty())
    throw InputError("atlas:NoLabelInMask", mask && !maskPath.empty() ? maskPath : atlas.imagePath,
                     fmt::format("no probabilistic region has a voxel with p > {:g} on the image grid{}", atlas.threshold,
                                 mask ? " inside the mask" : ""));
  for (const auto& r : index.emptyRegions)
    index.warnings.push_back(fmt::format("region {} has no voxel with p > {:g} on the image grid{}; excluded", r.name, atlas.threshold,
                                         mask ? " inside the mask" : ""));
  return index;
}

}  // namespace

RegionIndex CombineRegionIndices(std::vector<RegionIndex> parts, const std::vector<std::string>& prefixes) {
  RegionIndex all;
  if (parts.empty()) return all;
  all.grid = parts[0].grid;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    auto& part = parts[k];
    const std::string prefix = k < prefixes.size() && !prefixes[k].empty() ? prefixes[k] + "_" : "";
    auto rename = [&](RegionVoxels& r) {
      r.label += static_cast<std::int64_t>(k) * kAtlasPartLabelStride;
      r.name = prefix + r.name;
    };
    for (auto& r : part.regions) {
      rename(r);
      all.regions.push_back(std::move(r));
    }
    for (auto& r : part.emptyRegions) {
      rename(r);
      all.emptyRegions.push_back(std::move(r));
    }
    all.resampled |= part.resampled;
    all.maskVoxels = part.maskVoxels;
    for (auto& w : part.warnings) all.warnings.push_back(std::move(w));
  }
  return all;
}

RegionIndex BuildRegionIndex(const Atlas& atlas, const io::Geometry& imageGrid, const io::Volume* mask, const std::string& maskPath) {
  if (atlas.probabilistic) return BuildProbabilisticIndex(atlas, imageGrid, mask, maskPath);
  RegionIndex index;
  index.grid = imageGrid;
  std::vector<std::int32_t> labels;
  if (atlas.geometry.DifferenceFrom(imageGrid).empty()) {
    labels = atlas.labels;
  } else {
    labels = ResampleLabels(atlas.geometry, atlas.labels, imageGrid);
    index.resampled = true;
    index.warnings.push_back("atlas " + atlas.imagePath + " (" + atlas.geometry.Describe() +
                             ") resampled onto the image grid (" + imageGrid.Describe() +
                             ") by nearest neighbour in world coordinates");
  }
  const bool anyLabel = std::any_of(labels.begin(), labels.end(), [](std::int32_t v) { return v != 0; });
  if (!anyLabel) {
    const auto a0 = atlas.geometry.IndexToLps({0, 0, 0});
    const auto i0 = imageGrid.IndexToLps({0, 0, 0});
    throw GeometryMismatch("atlas:NoOverlap", atlas.imagePath,
                           fmt::format("the atlas and the images do not overlap in world space: atlas grid {} starts at LPS "
                                       "({:g}, {:g}, {:g}) mm, image grid {} starts at ({:g}, {:g}, {:g}) mm; are both in the same "
                                       "(MNI) space?",
                                       atlas.geometry.Describe(), a0[0], a0[1], a0[2], imageGrid.Describe(), i0[0], i0[1], i0[2]));
  }
  std::vector<char> inMask;
  if (mask) inMask = MaskOnGrid(*mask, imageGrid, index.maskVoxels);
  std::map<std::int32_t, std::size_t> slot;
  std::vector<RegionVoxels> all(atlas.regions.size());
  for (std::size_t r = 0; r < atlas.regions.size(); ++r) {
    all[r].label = atlas.regions[r].label;
    all[r].name = atlas.regions[r].name;
    slot[static_cast<std::int32_t>(atlas.regions[r].label)] = r;
  }
  for (std::size_t v = 0; v < labels.size(); ++v) {
    if (labels[v] == 0) continue;
    auto it = slot.find(labels[v]);
    if (it == slot.end()) continue;
    auto& region = all[it->second];
    ++region.atlasVoxels;
    if (!mask || inMask[v]) region.voxels.push_back(static_cast<std::int64_t>(v));
  }
  for (auto& r : all) (r.voxels.empty() ? index.emptyRegions : index.regions).push_back(std::move(r));
  if (index.regions.empty())
    throw InputError("atlas:NoLabelInMask", maskPath.empty() ? atlas.imagePath : maskPath,
                     "no atlas label left after applying the mask: the mask and the atlas do not overlap on the image grid");
  for (const auto& r : index.emptyRegions)
    index.warnings.push_back(fmt::format("region {} ({}) has no voxel on the image grid{}; excluded", r.name, r.label,
                                         mask ? " inside the mask" : ""));
  return index;
}

}  // namespace neuromkl::atlas
