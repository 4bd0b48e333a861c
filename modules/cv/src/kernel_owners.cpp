// Kernels held by several owners (kernel_owners.hpp). KernelShard executes a request on one owner's kernels with
// the per-kernel arithmetic of nested CV (fold_preparation.hpp, learners::OwnedStack); KernelOwners turns an
// operation into one request to every owner and adds or places their replies in owner order.
#include "neuromkl/cv/kernel_owners.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "fold_preparation.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/hash.hpp"
#include "neuromkl/core/npy.hpp"
#include "neuromkl/kernels/covariates.hpp"
#include "neuromkl/weights/weights.hpp"

namespace neuromkl::cv {

using namespace detail;

namespace {

enum Op : int {
  kPreprocessing = 1,
  kOpenFold,
  kSetScales,
  kCloseFold,
  kFacts,
  kCombine,
  kQuadratics,
  kProducts,
  kRootBounds,
  kTestBlocks,
  kSummed,
  kViewProducts,
  kSubjectWeights,
  kLargestSelfSimilarity,
  kSaveKernels,
  kTestProducts,
};

OwnerRequest Ask(int op, std::int64_t fold = 0, std::vector<std::int64_t> ints = {}, std::vector<double> reals = {}, std::string text = {}) {
  OwnerRequest r;
  r.op = op;
  r.fold = fold;
  r.ints = std::move(ints);
  r.reals = std::move(reals);
  r.text = std::move(text);
  return r;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::string line;
  for (const char c : text) {
    if (c == '\n') {
      lines.push_back(std::move(line));
      line.clear();
    } else {
      line += c;
    }
  }
  if (!line.empty()) lines.push_back(std::move(line));
  return lines;
}

Eigen::VectorXi Indices(const std::int64_t* data, std::size_t count) {
  Eigen::VectorXi v(static_cast<Eigen::Index>(count));
  for (std::size_t i = 0; i < count; ++i) v[static_cast<Eigen::Index>(i)] = static_cast<int>(data[i]);
  return v;
}

void Append(std::vector<std::int64_t>& out, const std::vector<int>& v) {
  out.push_back(static_cast<std::int64_t>(v.size()));
  out.insert(out.end(), v.begin(), v.end());
}

/// Reads a length-prefixed index list written by Append at `at` (advanced past it).
Eigen::VectorXi ReadIndices(const std::vector<std::int64_t>& ints, std::size_t& at) {
  if (at >= ints.size()) throw std::logic_error("owner request: index list missing");
  const auto count = static_cast<std::size_t>(ints[at++]);
  if (at + count > ints.size()) throw std::logic_error("owner request: index list truncated");
  Eigen::VectorXi v = Indices(ints.data() + at, count);
  at += count;
  return v;
}

std::vector<double> Packed(const Eigen::MatrixXd& K) {  // upper triangle, column by column
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(K.cols() * (K.cols() + 1) / 2));
  for (Eigen::Index j = 0; j < K.cols(); ++j) out.insert(out.end(), K.col(j).data(), K.col(j).data() + j + 1);
  return out;
}

void Unpack(const std::vector<double>& packed, Eigen::Index n, Eigen::MatrixXd& K) {
  K.resize(n, n);
  const double* p = packed.data();
  for (Eigen::Index j = 0; j < n; p += j + 1, ++j) {
    K.col(j).head(j + 1) = Eigen::Map<const Eigen::VectorXd>(p, j + 1);
    for (Eigen::Index i = 0; i < j; ++i) K(j, i) = K(i, j);
  }
}

}  // namespace

// ---------------- the owner's side ----------------

struct KernelShard::Fold {
  Eigen::VectorXi train, test;
  std::vector<kernels::FoldVectors> vectors;              ///< without covariates: this owner's kernels' fold vectors
  std::optional<kernels::FoldResidualiser> residualiser;  ///< with covariates
  Eigen::VectorXd scales;                                 ///< this owner's kernels (the fold's scales, ones without groups)
  // The prepared training kernels, made at the first operation that reads them:
  std::unique_ptr<FoldColumns> columns;  ///< without covariates: read in place from the kernels
  learners::KernelList copies, testCopies;  ///< with covariates: prepared and scaled copies (as nested CV copies them)
  std::unique_ptr<learners::OwnedStack> stack;
  Eigen::MatrixXd combined;  ///< the partial combination (reused)
  /// Below learners::kPackedStackBelow training subjects, the prepared test blocks once made (a grid search decides
  /// often on one fold; nested CV holds them so in one process too). Empty: not made yet.
  learners::KernelList tests;
};

std::vector<int> BlockOwners(std::size_t kernelCount, int owners, const std::vector<std::size_t>& blockStarts) {
  std::vector<int> ownerOf(kernelCount);
  std::size_t start = 0, next = 1;
  for (std::size_t j = 0; j < kernelCount; ++j) {
    while (next < blockStarts.size() && blockStarts[next] <= j) start = blockStarts[next++];
    ownerOf[j] = static_cast<int>((j - start) % static_cast<std::size_t>(owners));
  }
  return ownerOf;
}

namespace {
std::vector<Eigen::Index> DefaultGlobals(int owner, int owners, std::size_t count, std::vector<Eigen::Index> globals) {
  if (!globals.empty()) {
    if (globals.size() != count || !std::is_sorted(globals.begin(), globals.end()))
      throw std::logic_error(fmt::format("KernelShard: expected {} increasing global indices (one per kernel), got {}", count, globals.size()));
    return globals;
  }
  for (std::size_t k = 0; k < count; ++k) globals.push_back(static_cast<Eigen::Index>(static_cast<std::size_t>(owner) + k * static_cast<std::size_t>(owners)));
  return globals;
}
}  // namespace

