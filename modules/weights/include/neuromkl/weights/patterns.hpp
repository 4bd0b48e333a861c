#pragma once
// Activation patterns of kernel models (Haufe et al. 2014): how the data covary with the model's decision value,
// which, unlike the weights, says where the effect is (a region with large weights and no pattern suppresses noise).
#include <cstddef>

#include <Eigen/Core>

#include "neuromkl/gram/store.hpp"

namespace neuromkl::weights {

/// The activation pattern of a fold model: a = Cov(x~, f) / Var(f) over the fold's training subjects, x~ the
/// kernel features as the learner saw them (centred, normalised; before the source scale, which is a weight, not
/// data) and f the decision value. For linear kernels a = X~' c with c = (f - mean f) / sum (f - mean f)^2, so a
/// map is built from c exactly as a weight map is from the coefficients (gram::KernelStore::SubjectWeights with
/// unit kernel weights), and each kernel's part has norm ||a_r|| = sqrt(c' K~_r c).
struct ActivationPattern {
  Eigen::VectorXd c;      ///< per training subject (the fold's train, then unlabelled, order)
  Eigen::VectorXd norms;  ///< per kernel: ||a_r||
  /// Per kernel: coef' K~_r coef (K~_r with its source scale), the model's region shares (0 where beta_r = 0).
  Eigen::VectorXd modelQuadratics;
};

/// The pattern of the model (kernel weights `beta`, coefficients `coef` over the fold's training subjects) from the
/// fold's kernels in place; kernels summed in kernel order, so the result does not depend on the thread count.
ActivationPattern FoldActivationPattern(const gram::PreparedFold& fold, std::size_t kernelCount, const Eigen::VectorXd& beta,
                                        const Eigen::VectorXd& coef);

}  // namespace neuromkl::weights
