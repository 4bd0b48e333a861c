// Owner 0's side of kernels held by several owners (owners.hpp): each operation as one request to every owner, the
// replies added or placed in owner order; and the owners of this process (LocalKernelOwners).
#include <algorithm>
#include <chrono>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>
#include <tbb/task_arena.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/gram/owners.hpp"
#include "owned_fold.hpp"
#include "owner_protocol.hpp"

namespace neuromkl::gram {

using namespace detail;

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
  std::map<std::string, std::pair<long, double>> out;
  const std::lock_guard<std::mutex> hold(lock_);
  for (const auto& [op, v] : byKind_) out[OpName(op)] = v;
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
  PreprocessingRequest request{preprocessing.centre, preprocessing.normalise, preprocessing.kernelGroups, {}, {}, {}};
  // The design's rows are subjects; the owners index it by their rows (rows no subject maps to are never read).
  if (const Covariates* c = preprocessing.covariates.get()) {
    if (c->design.rows() != subjects_)
      throw std::logic_error(fmt::format("KernelOwners::SetPreprocessing: {} design rows for {} subjects", c->design.rows(), subjects_));
    request.design = Eigen::MatrixXd::Zero(heldRows_, c->design.cols());
    request.categoryOf = c->categoryOf;
    if (!c->fitRow.empty()) request.fitRows.assign(static_cast<std::size_t>(heldRows_), 0);
    for (Eigen::Index i = 0; i < subjects_; ++i) {
      const Eigen::Index row = rows_.empty() ? i : rows_[static_cast<std::size_t>(i)];
      request.design.row(row) = c->design.row(i);
      if (!c->fitRow.empty()) request.fitRows[static_cast<std::size_t>(row)] = c->fitRow[static_cast<std::size_t>(i)];
    }
  }
  Request(Encode(request), [](int, OwnerReply&) {});
  preprocessing_ = preprocessing;
}

void KernelOwners::CheckPreprocessing(const Preprocessing& pre) const {
  if (preprocessing_.centre != pre.centre || preprocessing_.normalise != pre.normalise || preprocessing_.kernelGroups != pre.kernelGroups ||
      preprocessing_.covariates != pre.covariates)
    throw std::logic_error("KernelOwners: the owners prepare their folds with another preprocessing (KernelOwners::SetPreprocessing)");
}

std::unique_ptr<PreparedFold> KernelOwners::OpenFold(const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre) const {
  CheckPreprocessing(pre);
  const std::int64_t id = nextFold_++;
  RowsRequest rows;
  const std::vector<int> tr = Rows(train), te = Rows(test);
  rows.train = Eigen::Map<const Eigen::VectorXi>(tr.data(), static_cast<Eigen::Index>(tr.size()));
  rows.test = Eigen::Map<const Eigen::VectorXi>(te.data(), static_cast<Eigen::Index>(te.size()));
  const bool groups = !preprocessing_.kernelGroups.empty();
  std::vector<double> traces(count_, 0.0);
  Eigen::VectorXd scales = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(count_));
  try {
    Request(Encode(kOpenFold, id, rows), [&](int owner, OwnerReply& reply) {
      if (!groups) return;
      for (std::size_t k = 0; k < reply.values.size(); ++k) traces.at(held_.at(static_cast<std::size_t>(owner)).at(k)) = reply.values[k];
    });
    if (groups) {
      scales = GroupScales(traces, preprocessing_.kernelGroups);
      Request(Encode(kSetScales, id, KernelValuesRequest{{scales.data(), scales.data() + scales.size()}}), [](int, OwnerReply&) {});
    }
  } catch (...) {
    try {
      Request(Encode(kCloseFold, id), [](int, OwnerReply&) {});
    } catch (...) {  // the open's failure is the one reported
    }
    throw;
  }
  auto fold = std::make_shared<const OwnedFold>(*this, id, static_cast<Eigen::Index>(train.size()), static_cast<Eigen::Index>(test.size()), std::move(scales));
  return std::make_unique<OwnedPreparedFold>(std::move(fold));
}

std::unique_ptr<KernelStore> KernelOwners::Subset(const std::vector<std::size_t>&) const {
  throw InputError("gram:SubsetOfHeldKernels", "kernels held by several processes",
                   "a nested CV over part of the kernels (region scan, ablation) needs them in one process; these are held by the MPI ranks "
                   "(kernels.memory_budget_mb): run the study without mpirun, or with a budget that holds them on one rank");
}

