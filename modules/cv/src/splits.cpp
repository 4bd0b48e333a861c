#include "neuromkl/cv/splits.hpp"

#include <algorithm>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"

namespace neuromkl::cv {

std::uint64_t DeriveSeed(std::uint64_t seed, std::uint64_t stream) {
  Rng r(seed ^ (stream * 0xD1B54A32D192ED03ULL + 0x8CB92BA72F3D8DD7ULL));
  return r.Next();
}

namespace {

std::vector<Fold> FromAssignment(const std::vector<int>& foldOf, int k, int repeat) {
  std::vector<Fold> folds(static_cast<std::size_t>(k));
  for (std::size_t i = 0; i < foldOf.size(); ++i)
    for (int f = 0; f < k; ++f) (f == foldOf[i] ? folds[static_cast<std::size_t>(f)].test : folds[static_cast<std::size_t>(f)].train).push_back(static_cast<int>(i));
  for (auto& f : folds) f.repeat = repeat;
  folds.erase(std::remove_if(folds.begin(), folds.end(), [](const Fold& f) { return f.test.empty(); }), folds.end());
  return folds;
}

std::vector<int> KFoldAssignment(int n, int k, Rng& rng) {
  std::vector<int> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  rng.Shuffle(order);
  std::vector<int> foldOf(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) foldOf[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])] = i % k;
  return foldOf;
}

std::vector<int> StratifiedAssignment(learners::Task task, const Eigen::VectorXd& y, int k, Rng& rng, const std::string& where) {
  const int n = static_cast<int>(y.size());
  std::vector<int> foldOf(static_cast<std::size_t>(n));
  if (task == learners::Task::Classification || task == learners::Task::Multiclass) {
    // Each class shuffled and dealt round-robin, continuing where the previous class stopped
    // (binary: positive then negative; multiclass: classes 0, 1, ...).
    std::vector<double> classes = {1.0, -1.0};
    if (task == learners::Task::Multiclass) {
      classes.clear();
      for (int c = 0; c <= static_cast<int>(y.size() > 0 ? y.maxCoeff() : -1); ++c) classes.push_back(c);
    }
    int next = 0;
    for (double cls : classes) {
      std::vector<int> members;
      for (int i = 0; i < n; ++i)
        if (y[i] == cls) members.push_back(i);
      if (!members.empty() && static_cast<int>(members.size()) < k)
        throw InputError("cv:ClassTooSmall", where,
                         fmt::format("class {} has {} subjects, fewer than k = {} folds; use a smaller k or leave_one_out",
                                     task == learners::Task::Multiclass ? std::to_string(static_cast<int>(cls)) : cls > 0 ? "positive" : "negative",
                                     members.size(), k));
      rng.Shuffle(members);
      for (int i : members) foldOf[static_cast<std::size_t>(i)] = next++ % k;
    }
  } else {
    // Regression: sort by target; each consecutive block of k subjects gets a random permutation
    // of the folds, so every fold spans the whole target range.
    std::vector<int> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return y[a] < y[b]; });
    for (int start = 0; start < n; start += k) {
      std::vector<int> labels(static_cast<std::size_t>(k));
      std::iota(labels.begin(), labels.end(), 0);
      rng.Shuffle(labels);
      for (int i = start; i < std::min(n, start + k); ++i) foldOf[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])] = labels[static_cast<std::size_t>(i - start)];
    }
  }
  return foldOf;
}

}  // namespace

