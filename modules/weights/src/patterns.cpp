#include "neuromkl/weights/patterns.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace neuromkl::weights {

ActivationPattern FoldActivationPattern(const gram::PreparedFold& fold, std::size_t kernelCount, const Eigen::VectorXd& beta,
                                        const Eigen::VectorXd& coef) {
  const Eigen::VectorXd scales = fold.Scales();
  const std::size_t R = kernelCount;
  // Each kernel's part K~_r coef, several kernels at once.
  std::vector<Eigen::VectorXd> parts(R);
  std::vector<std::size_t> used, every(R);
  for (std::size_t r = 0; r < R; ++r)
    if (beta[static_cast<Eigen::Index>(r)] != 0.0) used.push_back(r);
  std::iota(every.begin(), every.end(), std::size_t{0});
  const auto products = fold.Products(used, coef, scales);
  for (std::size_t i = 0; i < used.size(); ++i) parts[used[i]] = products[i].col(0);
  Eigen::VectorXd f = Eigen::VectorXd::Zero(coef.size());
  ActivationPattern p;
  p.modelQuadratics = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(R));
  for (std::size_t r = 0; r < R; ++r)
    if (parts[r].size() > 0) {
      f += beta[static_cast<Eigen::Index>(r)] * parts[r];
      p.modelQuadratics[static_cast<Eigen::Index>(r)] = coef.dot(parts[r]);
    }
  const Eigen::VectorXd centred = f.array() - f.mean();
  const double ss = centred.squaredNorm();
  p.c = ss > 0 ? Eigen::VectorXd(centred / ss) : Eigen::VectorXd::Zero(f.size());  // a constant decision has no pattern
  p.norms.resize(static_cast<Eigen::Index>(R));
  const auto patternParts = fold.Products(every, p.c, Eigen::VectorXd());
  for (std::size_t r = 0; r < R; ++r) p.norms[static_cast<Eigen::Index>(r)] = std::sqrt(std::max(0.0, p.c.dot(patternParts[r].col(0))));
  return p;
}

}  // namespace neuromkl::weights