KernelShard::KernelShard(int owner, int owners, learners::KernelList kernels, std::vector<Eigen::Index> globals)
    : owner_(owner), owners_(owners), kernels_(std::move(kernels)), globals_(DefaultGlobals(owner, owners, kernels_.size(), std::move(globals))) {}
KernelShard::KernelShard(int owner, int owners, kernels::CompactKernelList kernels, std::vector<Eigen::Index> globals)
    : owner_(owner), owners_(owners), compact_(std::move(kernels)), globals_(DefaultGlobals(owner, owners, compact_.size(), std::move(globals))) {}
KernelShard::~KernelShard() = default;

Eigen::Index KernelShard::LocalOf(Eigen::Index j) const {
  const auto it = std::lower_bound(globals_.begin(), globals_.end(), j);
  return it != globals_.end() && *it == j ? static_cast<Eigen::Index>(it - globals_.begin()) : -1;
}

std::size_t KernelShard::KernelCount() const { return compact_.empty() ? kernels_.size() : compact_.size(); }

void KernelShard::TakeKernels(learners::KernelList& kernels, kernels::CompactKernelList& compact) {
  if (!folds_.empty()) throw std::logic_error(fmt::format("owner {}: kernels taken with {} folds open", owner_, folds_.size()));
  for (auto& K : kernels_) kernels.push_back(std::move(K));
  for (auto& K : compact_.kernels) compact.kernels.push_back(std::move(K));
  if (!compact_.empty()) compact.centred = compact_.centred;
  kernels_.clear();
  compact_ = {};
  globals_.clear();
}

template <typename F>
decltype(auto) KernelShard::WithKernels(const F& f) const {
  return compact_.empty() ? f(kernels_) : f(compact_);
}

KernelShard::Fold& KernelShard::FoldOf(std::int64_t id) {
  const auto it = folds_.find(id);
  if (it == folds_.end()) throw std::logic_error(fmt::format("owner {}: no open fold {}", owner_, id));
  return *it->second;
}

OwnerReply KernelShard::Execute(const OwnerRequest& request) {
  try {
    return Run(request);
  } catch (...) {
    OwnerReply failed;
    failed.error = SerialiseError(std::current_exception());
    return failed;
  }
}

