// The transport of kernel requests between rank 0 and the ranks that hold the kernels (held_kernels.hpp).
#include "neuromkl/ranks/held_kernels.hpp"

#include <exception>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/ranks/ranks.hpp"

namespace neuromkl::ranks {

namespace {
constexpr std::int64_t kRelease = -1;  ///< the request that ends the kernel requests of a study
constexpr std::int64_t kPiece = std::int64_t{1} << 26;

template <typename T>
std::int64_t Bytes(const std::vector<T>& v) {
  return static_cast<std::int64_t>(v.size() * sizeof(T));
}

void Release() {
  std::int64_t header[5] = {kRelease, 0, 0, 0, 0};
  Broadcast(header, sizeof header);
}

/// Rank 0: a request to every rank. {op, fold, ints, reals, text bytes}, then the three payloads.
void SendRequest(const gram::OwnerRequest& request) {
  std::int64_t header[5] = {request.op, request.fold, static_cast<std::int64_t>(request.ints.size()), static_cast<std::int64_t>(request.reals.size()),
                            static_cast<std::int64_t>(request.text.size())};
  Broadcast(header, sizeof header);
  Broadcast(const_cast<std::int64_t*>(request.ints.data()), Bytes(request.ints));
  Broadcast(const_cast<double*>(request.reals.data()), Bytes(request.reals));
  Broadcast(const_cast<char*>(request.text.data()), static_cast<std::int64_t>(request.text.size()));
}

/// The other ranks: the next request, false when rank 0 released the kernels. A request this rank cannot hold (no
/// memory for its payload) is still received, piece by piece into a scratch buffer, so that every rank stays in step;
/// `failure` then says why, and the caller replies with it.
bool ReceiveRequest(gram::OwnerRequest& request, std::exception_ptr& failure) {
  std::int64_t header[5] = {};
  Broadcast(header, sizeof header);
  if (header[0] == kRelease) return false;
  request.op = static_cast<int>(header[0]);
  request.fold = header[1];
  failure = nullptr;
  try {
    request.ints.resize(static_cast<std::size_t>(header[2]));
    request.reals.resize(static_cast<std::size_t>(header[3]));
    request.text.resize(static_cast<std::size_t>(header[4]));
  } catch (...) {
    failure = std::current_exception();
    std::vector<char> scratch(static_cast<std::size_t>(kPiece));
    for (const std::int64_t bytes : {header[2] * 8, header[3] * 8, header[4]})
      for (std::int64_t at = 0; at < bytes; at += kPiece) Broadcast(scratch.data(), std::min(kPiece, bytes - at));
    return true;
  }
  Broadcast(request.ints.data(), Bytes(request.ints));
  Broadcast(request.reals.data(), Bytes(request.reals));
  Broadcast(request.text.data(), static_cast<std::int64_t>(request.text.size()));
  return true;
}

void SendReply(const gram::OwnerReply& reply) {
  std::int64_t header[3] = {static_cast<std::int64_t>(reply.values.size()), static_cast<std::int64_t>(reply.text.size()),
                            static_cast<std::int64_t>(reply.error.size())};
  Send(header, sizeof header, 0, kTagReply);
  Send(reply.values.data(), Bytes(reply.values), 0, kTagReply);
  Send(reply.text.data(), static_cast<std::int64_t>(reply.text.size()), 0, kTagReply);
  Send(reply.error.data(), static_cast<std::int64_t>(reply.error.size()), 0, kTagReply);
}

gram::OwnerReply ReceiveReply(int from) {
  std::int64_t header[3] = {};
  Receive(header, sizeof header, from, kTagReply);
  gram::OwnerReply reply;
  reply.values.resize(static_cast<std::size_t>(header[0]));
  reply.text.resize(static_cast<std::size_t>(header[1]));
  reply.error.resize(static_cast<std::size_t>(header[2]));
  Receive(reply.values.data(), Bytes(reply.values), from, kTagReply);
  Receive(reply.text.data(), static_cast<std::int64_t>(reply.text.size()), from, kTagReply);
  Receive(reply.error.data(), static_cast<std::int64_t>(reply.error.size()), from, kTagReply);
  return reply;
}
}  // namespace

RankOwners::RankOwners(std::unique_ptr<gram::KernelShard> local, std::size_t count, Eigen::Index subjects, bool compact, bool centred,
                       std::vector<int> ownerOf)
    : KernelOwners(Size(), count, subjects, compact, centred, std::move(ownerOf)), local_(std::move(local)) {}

std::shared_ptr<RankOwners> RankOwners::Make(std::unique_ptr<gram::KernelShard> local, std::size_t count, Eigen::Index subjects, bool compact, bool centred,
                                             std::vector<int> ownerOf) {
  try {
    return std::make_shared<RankOwners>(std::move(local), count, subjects, compact, centred, std::move(ownerOf));
  } catch (...) {
    Release();
    throw;
  }
}

std::unique_ptr<gram::KernelShard> RankOwners::TakeLocal() {
  taken_ = true;
  return std::move(local_);
}

RankOwners::~RankOwners() {
  // No request is in flight: every fold handle (which refers to this object) is gone.
  Release();
  // (A source's kernels, kept by the ranks for the study: the study's handle reports its own requests.)
  spdlog::log(taken_ ? spdlog::level::debug : spdlog::level::info, "kernels: {} requests to the {} ranks holding the kernels took {:.2f} s (rank 0's share of the work included)",
              requests(), Owners(), requestSeconds());
  for (const auto& [kind, v] : requestsByKind()) spdlog::debug("kernels: {} {} requests, {:.3f} s", v.first, kind, v.second);
}

void RankOwners::Exchange(const gram::OwnerRequest& request, const std::function<void(int, gram::OwnerReply&)>& consume) const {
  if (!local_) throw std::logic_error("RankOwners: a request after rank 0's share was taken");
  SendRequest(request);
  gram::OwnerReply mine = local_->Execute(request);
  consume(0, mine);
  for (int p = 1; p < Owners(); ++p) {
    gram::OwnerReply theirs = ReceiveReply(p);
    consume(p, theirs);
  }
}

void ServeKernelRequests(gram::KernelShard& shard) {
  long served = 0;
  gram::OwnerRequest request;
  for (std::exception_ptr failure; ReceiveRequest(request, failure); ++served) {
    if (!failure) {
      SendReply(shard.Execute(request));
      continue;
    }
    gram::OwnerReply refused;
    refused.error = SerialiseError(failure);
    SendReply(refused);
  }
  spdlog::debug("kernels: {} kernel requests answered", served);
}

}  // namespace neuromkl::ranks
