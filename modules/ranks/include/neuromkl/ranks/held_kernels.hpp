#pragma once
// A study's kernels held by the MPI ranks (gram/owners.hpp over MPI; docs/batch.md, "Kernels that do not fit one
// rank"): rank 0 sends each request to every rank and answers its own share while the others answer theirs; the other
// ranks serve requests until rank 0 lets go of the kernels.
#include <memory>
#include <vector>

#include "neuromkl/gram/owners.hpp"

namespace neuromkl::ranks {

/// Rank 0's handle to the kernels the ranks hold once they serve requests. When the last copy goes, the other ranks are
/// released (they wait for instructions again).
class RankOwners final : public gram::KernelOwners {
 public:
  /// `local`: rank 0's share. If the handle cannot be made, the ranks are released before the failure goes on.
  static std::shared_ptr<RankOwners> Make(std::unique_ptr<gram::KernelShard> local, std::size_t count, Eigen::Index subjects, bool compact, bool centred,
                                          std::vector<int> ownerOf = {});
  RankOwners(std::unique_ptr<gram::KernelShard> local, std::size_t count, Eigen::Index subjects, bool compact, bool centred, std::vector<int> ownerOf);
  ~RankOwners() override;
  /// Rank 0's share, taken before the ranks are released (a study of several sources keeps each source's share on the
  /// ranks); no request may follow.
  std::unique_ptr<gram::KernelShard> TakeLocal();

 protected:
  void Exchange(const gram::OwnerRequest& request, const std::function<void(int, gram::OwnerReply&)>& consume) const override;

 private:
  std::unique_ptr<gram::KernelShard> local_;
  bool taken_ = false;
};

/// The other ranks: answer kernel requests with this rank's share until rank 0 releases the kernels. Every request is
/// answered, a failure with its error (KernelShard::Execute never throws).
void ServeKernelRequests(gram::KernelShard& shard);

}  // namespace neuromkl::ranks