OwnerReply KernelShard::Run(const OwnerRequest& request) {
  OwnerReply reply;
  std::vector<double>& out = reply.values;
  const auto& ints = request.ints;
  const auto& reals = request.reals;
  const std::size_t local = KernelCount();
  const auto global = [&](std::size_t k) { return globals_.at(k); };
  // The positions in `which` (global kernel indices) of this owner's kernels, and their local indices.
  const auto mine = [&](const std::vector<Eigen::Index>& which, std::vector<Eigen::Index>& localIndex) {
    localIndex.clear();
    for (const Eigen::Index j : which)
      if (const Eigen::Index k = LocalOf(j); k >= 0) localIndex.push_back(k);
  };
  const auto whichFrom = [&](std::size_t at) {
    std::vector<Eigen::Index> which;
    for (std::size_t i = at; i < ints.size(); ++i) which.push_back(static_cast<Eigen::Index>(ints[i]));
    return which;
  };
  // The stack of the fold's prepared training kernels (built once per fold).
  const auto stackOf = [&](Fold& f) -> const learners::OwnedStack& {
    if (f.stack) return *f.stack;
    if (!f.residualiser) {
      WithKernels([&](const auto& kernels) { f.columns = std::make_unique<FoldColumns>(kernels, f.train, f.test, f.vectors, f.scales); });
      f.stack = std::make_unique<learners::OwnedStack>(*f.columns);
      return *f.stack;
    }
    f.copies.resize(local);
    f.testCopies.resize(local);
    WithKernels([&](const auto& kernels) {
      tbb::parallel_for(std::size_t{0}, local, [&](std::size_t k) {
        kernels::FoldKernel fk = PrepareResidualised(kernels[k], f.train, f.test, *f.residualiser, preprocessing_);
        if (!preprocessing_.kernelGroups.empty()) {  // as PrepareFoldInto: scaled when the study has groups
          fk.train *= f.scales[static_cast<Eigen::Index>(k)];
          fk.testTrain *= f.scales[static_cast<Eigen::Index>(k)];
        }
        f.copies[k] = std::move(fk.train);
        f.testCopies[k] = std::move(fk.testTrain);
      });
    });
    f.stack = std::make_unique<learners::OwnedStack>(f.copies);
    return *f.stack;
  };

  switch (request.op) {
    case kPreprocessing: {
      // ints: centre, normalise, groups (count, values), covariate design rows, columns, fit rows (count, values);
      // reals: the design, column-major.
      folds_.clear();
      Preprocessing pre;
      std::size_t at = 0;
      pre.centre = ints.at(at++) != 0;
      pre.normalise = ints.at(at++) != 0;
      for (const int g : ReadIndices(ints, at)) pre.kernelGroups.push_back(g);
      const auto rows = static_cast<Eigen::Index>(ints.at(at++)), cols = static_cast<Eigen::Index>(ints.at(at++));
      const Eigen::VectorXi fit = ReadIndices(ints, at);
      if (rows > 0) {
        auto covariates = std::make_shared<kernels::Covariates>();
        covariates->design = Eigen::Map<const Eigen::MatrixXd>(reals.data(), rows, cols);
        for (const int v : fit) covariates->fitRow.push_back(static_cast<char>(v));
        pre.covariates = std::move(covariates);
      }
      preprocessing_ = std::move(pre);
      break;
    }
    case kOpenFold: {
      // ints: train (count, values), test (count, values). Reply: the traces of this owner's prepared kernels when the
      // study weighs its sources (the fold's scales come from every kernel's).
      auto f = std::make_unique<Fold>();
      std::size_t at = 0;
      f->train = ReadIndices(ints, at);
      f->test = ReadIndices(ints, at);
      f->scales = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(local));
      const bool groups = !preprocessing_.kernelGroups.empty();
      if (!compact_.empty()) CheckStoreFits(compact_, preprocessing_);
      if (!preprocessing_.covariates) {
        f->vectors = WithKernels([&](const auto& kernels) { return AllFoldVectors(kernels, f->train, f->test, preprocessing_); });
        if (groups)
          for (const auto& v : f->vectors) out.push_back(v.Trace());
      } else {
        f->residualiser = kernels::MakeFoldResidualiser(*preprocessing_.covariates, f->train, f->test);
        if (!compact_.empty()) CheckShiftCancels(compact_, *f->residualiser);
        if (groups) {
          out.resize(local);
          WithKernels([&](const auto& kernels) {
            tbb::parallel_for(std::size_t{0}, local, [&](std::size_t k) {
              out[k] = PrepareResidualised(kernels[k], f->train, f->test, *f->residualiser, preprocessing_).train.trace();
            });
          });
        }
      }
      folds_[request.fold] = std::move(f);
      break;
    }
    case kSetScales: {  // reals: the fold's scales of every kernel
      Fold& f = FoldOf(request.fold);
      for (std::size_t k = 0; k < local; ++k) f.scales[static_cast<Eigen::Index>(k)] = reals.at(static_cast<std::size_t>(global(k)));
      break;
    }
    case kCloseFold:
      folds_.erase(request.fold);
      break;
    case kFacts: {  // reply: per kernel, finite (0 / 1) and not identically zero (0 / 1)
      // The answers of ValidateFitInput's check and ActiveKernels, from one pass over each prepared kernel.
      Fold& f = FoldOf(request.fold);
      std::vector<char> finite, nonzero;
      stackOf(f).Facts(finite, nonzero);
      for (std::size_t k = 0; k < local; ++k) {
        out.push_back(finite[k]);
        out.push_back(nonzero[k]);
      }
      break;
    }
    case kCombine: {  // reals: the weights of every kernel. Reply: the packed upper triangle of this owner's sum, or nothing.
      Fold& f = FoldOf(request.fold);
      Eigen::VectorXd w(static_cast<Eigen::Index>(local));
      bool any = false;
      for (std::size_t k = 0; k < local; ++k) {
        w[static_cast<Eigen::Index>(k)] = reals.at(static_cast<std::size_t>(global(k)));
        any |= w[static_cast<Eigen::Index>(k)] != 0.0;
      }
      if (!any) break;
      stackOf(f).Combine(w, f.combined);
      out = Packed(f.combined);
      break;
    }
    case kQuadratics: {  // ints: per-kernel path, columns of A, which...; reals: A. Reply: this owner's kernels of `which`.
      Fold& f = FoldOf(request.fold);
      const bool perKernel = ints.at(0) != 0;
      const auto cols = static_cast<Eigen::Index>(ints.at(1));
      std::vector<Eigen::Index> localIndex;
      mine(whichFrom(2), localIndex);
      if (localIndex.empty()) break;
      const Eigen::Map<const Eigen::MatrixXd> A(reals.data(), static_cast<Eigen::Index>(reals.size()) / std::max<Eigen::Index>(1, cols), cols);
      const Eigen::VectorXd q = stackOf(f).Quadratics(localIndex, A, perKernel);
      out.assign(q.data(), q.data() + q.size());
      break;
    }
    case kProducts: {  // ints: which; reals: v. Reply: K_j v (train values each) for this owner's kernels of `which`.
      Fold& f = FoldOf(request.fold);
      std::vector<Eigen::Index> localIndex;
      mine(whichFrom(0), localIndex);
      if (localIndex.empty()) break;
      const Eigen::MatrixXd G = stackOf(f).Products(localIndex, Eigen::Map<const Eigen::VectorXd>(reals.data(), static_cast<Eigen::Index>(reals.size())));
      out.assign(G.data(), G.data() + G.size());
      break;
    }
    case kRootBounds: {
      Fold& f = FoldOf(request.fold);
      std::vector<Eigen::Index> localIndex;
      mine(whichFrom(0), localIndex);
      for (const auto k : localIndex) out.push_back(stackOf(f).RootSpectralBound(k));
      break;
    }
    case kTestBlocks:  // ints: which. Reply: the prepared test blocks (test x train) of this owner's kernels of `which`.
    case kTestProducts: {  // ints: form, columns of C, which; reals: C. Reply: learners::TestProduct of each such block.
      Fold& f = FoldOf(request.fold);
      const bool products = request.op == kTestProducts;
      std::vector<Eigen::Index> localIndex;
      mine(whichFrom(products ? 2 : 0), localIndex);
      if (localIndex.empty()) break;
      const Eigen::Index cols = products ? static_cast<Eigen::Index>(ints.at(1)) : 0;
      const Eigen::MatrixXd C = products ? Eigen::MatrixXd(Eigen::Map<const Eigen::MatrixXd>(reals.data(), f.train.size(), cols)) : Eigen::MatrixXd();
      const auto size = static_cast<std::size_t>(f.test.size() * (products ? cols : f.train.size()));
      out.resize(size * localIndex.size());
      if (f.residualiser) stackOf(f);  // the copies hold the test blocks
      const bool hold = !f.residualiser && f.train.size() < learners::kPackedStackBelow;
      if (hold && f.tests.empty()) f.tests.resize(local);
      tbb::parallel_for(std::size_t{0}, localIndex.size(), [&](std::size_t i) {
        const auto k = static_cast<std::size_t>(localIndex[i]);
        Eigen::MatrixXd written;
        const Eigen::MatrixXd* block = &written;
        if (f.residualiser) {
          block = &f.testCopies[k];
        } else {
          Eigen::MatrixXd& target = hold ? f.tests[k] : written;
          if (target.size() == 0)
            WithKernels([&](const auto& kernels) {
              kernels::WritePreparedTestBlock(kernels[k], f.train, f.test, f.vectors[k], f.scales[static_cast<Eigen::Index>(k)], target);
            });
          block = &target;
        }
        const Eigen::MatrixXd value = products ? learners::TestProduct(*block, C, static_cast<int>(ints.at(0))) : *block;
        std::copy(value.data(), value.data() + value.size(), out.data() + i * size);
      });
      break;
    }
    case kSummed: {  // reply: this owner's sum of the prepared training (train x train) and test (test x train) blocks
      Fold& f = FoldOf(request.fold);
      const Eigen::Index l = f.train.size(), m = f.test.size();
      if (local == 0) break;
      out.assign(static_cast<std::size_t>(l * l + m * l), 0.0);
      Eigen::Map<Eigen::MatrixXd> sumTrain(out.data(), l, l), sumTest(out.data() + l * l, m, l);
      if (f.residualiser) {
        // As SumPreparedKernels: each kernel prepared (residualised, centred, normalised), scaled, added in order.
        constexpr std::size_t kWindow = 4;
        std::vector<kernels::FoldKernel> window(kWindow);
        for (std::size_t first = 0; first < local; first += kWindow) {
          const std::size_t count = std::min(kWindow, local - first);
          WithKernels([&](const auto& kernels) {
            tbb::parallel_for(std::size_t{0}, count,
                              [&](std::size_t w) { window[w] = PrepareResidualised(kernels[first + w], f.train, f.test, *f.residualiser, preprocessing_); });
          });
          for (std::size_t w = 0; w < count; ++w) {
            const double g = f.scales[static_cast<Eigen::Index>(first + w)];
            if (g != 1.0) {
              window[w].train *= g;
              window[w].testTrain *= g;
            }
            sumTrain.noalias() += window[w].train;
            sumTest.noalias() += window[w].testTrain;
          }
        }
        break;
      }
      // As PrepareSummedFold: each output column summed over the kernels in order.
      WithKernels([&](const auto& kernels) {
        tbb::parallel_for(tbb::blocked_range<Eigen::Index>(0, l, 8), [&](const tbb::blocked_range<Eigen::Index>& cols) {
          for (Eigen::Index b = cols.begin(); b != cols.end(); ++b) {
            double* outTrain = sumTrain.col(b).data();
            double* outTest = sumTest.col(b).data();
            for (std::size_t k = 0; k < local; ++k) {
              const kernels::FoldVectors& v = f.vectors[k];
              const double g = f.scales[static_cast<Eigen::Index>(k)];
              const auto* col = kernels[k].col(f.train[b]).data();
              const double cb = v.colMean[b], ib = v.invTrain[b], grand = v.grand;
              for (Eigen::Index a = 0; a < l; ++a)
                outTrain[a] += kernels::PreparedEntry(static_cast<double>(col[f.train[a]]), cb, v.colMean[a], grand, v.invTrain[a], ib, g);
              for (Eigen::Index i = 0; i < m; ++i)
                outTest[i] += kernels::PreparedEntry(static_cast<double>(col[f.test[i]]), cb, v.testMean[i], grand, v.invTest[i], ib, g);
            }
          }
        });
      });
      break;
    }
    case kViewProducts: {  // ints: columns of A, which; reals: a scale per kernel of `which`, A. Reply: scale x K~ A of this owner's.
      Fold& f = FoldOf(request.fold);
      const auto cols = static_cast<Eigen::Index>(ints.at(0));
      const std::vector<Eigen::Index> which = whichFrom(1);
      std::vector<std::size_t> positions;  // in `which`, of this owner's kernels
      for (std::size_t i = 0; i < which.size(); ++i)
        if (LocalOf(which[i]) >= 0) positions.push_back(i);
      if (positions.empty()) break;
      const Eigen::Map<const Eigen::MatrixXd> A(reals.data() + which.size(), f.train.size(), cols);
      const auto size = static_cast<std::size_t>(f.train.size() * cols);
      out.resize(size * positions.size());
      // As FoldKernelView::Products, kernels side by side.
      tbb::parallel_for(std::size_t{0}, positions.size(), [&](std::size_t i) {
        const auto k = static_cast<std::size_t>(LocalOf(which[positions[i]]));
        const double scale = reals[positions[i]];
        const Eigen::MatrixXd P = WithKernels([&](const auto& kernels) -> Eigen::MatrixXd {
          if (f.residualiser) return PrepareFoldKernelOf(kernels[k], f.train, f.test, preprocessing_, scale).train * A;
          Eigen::MatrixXd product = kernels::PreparedProducts(kernels[k], f.train, f.vectors[k], A);
          if (scale != 1.0) product *= scale;
          return product;
        });
        std::copy(P.data(), P.data() + P.size(), out.data() + i * size);
      });
      break;
    }
    case kSubjectWeights: {  // ints: train, test; reals: coef (train), beta (every kernel). Reply: D's columns of this owner's kernels.
      std::size_t at = 0;
      const Eigen::VectorXi train = ReadIndices(ints, at), test = ReadIndices(ints, at);
      weights::FoldModel model;
      model.train.assign(train.data(), train.data() + train.size());
      model.test.assign(test.data(), test.data() + test.size());
      model.coef = Eigen::Map<const Eigen::VectorXd>(reals.data(), train.size());
      model.beta.resize(static_cast<Eigen::Index>(local));
      for (std::size_t k = 0; k < local; ++k) model.beta[static_cast<Eigen::Index>(k)] = reals.at(static_cast<std::size_t>(train.size() + global(k)));
      if (local == 0) break;
      const Eigen::MatrixXd D = WithKernels([&](const auto& kernels) {
        return weights::SubjectWeights(kernels, model, preprocessing_.centre, preprocessing_.normalise, preprocessing_.covariates.get());
      });
      out.assign(D.data(), D.data() + D.size());
      break;
    }
    case kLargestSelfSimilarity: {  // ints: train. Reply: per kernel, its largest centred training self-similarity.
      std::size_t at = 0;
      const Eigen::VectorXi train = ReadIndices(ints, at);
      out.resize(local);
      WithKernels([&](const auto& kernels) {
        tbb::parallel_for(std::size_t{0}, local, [&](std::size_t k) {
          out[k] = LargestCentredSelfSimilarity(kernels[k], train, preprocessing_);
        });
      });
      break;
    }
    case kSaveKernels: {  // text: the folder, then one file name per kernel (every kernel's). Reply text: checksums, one per line.
      const std::vector<std::string> lines = Lines(request.text);
      if (lines.empty()) throw std::logic_error("owner request: no folder to save the kernels in");
      std::vector<std::string> hashes(local);
      tbb::parallel_for(std::size_t{0}, local, [&](std::size_t k) {
        const std::string path = lines[0] + "/" + lines.at(1 + static_cast<std::size_t>(global(k)));
        if (compact_.empty()) WriteNpy(path, kernels_[k]);
        else WriteNpy(path, compact_.kernels[k]);
        hashes[k] = HashFile(path).Hex();
      });
      for (const auto& h : hashes) reply.text += h + "\n";
      break;
    }
    default:
      throw std::logic_error(fmt::format("owner {}: unknown request {}", owner_, request.op));
  }
  return reply;
}

