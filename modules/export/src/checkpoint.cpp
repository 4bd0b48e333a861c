#include "neuromkl/export/checkpoint.hpp"

#include <cmath>

#include "json_format.hpp"
#include "neuromkl/core/files.hpp"

namespace neuromkl::exporting {

void SavePermutationBlock(const std::string& path, const PermutationBlock& b) {
  Json j = {{"format", "neuromkl-permutation-block"}, {"key", b.key}, {"first", b.first}, {"learners", b.learners}, {"pooled", Json::array()}};
  for (const auto& perm : b.pooled) {
    Json row = Json::array();
    for (const auto& metrics : perm) {
      Json m = Json::object();
      for (const auto& [k, v] : metrics) m[k] = Num(v);
      row.push_back(m);
    }
    j["pooled"].push_back(row);
  }
  j["shares"] = Json::array();
  for (const auto& perm : b.shares) {
    Json row = Json::array();
    for (const auto& learner : perm) {
      Json values = Json::array();
      for (double v : learner) values.push_back(Num(v));
      row.push_back(values);
    }
    j["shares"].push_back(row);
  }
  WriteFileAtomically(path, j.dump() + "\n", "checkpoint");  // doubles round-trip exactly (shortest representation)
}

std::optional<PermutationBlock> LoadPermutationBlock(const std::string& path, const std::string& key) {
  const std::optional<std::string> text = TryReadText(path);
  if (!text) return std::nullopt;
  try {
    const Json j = Json::parse(*text);
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
    for (const auto& row : j.at("shares")) {
      std::vector<std::vector<double>> perm;
      for (const auto& learner : row) {
        std::vector<double> values;
        for (const auto& v : learner) values.push_back(v.is_null() ? std::nan("") : v.get<double>());
        perm.push_back(std::move(values));
      }
      b.shares.push_back(std::move(perm));
    }
    if (b.shares.size() != b.pooled.size()) return std::nullopt;
    for (std::size_t i = 0; i < b.shares.size(); ++i)
      if (b.shares[i].size() != b.learners.size() || b.pooled[i].size() != b.learners.size()) return std::nullopt;
    return b;
  } catch (const Json::exception&) {
    return std::nullopt;  // a torn or foreign file is recomputed, never trusted
  }
}

}  // namespace neuromkl::exporting
