// The training kernels of a fit: the work shared by fits on the same kernels (TrainingKernelCache) and the stack a
// learner of kernel weights reads them through (gram::KernelStack), whatever holds them.
#include <memory>
#include <utility>
#include <vector>

#include "inner.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/learners/learner.hpp"

namespace neuromkl::learners {

TrainingKernelCache::TrainingKernelCache() = default;
TrainingKernelCache::~TrainingKernelCache() = default;

bool TrainingKernelCache::Bind(const KernelList& kernels) {
  std::vector<std::pair<const void*, Eigen::Index>> key;
  key.reserve(kernels.size());
  for (const auto& K : kernels) key.emplace_back(K.data(), K.rows() * (K.cols() + 1));  // rows and cols both enter the size
  return BindKey(std::move(key));
}

bool TrainingKernelCache::Bind(const gram::TrainingKernels& kernels) { return BindKey({{&kernels, kernels.Size()}, {nullptr, kernels.Count()}}); }

bool TrainingKernelCache::BindKey(std::vector<std::pair<const void*, Eigen::Index>> key) {
  if (key == key_) return true;
  key_ = std::move(key);
  checked_ = false;
  stack_.reset();
  sum_.resize(0, 0);
  activeKnown_ = false;
  return false;
}

bool CheckedBefore(TrainingKernelCache* cache, const gram::TrainingKernels& kernels) {
  if (!cache) return false;
  return cache->Bind(kernels) && cache->checked_;
}

const gram::KernelStack& SharedStack(TrainingKernelCache* cache, const gram::TrainingKernels& kernels, std::unique_ptr<gram::KernelStack>& local) {
  if (!cache) return *(local = kernels.Stack());
  if (!cache->Bind(kernels) || !cache->stack_) {
    cache->stack_ = kernels.Stack();
    ++cache->stacksBuilt_;
  }
  return *cache->stack_;
}

Eigen::Index KernelCount(const KernelList& train, const FitOptions& options) {
  return options.kernels ? options.kernels->Count() : static_cast<Eigen::Index>(train.size());
}

std::vector<Eigen::Index> ActiveKernels(const KernelList& train, const FitOptions& options) {
  // Shared along a grid: the scan reads a strided diagonal of every kernel (~2 % of an ENMKL nested CV).
  if (TrainingKernelCache* cache = options.cache) {
    if (!(options.kernels ? cache->Bind(*options.kernels) : cache->Bind(train)) || !cache->activeKnown_) {
      FitOptions uncached = options;
      uncached.cache = nullptr;
      cache->active_ = ActiveKernels(train, uncached);
      cache->activeKnown_ = true;
    }
    return cache->active_;
  }
  return options.kernels ? options.kernels->NonZero() : ActiveKernels(train);
}

bool CheckedBefore(TrainingKernelCache* cache, const KernelList& kernels) {
  if (!cache) return false;
  return cache->Bind(kernels) && cache->checked_;
}

void MarkChecked(TrainingKernelCache* cache) {
  if (!cache) return;
  cache->checked_ = true;
  ++cache->checksRun_;
}

const gram::KernelStack& SharedStack(TrainingKernelCache* cache, const KernelList& kernels, std::unique_ptr<gram::KernelStack>& local) {
  if (!cache) return *(local = gram::MakeStack(kernels));
  if (!cache->Bind(kernels) || !cache->stack_) {
    cache->stack_ = gram::MakeStack(kernels);
    ++cache->stacksBuilt_;
  }
  return *cache->stack_;
}

const Eigen::MatrixXd& SharedSum(TrainingKernelCache* cache, const KernelList& kernels, Eigen::MatrixXd& local) {
  const auto ones = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(kernels.size()));
  if (!cache) {
    local = CombineKernels(kernels, ones);
    return local;
  }
  if (!cache->Bind(kernels) || cache->sum_.size() == 0) {
    cache->sum_ = CombineKernels(kernels, ones);
    ++cache->sumsBuilt_;
  }
  return cache->sum_;
}


Eigen::MatrixXd CombineKernels(const KernelList& kernels, const Eigen::VectorXd& weights) {
  Eigen::MatrixXd K = Eigen::MatrixXd::Zero(kernels[0].rows(), kernels[0].cols());
  for (std::size_t j = 0; j < kernels.size(); ++j)
    if (weights[static_cast<Eigen::Index>(j)] != 0.0) K.noalias() += weights[static_cast<Eigen::Index>(j)] * kernels[j];
  return K;
}


std::vector<Eigen::Index> ActiveKernels(const KernelList& kernels) {
  std::vector<Eigen::Index> active;
  // A non-zero diagonal entry settles it in O(n) (the usual case); only a kernel with a zero
  // diagonal is scanned in full (a PSD one is then zero, but the input need not be PSD).
  for (std::size_t j = 0; j < kernels.size(); ++j)
    if (kernels[j].diagonal().cwiseAbs().maxCoeff() > 0 || kernels[j].cwiseAbs().maxCoeff() > 0) active.push_back(static_cast<Eigen::Index>(j));
  return active;
}


}  // namespace neuromkl::learners