// ---------------- owner 0's side ----------------

KernelOwners::KernelOwners(int owners, std::size_t kernelCount, Eigen::Index subjects, bool compact, bool centred, std::vector<int> ownerOf)
    : owners_(owners),
      count_(kernelCount),
      ownerOf_(ownerOf.empty() ? BlockOwners(kernelCount, std::max(owners, 1), {}) : std::move(ownerOf)),
      held_(static_cast<std::size_t>(std::max(owners, 1))),
      subjects_(subjects),
      heldRows_(subjects),
      compact_(compact),
      centred_(centred) {
  if (owners < 1) throw std::logic_error("KernelOwners: at least one owner");
  if (ownerOf_.size() != count_) throw std::logic_error("KernelOwners: one owner per kernel");
  for (std::size_t j = 0; j < count_; ++j) {
    if (ownerOf_[j] < 0 || ownerOf_[j] >= owners) throw std::logic_error(fmt::format("KernelOwners: kernel {} on owner {} of {}", j, ownerOf_[j], owners));
    held_[static_cast<std::size_t>(ownerOf_[j])].push_back(j);
  }
}

KernelOwners::~KernelOwners() = default;

void KernelOwners::Request(const OwnerRequest& request, const std::function<void(int, OwnerReply&)>& consume) const {
  std::string failure;
  int failedOwner = -1;
  {
    const std::lock_guard<std::mutex> hold(lock_);
    ++requests_;
    const auto start = std::chrono::steady_clock::now();
    // Isolated: while this thread waits inside the request (an owner's parallel loop, a transport), it never picks up
    // another task of its arena that would send a request itself and wait for the lock it holds.
    tbb::this_task_arena::isolate([&] {
      Exchange(request, [&](int owner, OwnerReply& reply) {
        if (failedOwner >= 0) return;
        if (!reply.error.empty()) {
          failure = std::move(reply.error);
          failedOwner = owner;
          return;
        }
        try {  // every reply is still received (a transport's messages must all be read), the failure thrown after
          consume(owner, reply);
        } catch (...) {
          failure = SerialiseError(std::current_exception());
          failedOwner = owner;
        }
      });
    });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    requestSeconds_ += seconds;
    auto& kind = byKind_[request.op];
    ++kind.first;
    kind.second += seconds;
  }
  if (failedOwner >= 0) ThrowSerialisedError(failure, fmt::format("kernel owner {}", failedOwner));
}

