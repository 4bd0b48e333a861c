#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/io/nifti.hpp"

namespace neuromkl::atlas {

std::string DataDir() {
  if (const char* env = std::getenv("NEUROMKL_DATA_DIR"); env && *env) return env;
  return NEUROMKL_DEFAULT_DATA_DIR;
}

std::vector<std::string> BuiltinAtlasNames() { return {"aal"}; }

std::optional<AtlasFiles> BuiltinAtlas(const std::string& name) {
  if (name == "aal") {
    const std::string dir = DataDir() + "/atlases/aal/";
    return AtlasFiles{dir + "ROI_MNI_V4.nii.gz", dir + "aal116_labels.tsv"};
  }
  return std::nullopt;
}

Atlas LoadAtlas(const std::string& imagePath, const std::string& tablePath) {
  io::Volume image = io::ReadVolume(imagePath);
  Atlas atlas;
  atlas.imagePath = imagePath;
  atlas.tablePath = tablePath;
  atlas.geometry = image.geometry;
  atlas.labels.resize(image.data.size());
  std::int64_t nonInteger = 0;
  std::set<std::int32_t> present;
  for (std::size_t i = 0; i < image.data.size(); ++i) {
    const float v = image.data[i];
    if (!std::isfinite(v) || v != std::round(v)) {
      ++nonInteger;
      atlas.labels[i] = 0;
      continue;
    }
    atlas.labels[i] = static_cast<std::int32_t>(v);
    if (atlas.labels[i] != 0) present.insert(atlas.labels[i]);
  }
  if (nonInteger > 0)
    throw InputError("atlas:NonIntegerLabels", imagePath,
                     fmt::format("expected an integer label image, found {} voxels with non-integer or non-finite values "
                                 "(a probability map? threshold it into labels first)", nonInteger));
  if (present.empty()) throw InputError("atlas:NoLabels", imagePath, "the atlas image has no non-zero label");

  LabelTable table = ReadLabelTable(tablePath);
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

RegionIndex BuildRegionIndex(const Atlas& atlas, const io::Geometry& imageGrid, const io::Volume* mask, const std::string& maskPath) {
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
  if (mask) {
    std::vector<float> m = mask->geometry.DifferenceFrom(imageGrid).empty() ? mask->data
                                                                             : ResampleNearest(mask->geometry, mask->data, imageGrid);
    inMask.resize(m.size());
    index.maskVoxels = 0;
    for (std::size_t i = 0; i < m.size(); ++i) {
      inMask[i] = std::isfinite(m[i]) && m[i] != 0.0f;
      index.maskVoxels += inMask[i];
    }
  }
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