std::vector<Fold> MakeFolds(const SplitSpec& spec, learners::Task task, const Eigen::VectorXd& y, const std::vector<std::string>& groups,
                            const std::vector<std::string>& custom, std::uint64_t seed, const std::string& where) {
  const int n = static_cast<int>(y.size());
  Rng rng(seed);
  auto needK = [&](int units, const char* what) {
    if (spec.k > units)
      throw InputError("cv:TooFew", where, fmt::format("k = {} folds need at least {} {}, found {}", spec.k, spec.k, what, units));
  };
  switch (spec.scheme) {
    case Scheme::KFold:
      needK(n, "subjects");
      return FromAssignment(KFoldAssignment(n, spec.k, rng), spec.k, 0);
    case Scheme::StratifiedKFold:
      needK(n, "subjects");
      return FromAssignment(StratifiedAssignment(task, y, spec.k, rng, where), spec.k, 0);
    case Scheme::RepeatedKFold: {
      needK(n, "subjects");
      std::vector<Fold> all;
      for (int r = 0; r < spec.repeats; ++r) {
        Rng rr(DeriveSeed(seed, static_cast<std::uint64_t>(r)));
        auto folds = FromAssignment(StratifiedAssignment(task, y, spec.k, rr, where), spec.k, r);
        all.insert(all.end(), folds.begin(), folds.end());
      }
      return all;
    }
    case Scheme::LeaveOneOut: {
      std::vector<int> foldOf(static_cast<std::size_t>(n));
      std::iota(foldOf.begin(), foldOf.end(), 0);
      return FromAssignment(foldOf, n, 0);
    }
    case Scheme::LeaveOneGroupOut:
    case Scheme::GroupKFold:
    case Scheme::Custom: {
      const auto& labels = spec.scheme == Scheme::Custom ? custom : groups;
      if (static_cast<int>(labels.size()) != n)
        throw InputError("cv:NoGroups", where, spec.scheme == Scheme::Custom ? "the custom scheme needs a fold column" : "the group schemes need a group column");
      std::map<std::string, int> unit;  // sorted: deterministic
      for (const auto& g : labels) unit.emplace(g, 0);
      int u = 0;
      for (auto& [_, idx] : unit) idx = u++;
      if (u < 2)
        throw InputError("cv:OneGroup", where,
                         fmt::format("the {} column has a single value (\"{}\"): nothing to hold out", spec.scheme == Scheme::Custom ? "fold" : "group",
                                     unit.begin()->first));
      std::vector<int> foldOf(static_cast<std::size_t>(n));
      if (spec.scheme != Scheme::GroupKFold) {
        for (int i = 0; i < n; ++i) foldOf[static_cast<std::size_t>(i)] = unit[labels[static_cast<std::size_t>(i)]];
        return FromAssignment(foldOf, u, 0);
      }
      needK(u, "groups");
      // Group k-fold: groups in random order, each to the currently smallest fold (balanced sizes).
      std::vector<int> order(static_cast<std::size_t>(u));
      std::iota(order.begin(), order.end(), 0);
      rng.Shuffle(order);
      std::vector<int> size(static_cast<std::size_t>(u), 0), foldOfUnit(static_cast<std::size_t>(u)), load(static_cast<std::size_t>(spec.k), 0);
      for (int i = 0; i < n; ++i) ++size[static_cast<std::size_t>(unit[labels[static_cast<std::size_t>(i)]])];
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return size[static_cast<std::size_t>(a)] > size[static_cast<std::size_t>(b)]; });
      for (int g : order) {
        const auto f = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
        foldOfUnit[static_cast<std::size_t>(g)] = f;
        load[static_cast<std::size_t>(f)] += size[static_cast<std::size_t>(g)];
      }
      for (int i = 0; i < n; ++i) foldOf[static_cast<std::size_t>(i)] = foldOfUnit[static_cast<std::size_t>(unit[labels[static_cast<std::size_t>(i)]])];
      return FromAssignment(foldOf, spec.k, 0);
    }
  }
  return {};
}

std::vector<int> PermuteWithinGroups(int n, const std::vector<std::string>& groups, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<int> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  if (groups.empty()) {
    rng.Shuffle(perm);
    return perm;
  }
  std::map<std::string, std::vector<int>> members;
  for (int i = 0; i < n; ++i) members[groups[static_cast<std::size_t>(i)]].push_back(i);
  for (auto& [_, idx] : members) {
    std::vector<int> shuffled = idx;
    rng.Shuffle(shuffled);
    for (std::size_t k = 0; k < idx.size(); ++k) perm[static_cast<std::size_t>(idx[k])] = shuffled[k];
  }
  return perm;
}

}  // namespace neuromkl::cv