std::vector<Eigen::Index> KernelOwners::Every() const {
  std::vector<Eigen::Index> every(count_);
  std::iota(every.begin(), every.end(), Eigen::Index{0});
  return every;
}

std::vector<double> KernelOwners::SumOfReplies(const OwnerRequest& request) const {
  std::vector<double> sum;
  Request(request, [&](int, OwnerReply& reply) {
    if (reply.values.empty()) return;  // nothing of this owner's is in the sum
    if (sum.empty()) {
      sum = std::move(reply.values);
      return;
    }
    if (reply.values.size() != sum.size()) throw std::logic_error("KernelOwners: owners disagree on the size of a sum");
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += reply.values[i];
  });
  return sum;
}

std::vector<std::vector<double>> KernelOwners::PerKernel(const OwnerRequest& request, const std::vector<Eigen::Index>& which,
                                                         std::size_t valuesPerKernel) const {
  // Owner p's reply holds its kernels of `which` in the order of `which`.
  std::vector<std::vector<std::size_t>> positions(static_cast<std::size_t>(owners_));
  for (std::size_t i = 0; i < which.size(); ++i) positions[static_cast<std::size_t>(OwnerOf(static_cast<std::size_t>(which[i])))].push_back(i);
  std::vector<std::vector<double>> out(which.size());
  Request(request, [&](int owner, OwnerReply& reply) {
    const auto& mine = positions[static_cast<std::size_t>(owner)];
    if (reply.values.size() != mine.size() * valuesPerKernel)
      throw std::logic_error(fmt::format("kernel owner {}: {} values for {} kernels of {}", owner, reply.values.size(), mine.size(), valuesPerKernel));
    for (std::size_t i = 0; i < mine.size(); ++i)
      out[mine[i]].assign(reply.values.begin() + static_cast<std::ptrdiff_t>(i * valuesPerKernel),
                          reply.values.begin() + static_cast<std::ptrdiff_t>((i + 1) * valuesPerKernel));
  });
  return out;
}

