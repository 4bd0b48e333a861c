#include "neuromkl/kernels/kernel_set.hpp"

#include <string>
#include <vector>

namespace neuromkl::kernels {

void CompactKernelSet(KernelSet& set, bool centre, const std::string& where) {
  if (set.Compact() || set.kernels.empty()) return;
  set.rawDiagonals.clear();
  for (const auto& K : set.kernels) set.rawDiagonals.push_back(K.diagonal());
  std::vector<std::string> names;
  for (std::size_t j = 0; j < set.kernels.size(); ++j)
    names.push_back(where + ": kernel \"" + (j < set.info.size() ? set.info[j].name : std::to_string(j)) + "\"");
  // As the stage does (RegionKernelOptions::compact): a zero kernel stays unrounded (empty) for ExcludeZeroKernels.
  set.compact = gram::CompactEach(set.kernels.size(), centre, [&](std::size_t j) {
    Eigen::MatrixXf rounded;
    if (set.kernels[j].cwiseAbs().maxCoeff() != 0.0) rounded = gram::CompactKernel(set.kernels[j], centre, names[j]);
    set.kernels[j] = Eigen::MatrixXd();
    return rounded;
  });
  set.kernels.clear();
}

}  // namespace neuromkl::kernels
