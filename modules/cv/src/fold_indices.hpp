#pragma once
// Index helpers shared by the nested CV driver and its summaries.
#include <limits>
#include <vector>

#include <Eigen/Core>

namespace neuromkl::cv::detail {

/// v at the indices `idx` (NaN for an index past its end: an unlabelled subject).
inline Eigen::VectorXd Subset(const Eigen::VectorXd& v, const std::vector<int>& idx) {
  Eigen::VectorXd out(static_cast<Eigen::Index>(idx.size()));
  for (std::size_t i = 0; i < idx.size(); ++i)
    out[static_cast<Eigen::Index>(i)] = idx[i] < v.size() ? v[idx[i]] : std::numeric_limits<double>::quiet_NaN();
  return out;
}

}  // namespace neuromkl::cv::detail