std::map<std::string, std::pair<long, double>> KernelOwners::requestsByKind() const {
  static const char* const names[] = {"",           "preprocessing", "open_fold", "set_scales",  "close_fold",     "facts",
                                      "combine",    "quadratics",    "products",  "root_bounds", "test_blocks",    "summed",
                                      "view_products", "subject_weights", "largest_self_similarity", "save_kernels", "test_products"};
  std::map<std::string, std::pair<long, double>> out;
  const std::lock_guard<std::mutex> hold(lock_);
  for (const auto& [op, v] : byKind_) out[op > 0 && op < static_cast<int>(std::size(names)) ? names[op] : std::to_string(op)] = v;
  return out;
}

void KernelOwners::SelectRows(const std::vector<int>& rows) {
  for (const int r : rows)
    if (r < 0 || r >= heldRows_) throw std::logic_error(fmt::format("KernelOwners::SelectRows: row {} of {}", r, heldRows_));
  rows_ = rows;
  subjects_ = static_cast<Eigen::Index>(rows.size());
}

std::vector<int> KernelOwners::Rows(const std::vector<int>& subjects) const {
  if (rows_.empty()) return subjects;
  std::vector<int> out;
  out.reserve(subjects.size());
  for (const int i : subjects) out.push_back(rows_.at(static_cast<std::size_t>(i)));
  return out;
}

void KernelOwners::SetPreprocessing(const Preprocessing& preprocessing) {
  if (!preprocessing.kernelGroups.empty() && preprocessing.kernelGroups.size() != count_)
    throw InputError("cv:KernelGroups", "kernel groups", fmt::format("{} kernel groups for {} kernels", preprocessing.kernelGroups.size(), count_));
  OwnerRequest request = Ask(kPreprocessing, 0, {preprocessing.centre ? 1 : 0, preprocessing.normalise ? 1 : 0}, {});
  Append(request.ints, preprocessing.kernelGroups);
  // The design's rows are subjects; the owners index it by their rows (rows no subject maps to are never read).
  const kernels::Covariates* c = preprocessing.covariates.get();
  if (c && c->design.rows() != subjects_)
    throw std::logic_error(fmt::format("KernelOwners::SetPreprocessing: {} design rows for {} subjects", c->design.rows(), subjects_));
  Eigen::MatrixXd design;
  std::vector<int> fit;
  if (c) {
    design = Eigen::MatrixXd::Zero(heldRows_, c->design.cols());
    if (!c->fitRow.empty()) fit.assign(static_cast<std::size_t>(heldRows_), 0);
    for (Eigen::Index i = 0; i < subjects_; ++i) {
      const Eigen::Index row = rows_.empty() ? i : rows_[static_cast<std::size_t>(i)];
      design.row(row) = c->design.row(i);
      if (!c->fitRow.empty()) fit[static_cast<std::size_t>(row)] = c->fitRow[static_cast<std::size_t>(i)];
    }
  }
  request.ints.push_back(design.rows());
  request.ints.push_back(design.cols());
  Append(request.ints, fit);
  request.reals.assign(design.data(), design.data() + design.size());
  Request(request, [](int, OwnerReply&) {});
  preprocessing_ = preprocessing;
}

std::shared_ptr<OwnedFold> KernelOwners::OpenFold(const std::vector<int>& train, const std::vector<int>& test) const {
  const std::int64_t id = nextFold_++;
  OwnerRequest request = Ask(kOpenFold, id, {}, {});
  Append(request.ints, Rows(train));
  Append(request.ints, Rows(test));
  const bool groups = !preprocessing_.kernelGroups.empty();
  std::vector<double> traces(count_, 0.0);
  const auto close = [&] {
    try {
      Request(Ask(kCloseFold, id, {}, {}), [](int, OwnerReply&) {});
    } catch (...) {  // the open's failure is the one reported
    }
  };
  Eigen::VectorXd scales = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(count_));
  try {
    Request(request, [&](int owner, OwnerReply& reply) {
      if (!groups) return;
      for (std::size_t k = 0; k < reply.values.size(); ++k) traces.at(held_.at(static_cast<std::size_t>(owner)).at(k)) = reply.values[k];
    });
    if (groups) {
      scales = GroupScales(traces, preprocessing_.kernelGroups);
      Request(Ask(kSetScales, id, {}, std::vector<double>(scales.data(), scales.data() + scales.size())), [](int, OwnerReply&) {});
    }
  } catch (...) {
    close();
    throw;
  }
  return std::make_shared<OwnedFold>(*this, id, static_cast<Eigen::Index>(train.size()), static_cast<Eigen::Index>(test.size()), std::move(scales));
}

Eigen::MatrixXd KernelOwners::SubjectWeights(const weights::FoldModel& model) const {
  OwnerRequest request = Ask(kSubjectWeights, 0, {}, {});
  Append(request.ints, Rows(model.train));
  Append(request.ints, Rows(model.test));
  request.reals.assign(model.coef.data(), model.coef.data() + model.coef.size());
  request.reals.insert(request.reals.end(), model.beta.data(), model.beta.data() + model.beta.size());
  Eigen::MatrixXd D(subjects_, static_cast<Eigen::Index>(count_));
  Request(request, [&](int owner, OwnerReply& reply) {
    // Columns over the owners' rows; subject i is row rows_[i].
    const auto columns = static_cast<Eigen::Index>(reply.values.size()) / std::max<Eigen::Index>(1, heldRows_);
    const Eigen::Map<const Eigen::MatrixXd> part(reply.values.data(), heldRows_, columns);
    for (Eigen::Index k = 0; k < columns; ++k)
      for (Eigen::Index i = 0; i < subjects_; ++i)
        D(i, static_cast<Eigen::Index>(held_.at(static_cast<std::size_t>(owner)).at(static_cast<std::size_t>(k)))) = part(rows_.empty() ? i : rows_[static_cast<std::size_t>(i)], k);
  });
  return D;
}

