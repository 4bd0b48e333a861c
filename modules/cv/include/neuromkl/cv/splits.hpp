#pragma once
// Cross-validation splits. Every random choice takes the given seed (splitmix64 + Fisher-Yates,
// so splits are identical on every platform and standard library).
#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/core/random.hpp"
#include "neuromkl/learners/learner.hpp"

namespace neuromkl::cv {

enum class Scheme { KFold, StratifiedKFold, RepeatedKFold, LeaveOneOut, LeaveOneGroupOut, GroupKFold, Custom };

struct SplitSpec {
  Scheme scheme = Scheme::StratifiedKFold;
  int k = 5;
  int repeats = 1;
};

struct Fold {
  std::vector<int> train, test;  ///< indices into the subjects being split, ascending
  int repeat = 0;                ///< repeated k-fold: which repetition
};

/// Splits n = y.size() subjects. `groups` (one label per subject) is needed by the group schemes,
/// `custom` (a fold label per subject) by the custom scheme. Stratification: by class for
/// classification, by target quantile bins of size k for regression. Repeated k-fold is stratified.
/// InputError naming `where` when the scheme cannot be applied (too few subjects of a class for k,
/// one group only, fewer groups than k, ...).
std::vector<Fold> MakeFolds(const SplitSpec& spec, learners::Task task, const Eigen::VectorXd& y,
                            const std::vector<std::string>& groups, const std::vector<std::string>& custom, std::uint64_t seed,
                            const std::string& where);

/// Seed of an independent stream derived from (seed, stream), e.g. (study seed, permutation index).
std::uint64_t DeriveSeed(std::uint64_t seed, std::uint64_t stream);

/// A permutation of 0..n-1 that only exchanges subjects within the same group (all subjects form
/// one group when `groups` is empty).
std::vector<int> PermuteWithinGroups(int n, const std::vector<std::string>& groups, std::uint64_t seed);

}  // namespace neuromkl::cv
