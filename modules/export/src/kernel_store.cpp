#include "neuromkl/export/kernel_store.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "json_format.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/hash.hpp"
#include "neuromkl/core/npy.hpp"

namespace neuromkl::exporting {

namespace fs = std::filesystem;

namespace {
Json InfoJson(const kernels::KernelInfo& k) {
  return {{"name", k.name}, {"label", k.label}, {"features", k.features}, {"atlas_voxels", k.atlasVoxels},
          {"non_finite_voxels", k.nonFiniteVoxels}, {"zeroed_values", k.zeroedValues}};
}
kernels::KernelInfo InfoFrom(const Json& j) {
  kernels::KernelInfo k;
  k.name = j.at("name").get<std::string>();
  k.label = j.value("label", 0LL);
  k.features = j.value("features", 0LL);
  k.atlasVoxels = j.value("atlas_voxels", 0LL);
  k.nonFiniteVoxels = j.value("non_finite_voxels", 0LL);
  k.zeroedValues = j.value("zeroed_values", 0LL);
  return k;
}
std::string SafeName(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-') ? c : '_';
  return out;
}
}  // namespace

void SaveKernelStore(const std::string& dir, const kernels::KernelSet& set, const std::string& key, const std::string& description) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError("store:Mkdir", dir, "cannot create the kernel folder: " + ec.message());
  Json index = {{"format", "neuromkl-kernels"}, {"version", 1}, {"key", key}, {"description", description},
                {"subjects", set.subjects}, {"kernels", Json::array()}, {"excluded", Json::array()},
                {"note", "each file is a float64 n x n raw Gram matrix (not centred or normalised), rows and columns in 'subjects' order"}};
  for (std::size_t r = 0; r < set.kernels.size(); ++r) {
    const std::string file = fmt::format("k{:03d}_{}.npy", r, SafeName(set.info[r].name));
    WriteNpy(dir + "/" + file, set.kernels[r]);
    Json e = InfoJson(set.info[r]);
    e["file"] = file;
    // Checksum of the file as written: a later read that finds other bytes (bit rot, a partial copy,
    // an edit) is refused, never served as kernels.
    e["xxh3"] = HashFile(dir + "/" + file).Hex();
    index["kernels"].push_back(e);
  }
  if (!set.intensityScale.empty()) index["intensity_scale"] = set.intensityScale;  // per subject: what its image was divided by
  if (set.nonZeroInsideAtlas >= 0) index["non_zero_values"] = {{"inside_atlas", set.nonZeroInsideAtlas}, {"outside_atlas", set.nonZeroOutsideAtlas}};
  for (const auto& x : set.excluded) {
    Json e = InfoJson(x.info);
    e["reason"] = x.reason;
    index["excluded"].push_back(e);
  }
  std::ofstream out(dir + "/index.json");
  out << index.dump(2) << "\n";
  out.close();  // flushes: a full disk shows here, not in the destructor
  if (!out) throw IoError("store:Write", dir + "/index.json", "cannot write the kernel index (disk full?)");
}

kernels::KernelSet LoadKernelStore(const std::string& dir, std::string* key) {
  const std::string path = dir + "/index.json";
  std::ifstream in(path);
  if (!in) throw InputError("store:Missing", path, "no kernel index here");
  Json index;
  try {
    index = Json::parse(in);
  } catch (const Json::exception& e) {
    throw InputError("store:Corrupt", path, std::string("the kernel index is not valid JSON: ") + e.what());
  }
  kernels::KernelSet set;
  try {
    set.subjects = index.at("subjects").get<std::vector<std::string>>();
    for (const auto& e : index.at("kernels")) {
      set.info.push_back(InfoFrom(e));
      const std::string file = dir + "/" + e.at("file").get<std::string>();
      if (!e.contains("xxh3"))
        throw InputError("store:NoChecksum", path, "the kernel index has no checksum for " + file + " (written by an older version?)");
      const std::string expected = e.at("xxh3").get<std::string>();
      const std::string found = HashFile(file).Hex();
      if (found != expected)
        throw InputError("store:Checksum", file, "the kernel file's content does not match its checksum in the index (expected xxh3 " +
                                                     expected + ", found " + found + "): the file was changed or damaged");
      set.kernels.push_back(ReadNpy(file));
    }
    for (const auto& e : index.at("excluded")) set.excluded.push_back({InfoFrom(e), e.value("reason", "")});
    if (index.contains("non_zero_values")) {
      set.nonZeroInsideAtlas = index.at("non_zero_values").at("inside_atlas").get<std::int64_t>();
      set.nonZeroOutsideAtlas = index.at("non_zero_values").at("outside_atlas").get<std::int64_t>();
    }
    if (index.contains("intensity_scale")) set.intensityScale = index.at("intensity_scale").get<std::vector<double>>();
    if (!set.intensityScale.empty() && set.intensityScale.size() != set.subjects.size())
      throw InputError("store:Corrupt", path, "intensity_scale has " + std::to_string(set.intensityScale.size()) + " entries for " +
                                                  std::to_string(set.subjects.size()) + " subjects");
    if (key) *key = index.value("key", "");
  } catch (const Json::exception& e) {
    throw InputError("store:Corrupt", path, std::string("the kernel index lacks a field: ") + e.what());
  }
  return set;
}

}  // namespace neuromkl::exporting