Eigen::VectorXd KernelOwners::LargestTrainingSelfSimilarity(const std::vector<int>& train) const {
  OwnerRequest request = Ask(kLargestSelfSimilarity, 0, {}, {});
  Append(request.ints, Rows(train));
  const auto values = PerKernel(request, Every(), 1);
  Eigen::VectorXd out(static_cast<Eigen::Index>(count_));
  for (std::size_t j = 0; j < count_; ++j) out[static_cast<Eigen::Index>(j)] = values[j][0];
  return out;
}

std::vector<std::string> KernelOwners::SaveKernels(const std::string& folder, const std::vector<std::string>& files) const {
  if (files.size() != count_) throw std::logic_error("KernelOwners::SaveKernels: one file name per kernel");
  OwnerRequest request = Ask(kSaveKernels, 0, {}, {}, folder + "\n");
  for (const auto& f : files) request.text += f + "\n";
  std::vector<std::string> hashes(count_);
  Request(request, [&](int owner, OwnerReply& reply) {
    const std::vector<std::string> mine = Lines(reply.text);
    for (std::size_t k = 0; k < mine.size(); ++k) hashes.at(held_.at(static_cast<std::size_t>(owner)).at(k)) = mine[k];
  });
  return hashes;
}

OwnedFold::OwnedFold(const KernelOwners& owners, std::int64_t id, Eigen::Index train, Eigen::Index test, Eigen::VectorXd scales)
    : owners_(owners), id_(id), train_(train), test_(test), scales_(std::move(scales)) {}

OwnedFold::~OwnedFold() {
  try {
    owners_.Request(Ask(kCloseFold, id_, {}, {}), [](int, OwnerReply&) {});
  } catch (...) {  // a destructor does not throw; the owners' failure, if any, was reported by the request that met it
  }
}

void OwnedFold::Combine(const Eigen::VectorXd& weights, Eigen::MatrixXd& out) const {
  if (weights.size() != static_cast<Eigen::Index>(KernelCount())) throw std::logic_error("OwnedFold::Combine: one weight per kernel");
  const std::vector<double> sum = owners_.SumOfReplies(Ask(kCombine, id_, {}, std::vector<double>(weights.data(), weights.data() + weights.size())));
  if (sum.empty()) {
    out = Eigen::MatrixXd::Zero(train_, train_);
    return;
  }
  Unpack(sum, train_, out);
}

Eigen::VectorXd OwnedFold::Quadratics(const std::vector<Eigen::Index>& which, const Eigen::MatrixXd& A, bool perKernel) const {
  OwnerRequest request = Ask(kQuadratics, id_, {perKernel ? 1 : 0, A.cols()}, std::vector<double>(A.data(), A.data() + A.size()));
  request.ints.insert(request.ints.end(), which.begin(), which.end());
  const auto values = owners_.PerKernel(request, which, 1);
  Eigen::VectorXd q(static_cast<Eigen::Index>(which.size()));
  for (std::size_t i = 0; i < which.size(); ++i) q[static_cast<Eigen::Index>(i)] = values[i][0];
  return q;
}

Eigen::MatrixXd OwnedFold::Products(const std::vector<Eigen::Index>& which, const Eigen::VectorXd& v) const {
  OwnerRequest request = Ask(kProducts, id_, {which.begin(), which.end()}, std::vector<double>(v.data(), v.data() + v.size()));
  const auto values = owners_.PerKernel(request, which, static_cast<std::size_t>(train_));
  Eigen::MatrixXd G(train_, static_cast<Eigen::Index>(which.size()));
  for (std::size_t i = 0; i < which.size(); ++i) G.col(static_cast<Eigen::Index>(i)) = Eigen::Map<const Eigen::VectorXd>(values[i].data(), train_);
  return G;
}

Eigen::VectorXd OwnedFold::RootSpectralBounds(const std::vector<Eigen::Index>& which) const {
  const auto values = owners_.PerKernel(Ask(kRootBounds, id_, {which.begin(), which.end()}, {}), which, 1);
  Eigen::VectorXd b(static_cast<Eigen::Index>(which.size()));
  for (std::size_t i = 0; i < which.size(); ++i) b[static_cast<Eigen::Index>(i)] = values[i][0];
  return b;
}

void OwnedFold::Facts() const {
  if (factsKnown_) return;
  const auto values = owners_.PerKernel(Ask(kFacts, id_, {}, {}), owners_.Every(), 2);
  firstNonFinite_ = -1;
  nonZero_.clear();
  for (std::size_t j = 0; j < values.size(); ++j) {
    if (values[j][0] == 0.0 && firstNonFinite_ < 0) firstNonFinite_ = static_cast<Eigen::Index>(j);
    if (values[j][1] != 0.0) nonZero_.push_back(static_cast<Eigen::Index>(j));
  }
  factsKnown_ = true;
}

Eigen::Index OwnedFold::FirstNonFinite() const {
  Facts();
  return firstNonFinite_;
}

std::vector<Eigen::Index> OwnedFold::NonZero() const {
  Facts();
  return nonZero_;
}

learners::KernelList OwnedFold::TestBlocks(const std::vector<Eigen::Index>& which) const {
  const auto values = owners_.PerKernel(Ask(kTestBlocks, id_, {which.begin(), which.end()}, {}), which, static_cast<std::size_t>(test_ * train_));
  learners::KernelList blocks(which.size());
  for (std::size_t i = 0; i < which.size(); ++i) blocks[i] = Eigen::Map<const Eigen::MatrixXd>(values[i].data(), test_, train_);
  return blocks;
}

