#include "neuromkl/config/checkpoint.hpp"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "json_reader.hpp"
#include "neuromkl/core/errors.hpp"

namespace neuromkl::config {

namespace fs = std::filesystem;

void SavePermutationBlock(const std::string& path, const PermutationBlock& b) {
  Json j = {{"format", "neuromkl-permutation-block"}, {"key", b.key}, {"first", b.first}, {"learners", b.learners}, {"pooled", Json::array()}};
  for (const auto& perm : b.pooled) {
    Json row = Json::array();
    for (const auto& metrics : perm) {
      Json m = Json::object();
      for (const auto& [k, v] : metrics) m[k] = std::isfinite(v) ? Json(v) : Json(nullptr);  // JSON has no NaN
      row.push_back(m);
    }
    j["pooled"].push_back(row);
  }
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out << j.dump() << "\n";  // doubles round-trip exactly (shortest representation)
    if (!out) throw IoError("checkpoint:Write", tmp, "cannot write the checkpoint (disk full?)");
  }
  fs::rename(tmp, path, ec);
  if (ec) throw IoError("checkpoint:Rename", path, ec.message());
}

std::optional<PermutationBlock> LoadPermutationBlock(const std::string& path, const std::string& key) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  try {
    const Json j = Json::parse(text.str());
    if (j.at("format") != "neuromkl-permutation-block" || j.at("key") != key) return std::nullopt;
    PermutationBlock b;
    b.key = key;
    b.first = j.at("first").get<int>();
    b.learners = j.at("learners").get<std::vector<std::string>>();
    for (const auto& row : j.at("pooled")) {
      std::vector<std::map<std::string, double>> perm;
      for (const auto& m : row) {
        std::map<std::string, double> metrics;
        for (const auto& [k, v] : m.items()) metrics[k] = v.is_null() ? std::nan("") : v.get<double>();
        perm.push_back(std::move(metrics));
      }
      b.pooled.push_back(std::move(perm));
    }
    return b;
  } catch (const Json::exception&) {
    return std::nullopt;  // a torn or foreign file is recomputed, never trusted
  }
}

}  // namespace neuromkl::config
