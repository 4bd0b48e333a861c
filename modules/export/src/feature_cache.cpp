#include "neuromkl/export/feature_cache.hpp"

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "store_files.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/hash.hpp"
#include "neuromkl/core/mapped_file.hpp"
#include "neuromkl/core/npy.hpp"
#include "neuromkl/core/system.hpp"

namespace neuromkl::exporting {

namespace fs = std::filesystem;

namespace {
constexpr const char* kFormat = "neuromkl-features";

/// The matrix's values as one block (features.npy after its header).
const void* DataOf(const gram::FeatureMatrix& x) {
  const void* data = x.ContiguousValues();
  if (data == nullptr) throw std::logic_error("feature store: a mapping whose rows were renumbered is not saved");
  return data;
}
/// xxh3 of the matrix's values as held (features.npy after its header), from memory or the mapping: the file is read once.
std::string ValuesHash(const gram::FeatureMatrix& x) {
  Hasher h;
  h.Update(DataOf(x), static_cast<std::size_t>(x.Subjects()) * static_cast<std::size_t>(x.Voxels()) * gram::BytesPerValue(x.storage));
  return h.Hex();
}
/// Whether x's values are a mapping of `file` itself (the features were written into the entry as they were read).
bool MapsFile(const gram::FeatureMatrix& x, const std::string& file) {
  std::error_code ec;
  return x.Mapped() && fs::equivalent(x.mapped.file->Path(), file, ec) && !ec;
}

/// (Strict, unlike the kernel store's reader: every feature entry has every field.)
kernels::KernelInfo InfoFrom(const Json& j) {
  kernels::KernelInfo k;
  k.name = j.at("name").get<std::string>();
  k.label = j.at("label").get<std::int64_t>();
  k.features = j.at("features").get<std::int64_t>();
  k.atlasVoxels = j.at("atlas_voxels").get<std::int64_t>();
  k.nonFiniteVoxels = j.at("non_finite_voxels").get<std::int64_t>();
  k.zeroedValues = j.at("zeroed_values").get<std::int64_t>();
  return k;
}

/// `file` once its bytes match the index's checksum (InputError store:Checksum otherwise).
std::string Checked(const std::string& dir, const Json& index, const char* name) {
  const std::string file = dir + "/" + name;
  return CheckedStoreFile(file, index.at("xxh3").at(name).get<std::string>(), "feature file");
}
}  // namespace

void SaveFeatureStore(const std::string& dir, const FeatureEntry& entry, const std::string& key, const std::string& description) {
  const gram::FeatureMatrix& x = *entry.features;
  const kernels::KernelSet& set = entry.set;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError("store:Mkdir", dir, "cannot create the feature folder: " + ec.message());
  Json index = {{"format", kFormat}, {"version", 1}, {"key", key}, {"description", description}, {"subjects", set.subjects},
                {"storage", gram::ToString(x.storage)}, {"voxels", x.Voxels()}, {"region_start", x.regionStart},
                {"dropped_voxels", entry.droppedVoxels}, {"kernels", Json::array()}, {"excluded", Json::array()}, {"xxh3", Json::object()},
                {"note", "features.npy: one row per subject ('subjects' order), the masked voxels of region r in columns region_start[r] .. "
                         "region_start[r + 1] - 1; uint8 / int16 values are codes, value = row_scale[i] x code; values_xxh3: the xxh3 of "
                         "features.npy's values (the bytes after its header); raw_diagonals.npy: ||x_ir||^2, one row per region"}};
  if (MapsFile(x, dir + "/features.npy"))
    x.mapped.file->Flush();  // written in place, its header kept up to date by KeepRegions
  else
    WriteNpyRows(dir + "/features.npy", DataOf(x), x.Subjects(), x.Voxels(), gram::NpyTypeOf(x.storage));
  index["values_xxh3"] = ValuesHash(x);
  if (x.storage != gram::FeatureStorage::Float32) {
    WriteNpy(dir + "/row_scale.npy", Eigen::MatrixXd(x.rowScale));
    index["xxh3"]["row_scale.npy"] = HashFile(dir + "/row_scale.npy").Hex();
  }
  Eigen::MatrixXd diagonals(static_cast<Eigen::Index>(set.rawDiagonals.size()), x.Subjects());
  for (std::size_t r = 0; r < set.rawDiagonals.size(); ++r) diagonals.row(static_cast<Eigen::Index>(r)) = set.rawDiagonals[r].transpose();
  WriteNpy(dir + "/raw_diagonals.npy", diagonals);
  index["xxh3"]["raw_diagonals.npy"] = HashFile(dir + "/raw_diagonals.npy").Hex();
  for (const auto& info : set.info) index["kernels"].push_back(KernelInfoJson(info));
  for (const auto& e : set.excluded) {
    Json j = KernelInfoJson(e.info);
    j["reason"] = e.reason;
    index["excluded"].push_back(j);
  }
  if (!set.intensityScale.empty()) index["intensity_scale"] = set.intensityScale;
  if (set.nonZeroInsideAtlas >= 0) index["non_zero_values"] = {{"inside_atlas", set.nonZeroInsideAtlas}, {"outside_atlas", set.nonZeroOutsideAtlas}};
  // index.json last: an entry without it is not an entry (the kernel cache's landing renames the folder into place).
  std::ofstream out(dir + "/index.json");
  out << index.dump(2) << "\n";
  out.close();
  if (!out) throw IoError("store:Write", dir + "/index.json", "cannot write the feature index (disk full?)");
}

FeatureEntry LoadFeatureStore(const std::string& dir, std::string* key) {
  const std::string path = dir + "/index.json";
  const Json index = ReadStoreIndex(path, "feature index");
  FeatureEntry entry;
  entry.features = std::make_shared<gram::FeatureMatrix>();
  gram::FeatureMatrix& x = *entry.features;
  kernels::KernelSet& set = entry.set;
  try {
    if (index.at("format").get<std::string>() != kFormat || index.at("version").get<int>() != 1)
      throw InputError("store:Corrupt", path, fmt::format("expected format {} version 1; found {} version {}", kFormat, index.at("format").dump(), index.at("version").dump()));
    set.subjects = index.at("subjects").get<std::vector<std::string>>();
    const std::string storage = index.at("storage").get<std::string>();
    gram::FeatureStorage kind = gram::FeatureStorage::Float32;
    if (storage == "uint8") kind = gram::FeatureStorage::UInt8;
    else if (storage == "int16") kind = gram::FeatureStorage::Int16;
    else if (storage != "float32") throw InputError("store:Corrupt", path, "unknown storage \"" + storage + "\" (expected float32, uint8 or int16)");
    const auto n = static_cast<Eigen::Index>(set.subjects.size());
    const auto voxels = index.at("voxels").get<Eigen::Index>();
    if (voxels < 0) throw InputError("store:Corrupt", path, "expected a voxel count of at least 0; found " + std::to_string(voxels));
    x.regionStart = index.at("region_start").get<std::vector<Eigen::Index>>();
    for (const auto& e : index.at("kernels")) set.info.push_back(InfoFrom(e));
    if (x.regionStart.size() != set.info.size() + 1)
      throw InputError("store:Corrupt", path, fmt::format("expected {} region offsets (one per region and the end); found {}", set.info.size() + 1, x.regionStart.size()));
    for (const auto& e : index.at("excluded")) set.excluded.push_back({InfoFrom(e), e.at("reason").get<std::string>()});
    // The matrix is allocated only once the file is known to hold it (a damaged index must not ask for any size).
    const auto bytes = static_cast<std::uintmax_t>(n) * static_cast<std::uintmax_t>(voxels) * gram::BytesPerValue(kind);
    std::error_code ec;
    const std::uintmax_t fileBytes = fs::file_size(dir + "/features.npy", ec);
    if (ec || fileBytes < bytes)
      throw InputError("store:Corrupt", dir + "/features.npy",
                       fmt::format("expected {} x {} values of {} bytes; found {}", n, voxels, gram::BytesPerValue(kind), ec ? ec.message() : std::to_string(fileBytes) + " bytes"));
    // Mapped, not read: the values stay in the file, paged in as they are read and dropped under memory pressure, so a
    // store larger than the memory still runs, if slowly (read ahead at once when it takes at most half the memory
    // available now).
    const std::uint64_t offset = NpyRowsDataOffset(dir + "/features.npy", n, voxels, gram::NpyTypeOf(kind));
    std::shared_ptr<MappedFile> file = MappedFile::OpenReadOnly(dir + "/features.npy", 2 * (fileBytes - offset) <= AvailableMemoryBytes());
    if (file->Size() < offset + bytes)
      throw InputError("store:Corrupt", dir + "/features.npy", fmt::format("expected {} bytes of values after the {}-byte header; found {}", bytes, offset, file->Size() - offset));
    x.MapRows(kind, std::move(file), offset, n, voxels);
    const std::string expected = index.at("values_xxh3").get<std::string>(), found = ValuesHash(x);
    if (found != expected)
      throw InputError("store:Checksum", dir + "/features.npy", "the feature file's values do not match their checksum in the index (expected xxh3 " + expected +
                                                                    ", found " + found + "): the file was changed or damaged");
    if (kind != gram::FeatureStorage::Float32) {
      const Eigen::MatrixXd scale = ReadNpy(Checked(dir, index, "row_scale.npy"));
      if (scale.rows() != n || scale.cols() != 1)
        throw InputError("store:Corrupt", dir + "/row_scale.npy", fmt::format("expected {} row scales; found {} x {}", n, scale.rows(), scale.cols()));
      x.rowScale = scale.col(0);
    }
    x.Check();
    const Eigen::MatrixXd diagonals = ReadNpy(Checked(dir, index, "raw_diagonals.npy"));
    if (diagonals.rows() != static_cast<Eigen::Index>(set.info.size()) || diagonals.cols() != n)
      throw InputError("store:Corrupt", dir + "/raw_diagonals.npy",
                       fmt::format("expected {} x {} diagonals (regions x subjects); found {} x {}", set.info.size(), n, diagonals.rows(), diagonals.cols()));
    for (Eigen::Index r = 0; r < diagonals.rows(); ++r) set.rawDiagonals.push_back(diagonals.row(r).transpose());
    if (index.contains("intensity_scale")) set.intensityScale = index.at("intensity_scale").get<std::vector<double>>();
    if (!set.intensityScale.empty() && set.intensityScale.size() != set.subjects.size())
      throw InputError("store:Corrupt", path, fmt::format("intensity_scale has {} entries for {} subjects", set.intensityScale.size(), set.subjects.size()));
    if (index.contains("non_zero_values")) {
      set.nonZeroInsideAtlas = index.at("non_zero_values").at("inside_atlas").get<std::int64_t>();
      set.nonZeroOutsideAtlas = index.at("non_zero_values").at("outside_atlas").get<std::int64_t>();
    }
    entry.droppedVoxels = index.at("dropped_voxels").get<std::int64_t>();
    if (key) *key = index.at("key").get<std::string>();
  } catch (const Json::exception& e) {
    throw InputError("store:Corrupt", path, std::string("the feature index lacks a field or has one of the wrong type: ") + e.what());
  }
  set.featureForm = true;
  return entry;
}

}  // namespace neuromkl::exporting
