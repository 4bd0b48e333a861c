// An owner's side of kernels held by several owners (owners.hpp): one handler per operation, each answering for the
// owner's share with the memory backend's arithmetic (MemoryKernels, MemoryFold).
#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/hash.hpp"
#include "neuromkl/core/npy.hpp"
#include "neuromkl/gram/memory.hpp"
#include "neuromkl/gram/owners.hpp"
#include "owner_protocol.hpp"

namespace neuromkl::gram {

using namespace detail;

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

KernelShard::KernelShard(int owner, int owners, KernelList kernels, std::vector<Eigen::Index> globals)
    : owner_(owner), owners_(owners), float64_(std::move(kernels)), kernels_(std::make_unique<MemoryKernels>(float64_)),
      globals_(DefaultGlobals(owner, owners, float64_.size(), std::move(globals))) {}
KernelShard::KernelShard(int owner, int owners, CompactKernelList kernels, std::vector<Eigen::Index> globals)
    : owner_(owner), owners_(owners), float32_(std::move(kernels)), kernels_(std::make_unique<MemoryKernels>(float32_)),
      globals_(DefaultGlobals(owner, owners, float32_.size(), std::move(globals))) {}
KernelShard::~KernelShard() = default;

Eigen::Index KernelShard::LocalOf(Eigen::Index j) const {
  const auto it = std::lower_bound(globals_.begin(), globals_.end(), j);
  return it != globals_.end() && *it == j ? static_cast<Eigen::Index>(it - globals_.begin()) : -1;
}

std::vector<Eigen::Index> KernelShard::Mine(const std::vector<Eigen::Index>& which) const {
  std::vector<Eigen::Index> local;
  for (const Eigen::Index j : which)
    if (const Eigen::Index k = LocalOf(j); k >= 0) local.push_back(k);
  return local;
}

std::size_t KernelShard::KernelCount() const { return kernels_->Count(); }

void KernelShard::TakeKernels(KernelList& kernels, CompactKernelList& compact) {
  if (!folds_.empty()) throw std::logic_error(fmt::format("owner {}: kernels taken with {} folds open", owner_, folds_.size()));
  for (auto& K : float64_) kernels.push_back(std::move(K));
  for (auto& K : float32_.kernels) compact.kernels.push_back(std::move(K));
  if (!float32_.empty()) compact.centred = float32_.centred;
  float64_.clear();
  float32_ = {};
  kernels_ = std::make_unique<MemoryKernels>(float64_);
  globals_.clear();
}

MemoryFold& KernelShard::FoldOf(std::int64_t id) {
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

/// The handlers: each decodes its request, computes the owner's part and writes the reply.
struct KernelShard::Handlers {
  static void Preprocessing(KernelShard& s, const OwnerRequest& q) {
    const PreprocessingRequest r = DecodePreprocessing(q);
    s.folds_.clear();
    gram::Preprocessing pre;
    pre.centre = r.centre;
    pre.normalise = r.normalise;
    pre.kernelGroups = r.groups;
    if (r.design.rows() > 0) {
      auto covariates = std::make_shared<Covariates>();
      covariates->design = r.design;
      for (const int v : r.fitRows) covariates->fitRow.push_back(static_cast<char>(v));
      covariates->categoryOf = r.categoryOf;
      pre.covariates = std::move(covariates);
    }
    s.preprocessing_ = std::move(pre);
  }

  static void OpenFold(KernelShard& s, const OwnerRequest& q, OwnerReply& reply) {
    const RowsRequest r = DecodeRows(q);
    const std::vector<int> train(r.train.data(), r.train.data() + r.train.size()), test(r.test.data(), r.test.data() + r.test.size());
    auto fold = s.kernels_->OpenMemoryFold(train, test, s.preprocessing_);
    if (!s.preprocessing_.kernelGroups.empty()) reply.values = fold->Traces();
    s.folds_[q.fold] = std::move(fold);
  }

  static void SetScales(KernelShard& s, const OwnerRequest& q) {
    const KernelValuesRequest r = DecodeKernelValues(q);
    Eigen::VectorXd scales(static_cast<Eigen::Index>(s.KernelCount()));
    for (std::size_t k = 0; k < s.KernelCount(); ++k) scales[static_cast<Eigen::Index>(k)] = r.values.at(static_cast<std::size_t>(s.globals_.at(k)));
    s.FoldOf(q.fold).SetScales(std::move(scales));
  }

  static void Facts(KernelShard& s, const OwnerRequest& q, OwnerReply& reply) {
    // The answers of the learners' input check and of the zero kernels, from one pass over each prepared kernel.
    std::vector<char> finite, nonzero;
    s.FoldOf(q.fold).Stack().Facts(finite, nonzero);
    for (std::size_t k = 0; k < s.KernelCount(); ++k) {
      reply.values.push_back(finite[k]);
      reply.values.push_back(nonzero[k]);
    }
  }

  static void Combine(KernelShard& s, const OwnerRequest& q, OwnerReply& reply) {
    const KernelValuesRequest r = DecodeKernelValues(q);
    Eigen::VectorXd w(static_cast<Eigen::Index>(s.KernelCount()));
    bool any = false;
    for (std::size_t k = 0; k < s.KernelCount(); ++k) {
      w[static_cast<Eigen::Index>(k)] = r.values.at(static_cast<std::size_t>(s.globals_.at(k)));
      any |= w[static_cast<Eigen::Index>(k)] != 0.0;
    }
    if (!any) return;  // nothing of this owner's is in the sum
    Eigen::MatrixXd combined;
    s.FoldOf(q.fold).Stack().Combine(w, combined);
    reply.values = PackUpper(combined);
  }

  static void Quadratics(KernelShard& s, const OwnerRequest& q, OwnerReply& reply) {
    const QuadraticsRequest r = DecodeQuadratics(q);
    const std::vector<Eigen::Index> local = s.Mine(r.which);
    if (local.empty()) return;
    const KernelStack& stack = s.FoldOf(q.fold).Stack();
    Eigen::VectorXd values;
    if (r.perKernel) {
      values = stack.Form(r.A)->Values(local);  // as screened MKL evaluates them, a kernel at a time
    } else {
      // As a fit evaluates every kernel for one vector (on a packed stack one product over all of them).
      if (r.A.cols() != 1) throw std::logic_error("owner request: one vector per request outside the per-kernel path");
      const Eigen::VectorXd all = stack.Quadratics(Eigen::VectorXd(r.A.col(0)));
      values.resize(static_cast<Eigen::Index>(local.size()));
      for (std::size_t i = 0; i < local.size(); ++i) values[static_cast<Eigen::Index>(i)] = all[local[i]];
    }
    reply.values.assign(values.data(), values.data() + values.size());
  }

  static void Products(KernelShard& s, const OwnerRequest& q, OwnerReply& reply) {
    const ProductsRequest r = DecodeProducts(q);
    const std::vector<Eigen::Index> local = s.Mine(r.which);
    if (local.empty()) return;
    const Eigen::MatrixXd G = s.FoldOf(q.fold).Stack().Products(local, r.v);
    reply.values.assign(G.data(), G.data() + G.size());
  }

  static void RootBounds(KernelShard& s, const OwnerRequest& q, OwnerReply& reply) {
    const KernelStack& stack = s.FoldOf(q.fold).Stack();
    for (const auto k : s.Mine(DecodeKernels(q).which)) reply.values.push_back(stack.RootSpectralBound(k));
  }

  /// The prepared test blocks (test x train), or TestProduct of each with C, of the owner's kernels of `which`.
  static void TestBlocks(KernelShard& s, const OwnerRequest& q, OwnerReply& reply) {
    MemoryFold& fold = s.FoldOf(q.fold);
    const bool products = q.op == kTestProducts;
    TestProductsRequest r;
    if (products) r = DecodeTestProducts(q, fold.TrainSize());
    else r.which = DecodeKernels(q).which;
    const std::vector<Eigen::Index> local = s.Mine(r.which);
    if (local.empty()) return;
    const Eigen::Index test = fold.TestSize(), train = fold.TrainSize();
    const auto size = static_cast<std::size_t>(test * (products ? r.C.cols() : train));
    reply.values.resize(size * local.size());
    tbb::parallel_for(std::size_t{0}, local.size(), [&](std::size_t i) {
      Eigen::MatrixXd scratch;
      const Eigen::MatrixXd& block = fold.TestBlock(static_cast<std::size_t>(local[i]), scratch);
      const Eigen::MatrixXd value = products ? TestProduct(block, r.C, r.form) : block;
      std::copy(value.data(), value.data() + value.size(), reply.values.data() + i * size);
    });
  }

  static void Summed(KernelShard& s, const OwnerRequest& q, OwnerReply& reply) {
    if (s.KernelCount() == 0) return;
    const FoldKernels sum = s.FoldOf(q.fold).Summed();
    reply.values.assign(sum.train[0].data(), sum.train[0].data() + sum.train[0].size());
    reply.values.insert(reply.values.end(), sum.test[0].data(), sum.test[0].data() + sum.test[0].size());
  }

  static void ViewProducts(KernelShard& s, const OwnerRequest& q, OwnerReply& reply) {
    MemoryFold& fold = s.FoldOf(q.fold);
    const ViewProductsRequest r = DecodeViewProducts(q, fold.TrainSize());
    std::vector<std::size_t> local;  // this owner's kernels of `which`, and their scales
    Eigen::VectorXd scales = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(s.KernelCount()));
    for (std::size_t i = 0; i < r.which.size(); ++i)
      if (const Eigen::Index k = s.LocalOf(r.which[i]); k >= 0) {
        local.push_back(static_cast<std::size_t>(k));
        scales[k] = r.scales[i];
      }
    if (local.empty()) return;
    const std::vector<Eigen::MatrixXd> P = fold.Products(local, r.A, scales);
    for (const auto& p : P) reply.values.insert(reply.values.end(), p.data(), p.data() + p.size());
  }

  static void SubjectWeights(KernelShard& s, const OwnerRequest& q, OwnerReply& reply) {
    const SubjectWeightsRequest r = DecodeSubjectWeights(q);
    if (s.KernelCount() == 0) return;
    FoldModel model;
    model.train.assign(r.train.data(), r.train.data() + r.train.size());
    model.test.assign(r.test.data(), r.test.data() + r.test.size());
    model.coef = r.coef;
    model.beta.resize(static_cast<Eigen::Index>(s.KernelCount()));
    for (std::size_t k = 0; k < s.KernelCount(); ++k) model.beta[static_cast<Eigen::Index>(k)] = r.beta[s.globals_.at(k)];
    const Eigen::MatrixXd D = s.kernels_->SubjectWeights(model, s.preprocessing_);
    reply.values.assign(D.data(), D.data() + D.size());
  }

  static void LargestSelfSimilarity(KernelShard& s, const OwnerRequest& q, OwnerReply& reply) {
    const RowsRequest r = DecodeRows(q);
    const Eigen::VectorXd v = s.kernels_->LargestCentredSelfSimilarities(std::vector<int>(r.train.data(), r.train.data() + r.train.size()), s.preprocessing_);
    reply.values.assign(v.data(), v.data() + v.size());
  }

  static void SaveKernels(KernelShard& s, const OwnerRequest& q, OwnerReply& reply) {
    const SaveRequest r = DecodeSave(q);
    std::vector<std::string> hashes(s.KernelCount());
    tbb::parallel_for(std::size_t{0}, s.KernelCount(), [&](std::size_t k) {
      const std::string path = r.folder + "/" + r.files.at(static_cast<std::size_t>(s.globals_.at(k)));
      if (s.float32_.empty()) WriteNpy(path, s.float64_[k]);
      else WriteNpy(path, s.float32_.kernels[k]);
      hashes[k] = HashFile(path).Hex();
    });
    for (const auto& h : hashes) reply.text += h + "\n";
  }
};

OwnerReply KernelShard::Run(const OwnerRequest& q) {
  OwnerReply reply;
  switch (q.op) {
    case kPreprocessing: Handlers::Preprocessing(*this, q); break;
    case kOpenFold: Handlers::OpenFold(*this, q, reply); break;
    case kSetScales: Handlers::SetScales(*this, q); break;
    case kCloseFold: folds_.erase(q.fold); break;
    case kFacts: Handlers::Facts(*this, q, reply); break;
    case kCombine: Handlers::Combine(*this, q, reply); break;
    case kQuadratics: Handlers::Quadratics(*this, q, reply); break;
    case kProducts: Handlers::Products(*this, q, reply); break;
    case kRootBounds: Handlers::RootBounds(*this, q, reply); break;
    case kTestBlocks:
    case kTestProducts: Handlers::TestBlocks(*this, q, reply); break;
    case kSummed: Handlers::Summed(*this, q, reply); break;
    case kViewProducts: Handlers::ViewProducts(*this, q, reply); break;
    case kSubjectWeights: Handlers::SubjectWeights(*this, q, reply); break;
    case kLargestSelfSimilarity: Handlers::LargestSelfSimilarity(*this, q, reply); break;
    case kSaveKernels: Handlers::SaveKernels(*this, q, reply); break;
    default: throw std::logic_error(fmt::format("owner {}: unknown request {}", owner_, q.op));
  }
  return reply;
}

}  // namespace neuromkl::gram
