#include "neuromkl/export/kernel_store.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "store_files.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/hash.hpp"
#include "neuromkl/core/npy.hpp"

namespace neuromkl::exporting {

namespace fs = std::filesystem;

Json KernelInfoJson(const kernels::KernelInfo& k) {
  return {{"name", k.name}, {"label", k.label}, {"features", k.features}, {"atlas_voxels", k.atlasVoxels},
          {"non_finite_voxels", k.nonFiniteVoxels}, {"zeroed_values", k.zeroedValues}};
}

Json ReadStoreIndex(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw InputError("store:Missing", path, "no " + what + " here");
  try {
    return Json::parse(in);
  } catch (const Json::exception& e) {
    throw InputError("store:Corrupt", path, "the " + what + " is not valid JSON: " + e.what());
  }
}

const std::string& CheckedStoreFile(const std::string& file, const std::string& expected, const std::string& what) {
  const std::string found = HashFile(file).Hex();
  if (found != expected)
    throw InputError("store:Checksum", file, "the " + what + "'s content does not match its checksum in the index (expected xxh3 " + expected +
                                                 ", found " + found + "): the file was changed or damaged");
  return file;
}

namespace {
/// (Lenient: entries of older versions lack some fields.)
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

std::string KernelStoreFile(std::size_t r, const std::string& name) { return fmt::format("k{:03d}_{}.npy", r, SafeName(name)); }

void SaveKernelStore(const std::string& dir, const kernels::KernelSet& set, const std::string& key, const std::string& description,
                     const std::vector<Eigen::MatrixXd>* moved) {
  const std::vector<Eigen::MatrixXd>& float64 = moved ? *moved : set.kernels;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError("store:Mkdir", dir, "cannot create the kernel folder: " + ec.message());
  std::vector<std::string> hashes;
  for (std::size_t r = 0; r < set.info.size(); ++r) {
    const std::string file = dir + "/" + KernelStoreFile(r, set.info[r].name);
    if (set.Compact()) WriteNpy(file, set.compact.kernels[r]);
    else WriteNpy(file, float64[r]);
    // Checksum of the file as written: a later read that finds other bytes (bit rot, a partial copy,
    // an edit) is refused, never served as kernels.
    hashes.push_back(HashFile(file).Hex());
  }
  SaveKernelStoreIndex(dir, set, key, description, hashes);
}

void SaveKernelStoreIndex(const std::string& dir, const kernels::KernelSet& set, const std::string& key, const std::string& description,
                          const std::vector<std::string>& hashes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError("store:Mkdir", dir, "cannot create the kernel folder: " + ec.message());
  if (hashes.size() != set.info.size()) throw std::logic_error("SaveKernelStoreIndex: one checksum per kernel");
  Json index = {{"format", "neuromkl-kernels"}, {"version", 1}, {"key", key}, {"description", description},
                {"subjects", set.subjects}, {"kernels", Json::array()}, {"excluded", Json::array()},
                {"note", "each file is a float64 n x n raw Gram matrix (not centred or normalised), rows and columns in 'subjects' order"}};
  if (set.Compact()) {
    // A float32 study's store (kernels.precision "float32"): the rounded kernels as they are held, and the
    // float64 diagonals that say which subjects have signal.
    index["dtype"] = "float32";
    index["centred"] = set.compact.centred;
    index["note"] = set.compact.centred ? "each file is a float32 n x n Gram matrix centred with the mean over all 'subjects' (rows and columns "
                                          "in that order); raw_diagonals.npy holds each kernel's float64 diagonal before centring, one row per kernel"
                                        : "each file is a float32 n x n raw Gram matrix (not centred or normalised), rows and columns in "
                                          "'subjects' order; raw_diagonals.npy holds each kernel's float64 diagonal, one row per kernel";
    Eigen::MatrixXd diagonals(static_cast<Eigen::Index>(set.Size()), static_cast<Eigen::Index>(set.subjects.size()));
    for (std::size_t r = 0; r < set.Size(); ++r) diagonals.row(static_cast<Eigen::Index>(r)) = set.rawDiagonals[r].transpose();
    WriteNpy(dir + "/raw_diagonals.npy", diagonals);
    index["raw_diagonals_xxh3"] = HashFile(dir + "/raw_diagonals.npy").Hex();
  }
  for (std::size_t r = 0; r < set.info.size(); ++r) {
    Json e = KernelInfoJson(set.info[r]);
    e["file"] = KernelStoreFile(r, set.info[r].name);
    e["xxh3"] = hashes[r];
    index["kernels"].push_back(e);
  }
  if (!set.intensityScale.empty()) index["intensity_scale"] = set.intensityScale;  // per subject: what its image was divided by
  if (set.nonZeroInsideAtlas >= 0) index["non_zero_values"] = {{"inside_atlas", set.nonZeroInsideAtlas}, {"outside_atlas", set.nonZeroOutsideAtlas}};
  for (const auto& x : set.excluded) {
    Json e = KernelInfoJson(x.info);
    e["reason"] = x.reason;
    index["excluded"].push_back(e);
  }
  std::ofstream out(dir + "/index.json");
  out << index.dump(2) << "\n";
  out.close();  // flushes: a full disk shows here, not in the destructor
  if (!out) throw IoError("store:Write", dir + "/index.json", "cannot write the kernel index (disk full?)");
}

namespace {
/// `file`, once its bytes are checked against the index's checksum (InputError store:Checksum otherwise).
const std::string& Checked(const std::string& file, const std::string& expected) { return CheckedStoreFile(file, expected, "kernel file"); }
}  // namespace

KernelStoreIndex ReadKernelStoreIndex(const std::string& dir, std::string* key) {
  const std::string path = dir + "/index.json";
  const Json index = ReadStoreIndex(path, "kernel index");
  KernelStoreIndex out;
  kernels::KernelSet& set = out.set;
  try {
    set.subjects = index.at("subjects").get<std::vector<std::string>>();
    const std::string dtype = index.value("dtype", "float64");
    if (dtype != "float64" && dtype != "float32") throw InputError("store:Corrupt", path, "unknown dtype \"" + dtype + "\" (expected float64 or float32)");
    out.float32 = dtype == "float32";
    if (out.float32) {
      set.compact.centred = index.at("centred").get<bool>();
      const Eigen::MatrixXd diagonals = ReadNpy(Checked(dir + "/raw_diagonals.npy", index.at("raw_diagonals_xxh3").get<std::string>()));
      if (diagonals.rows() != static_cast<Eigen::Index>(index.at("kernels").size()) || diagonals.cols() != static_cast<Eigen::Index>(set.subjects.size()))
        throw InputError("store:Corrupt", dir + "/raw_diagonals.npy",
                         fmt::format("expected {} x {} diagonals (kernels x subjects), found {} x {}", index.at("kernels").size(), set.subjects.size(),
                                     diagonals.rows(), diagonals.cols()));
      for (Eigen::Index r = 0; r < diagonals.rows(); ++r) set.rawDiagonals.push_back(diagonals.row(r).transpose());
    }
    for (const auto& e : index.at("kernels")) {
      set.info.push_back(InfoFrom(e));
      out.files.push_back(dir + "/" + e.at("file").get<std::string>());
      if (!e.contains("xxh3"))
        throw InputError("store:NoChecksum", path, "the kernel index has no checksum for " + out.files.back() + " (written by an older version?)");
      out.hashes.push_back(e.at("xxh3").get<std::string>());
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
  return out;
}

Eigen::MatrixXf ReadStoreKernelFloat32(const std::string& file, const std::string& hash, Eigen::Index n) {
  Eigen::MatrixXf K = ReadNpyFloat32(Checked(file, hash));
  if (K.rows() != n || K.cols() != n)
    throw InputError("store:Corrupt", file, fmt::format("expected a {0} x {0} kernel (= subjects), found {1} x {2}", n, K.rows(), K.cols()));
  return K;
}

Eigen::MatrixXd ReadStoreKernel(const std::string& file, const std::string& hash) { return ReadNpy(Checked(file, hash)); }

kernels::KernelSet LoadKernelStore(const std::string& dir, std::string* key) {
  KernelStoreIndex index = ReadKernelStoreIndex(dir, key);
  kernels::KernelSet set = std::move(index.set);
  const auto n = static_cast<Eigen::Index>(set.subjects.size());
  for (std::size_t r = 0; r < index.files.size(); ++r) {
    if (index.float32) set.compact.kernels.push_back(ReadStoreKernelFloat32(index.files[r], index.hashes[r], n));
    else set.kernels.push_back(ReadStoreKernel(index.files[r], index.hashes[r]));
  }
  return set;
}

}  // namespace neuromkl::exporting