FoldKernels OwnedFold::Summed() const {
  std::vector<double> sum = owners_.SumOfReplies(Ask(kSummed, id_, {}, {}));
  FoldKernels out;
  sum.resize(static_cast<std::size_t>(train_ * train_ + test_ * train_), 0.0);
  out.train.emplace_back(Eigen::Map<const Eigen::MatrixXd>(sum.data(), train_, train_));
  out.test.emplace_back(Eigen::Map<const Eigen::MatrixXd>(sum.data() + train_ * train_, test_, train_));
  return out;
}

std::vector<Eigen::MatrixXd> OwnedFold::ViewProducts(const std::vector<Eigen::Index>& which, const Eigen::Ref<const Eigen::MatrixXd>& A,
                                                     const std::vector<double>& scales) const {
  OwnerRequest request = Ask(kViewProducts, id_, {A.cols()}, scales);
  request.ints.insert(request.ints.end(), which.begin(), which.end());
  for (Eigen::Index c = 0; c < A.cols(); ++c) request.reals.insert(request.reals.end(), A.col(c).data(), A.col(c).data() + A.rows());
  const auto values = owners_.PerKernel(request, which, static_cast<std::size_t>(train_ * A.cols()));
  std::vector<Eigen::MatrixXd> P;
  for (const auto& v : values) P.emplace_back(Eigen::Map<const Eigen::MatrixXd>(v.data(), train_, A.cols()));
  return P;
}

std::vector<Eigen::MatrixXd> OwnedFold::TestProducts(const std::vector<Eigen::Index>& which, const Eigen::MatrixXd& C, int form) const {
  OwnerRequest request = Ask(kTestProducts, id_, {form, C.cols()}, std::vector<double>(C.data(), C.data() + C.size()));
  request.ints.insert(request.ints.end(), which.begin(), which.end());
  const auto values = owners_.PerKernel(request, which, static_cast<std::size_t>(test_ * C.cols()));
  std::vector<Eigen::MatrixXd> P;
  for (const auto& v : values) P.emplace_back(Eigen::Map<const Eigen::MatrixXd>(v.data(), test_, C.cols()));
  return P;
}

learners::TestBlocks OwnedFoldColumns::Test(Eigen::MatrixXd& buffer) const {
  return {Count(), fold_->TestSize(),
          [this, &buffer](Eigen::Index k) -> const Eigen::MatrixXd& {
            buffer = std::move(fold_->TestBlocks({k})[0]);
            return buffer;
          },
          [this](const std::vector<Eigen::Index>& which, const Eigen::MatrixXd& C, int form) { return fold_->TestProducts(which, C, form); }};
}

// ---------------- owners in this process ----------------

namespace {
template <typename List>
std::vector<std::unique_ptr<KernelShard>> MakeShards(const List& kernels, int owners, const std::vector<std::size_t>& blockStarts) {
  const std::vector<int> ownerOf = BlockOwners(kernels.size(), owners, blockStarts);
  std::vector<std::unique_ptr<KernelShard>> shards;
  for (int p = 0; p < owners; ++p) {
    List share;
    std::vector<Eigen::Index> globals;
    for (std::size_t j = 0; j < kernels.size(); ++j) {
      if (ownerOf[j] != p) continue;
      globals.push_back(static_cast<Eigen::Index>(j));
      if constexpr (std::is_same_v<List, kernels::CompactKernelList>) share.kernels.push_back(kernels.kernels[j]);
      else share.push_back(kernels[j]);
    }
    if constexpr (std::is_same_v<List, kernels::CompactKernelList>) share.centred = kernels.centred;
    shards.push_back(std::make_unique<KernelShard>(p, owners, std::move(share), std::move(globals)));
  }
  return shards;
}
}  // namespace

LocalKernelOwners::LocalKernelOwners(const learners::KernelList& kernels, int owners, const std::vector<std::size_t>& blockStarts)
    : KernelOwners(owners, kernels.size(), kernels.empty() ? 0 : kernels[0].rows(), false, false, BlockOwners(kernels.size(), owners, blockStarts)),
      shards_(MakeShards(kernels, owners, blockStarts)) {}

LocalKernelOwners::LocalKernelOwners(const kernels::CompactKernelList& kernels, int owners, const std::vector<std::size_t>& blockStarts)
    : KernelOwners(owners, kernels.size(), kernels.empty() ? 0 : kernels[0].rows(), true, kernels.centred, BlockOwners(kernels.size(), owners, blockStarts)),
      shards_(MakeShards(kernels, owners, blockStarts)) {}

LocalKernelOwners::~LocalKernelOwners() = default;

int LocalKernelOwners::OpenFolds() const {
  int open = 0;
  for (const auto& s : shards_) open += s->OpenFolds();
  return open;
}

void LocalKernelOwners::Exchange(const OwnerRequest& request, const std::function<void(int, OwnerReply&)>& consume) const {
  for (std::size_t p = 0; p < shards_.size(); ++p) {
    OwnerReply reply = shards_[p]->Execute(request);
    consume(static_cast<int>(p), reply);
  }
}

Eigen::VectorXd FoldScales(const KernelOwners& kernels, const Eigen::Ref<const Eigen::VectorXi>& train, const Eigen::Ref<const Eigen::VectorXi>& test,
                           const Preprocessing& preprocessing) {
  if (preprocessing.kernelGroups.empty()) return Eigen::VectorXd::Ones(static_cast<Eigen::Index>(kernels.size()));
  const std::vector<int> tr(train.data(), train.data() + train.size()), te(test.data(), test.data() + test.size());
  return kernels.OpenFold(tr, te)->Scales();
}

}  // namespace neuromkl::cv
