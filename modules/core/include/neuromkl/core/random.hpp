#pragma once
// The project's random numbers: a small portable generator (splitmix64) with its own uniform,
// normal and shuffle, so splits, permutations and simulated cohorts are the same with any
// standard library (std::*_distribution and std::shuffle are implementation-defined).
#include <cstdint>
#include <utility>
#include <vector>

namespace neuromkl {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t Next();
  std::uint64_t Below(std::uint64_t bound);  ///< uniform in [0, bound), no modulo bias
  double Uniform();                          ///< uniform in [0, 1), 53 random bits
  double Normal();                           ///< standard normal (Marsaglia's polar method)
  template <typename T>
  void Shuffle(std::vector<T>& v) {
    for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[static_cast<std::size_t>(Below(i))]);
  }

 private:
  std::uint64_t state_;
  double spare_ = 0;  ///< the polar method makes normals in pairs
  bool hasSpare_ = false;
};

}  // namespace neuromkl