Eigen::MatrixXd KernelOwners::SubjectWeights(const FoldModel& model, const Preprocessing& pre) const {
  CheckPreprocessing(pre);
  const std::vector<int> tr = Rows(model.train), te = Rows(model.test);
  SubjectWeightsRequest request;
  request.train = Eigen::Map<const Eigen::VectorXi>(tr.data(), static_cast<Eigen::Index>(tr.size()));
  request.test = Eigen::Map<const Eigen::VectorXi>(te.data(), static_cast<Eigen::Index>(te.size()));
  request.coef = model.coef;
  request.beta = model.beta;
  Eigen::MatrixXd D(subjects_, static_cast<Eigen::Index>(count_));
  Request(Encode(request), [&](int owner, OwnerReply& reply) {
    // Columns over the owners' rows; subject i is row rows_[i].
    const auto columns = static_cast<Eigen::Index>(reply.values.size()) / std::max<Eigen::Index>(1, heldRows_);
    const Eigen::Map<const Eigen::MatrixXd> part(reply.values.data(), heldRows_, columns);
    for (Eigen::Index k = 0; k < columns; ++k)
      for (Eigen::Index i = 0; i < subjects_; ++i)
        D(i, static_cast<Eigen::Index>(held_.at(static_cast<std::size_t>(owner)).at(static_cast<std::size_t>(k)))) =
            part(rows_.empty() ? i : rows_[static_cast<std::size_t>(i)], k);
  });
  return D;
}

Eigen::VectorXd KernelOwners::LargestCentredSelfSimilarities(const std::vector<int>& train, const Preprocessing& pre) const {
  CheckPreprocessing(pre);
  const std::vector<int> tr = Rows(train);
  RowsRequest request;
  request.train = Eigen::Map<const Eigen::VectorXi>(tr.data(), static_cast<Eigen::Index>(tr.size()));
  const auto values = PerKernel(Encode(kLargestSelfSimilarity, 0, request), Every(), 1);
  Eigen::VectorXd out(static_cast<Eigen::Index>(count_));
  for (std::size_t j = 0; j < count_; ++j) out[static_cast<Eigen::Index>(j)] = values[j][0];
  return out;
}

std::vector<std::string> KernelOwners::SaveKernels(const std::string& folder, const std::vector<std::string>& files) const {
  if (files.size() != count_) throw std::logic_error("KernelOwners::SaveKernels: one file name per kernel");
  std::vector<std::string> hashes(count_);
  Request(Encode(SaveRequest{folder, files}), [&](int owner, OwnerReply& reply) {
    std::size_t k = 0, start = 0;
    for (std::size_t i = 0; i < reply.text.size(); ++i)
      if (reply.text[i] == '\n') {
        hashes.at(held_.at(static_cast<std::size_t>(owner)).at(k++)) = reply.text.substr(start, i - start);
        start = i + 1;
      }
  });
  return hashes;
}

std::uint64_t KernelOwners::FoldTaskBytes(const FoldTask& task) const {
  const std::size_t share = (count_ + static_cast<std::size_t>(owners_) - 1) / static_cast<std::size_t>(owners_);  // the most one owner holds
  double first = 0, owner = 0;
  std::size_t largest = 0;
  for (const bool semi : {false, true})
    for (const bool summed : {false, true}) {
      if (!task.needs[FoldNeed(semi, summed)]) continue;
      const std::size_t l = task.train + (semi ? task.unlabelled : 0);
      largest = std::max(largest, l);
      const double dl = static_cast<double>(l), dm = static_cast<double>(task.test);
      if (summed) {
        first += dl * (dl + dm);
        owner += dl * (dl + dm);
        continue;
      }
      const double perKernel = task.covariates ? dl * (dl + dm) : static_cast<Eigen::Index>(l) < kPackedStackBelow ? dl * (dl + 1) / 2 + dl * dm : dl * dm;
      owner += static_cast<double>(share) * perKernel + dl * dl;
    }
  const double l = static_cast<double>(largest);
  first += 3.0 * l * l;
  return static_cast<std::uint64_t>(8.0 * std::max(first, owner));
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
      if constexpr (std::is_same_v<List, CompactKernelList>) share.kernels.push_back(kernels.kernels[j]);
      else share.push_back(kernels[j]);
    }
    if constexpr (std::is_same_v<List, CompactKernelList>) share.centred = kernels.centred;
    shards.push_back(std::make_unique<KernelShard>(p, owners, std::move(share), std::move(globals)));
  }
  return shards;
}
}  // namespace

LocalKernelOwners::LocalKernelOwners(const KernelList& kernels, int owners, const std::vector<std::size_t>& blockStarts)
    : KernelOwners(owners, kernels.size(), kernels.empty() ? 0 : kernels[0].rows(), false, false, BlockOwners(kernels.size(), owners, blockStarts)),
      shards_(MakeShards(kernels, owners, blockStarts)) {}

LocalKernelOwners::LocalKernelOwners(const CompactKernelList& kernels, int owners, const std::vector<std::size_t>& blockStarts)
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

}  // namespace neuromkl::gram
