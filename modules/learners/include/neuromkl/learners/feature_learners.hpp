#pragma once
// Learners on a fold's features (gram::FoldFeatures) instead of its n x n kernels, for cohorts whose region kernels
// would not fit in memory. Each solves the problem its kernel learner solves on the prepared kernels K_r = Z_r Z_r'
// (same parameters, same preprocessing, same optimum up to the solvers' tolerances) by another path, touching the
// voxels only through products with their rows (ALGORITHMS.md section 17):
//   svm        dual coordinate descent (Hsieh et al. 2008) with shrinking; the unregularised bias of LIBSVM's
//              C-SVC (the constraint y'alpha = 0) by the method of multipliers (Hestenes 1969; Powell 1969);
//   krr        conjugate gradients on (K + lambda W^-1) coef = y - mean y, with the products K v = Z (Z'v);
//   enmkl_svm, enmkl_krr
//              ENMKL (Mourao-Miranda et al.): at mu < 1 damped water-filling steps as on the kernel path, mixed by
//              Anderson acceleration (Walker & Ni 2011), with inexact inner solves while the weights move; then (mu = 1,
//              or where those do not settle) block coordinate descent on its variational form (the published weight
//              step), accelerated where V falls. Each inner solve is warm-started from the last, with
//              ||w_r|| = beta_r ||Z_r' coef|| from one pass over the rows;
//   simplemkl  classification: SimpleMKL's l1-MKL problem (Rakotomamonjy et al. 2008) is ENMKL's at mu = 1, so it is
//              that descent with the svm solver, stopped by SimpleMKL's relative duality gap.
// The returned Model is the kernel path's: beta (sum 1; 1/R each for svm and krr, with coef scaled by R), coef, bias,
// so its decisions on the prepared kernels are those the features give.
#include <string_view>

#include <Eigen/Core>

#include "neuromkl/gram/features.hpp"
#include "neuromkl/learners/learner.hpp"

namespace neuromkl::learners {

/// Whether `learner` has a feature form (svm, krr, enmkl_svm, enmkl_krr, simplemkl).
bool HasFeatureForm(std::string_view learner);

/// Fits `learner` (parameters resolved and checked as MakeLearner does) on the training rows of `fold`, binary
/// classification (+-1) or regression targets, one per training row; class weights as Targets::sampleWeights.
/// InvalidParameter for a learner without a feature form; InputError for targets that do not match the fold.
/// `warmStart`: a model this function fitted on the same fold with neighbouring parameters (a grid search); it changes
/// the path, not the optimum.
Model FitFeatures(std::string_view learner, const ParamMap& params, const gram::FoldFeatures& fold, const Targets& targets,
                  const Model* warmStart = nullptr);

/// The decision values of the fold's test rows.
Eigen::VectorXd FeatureDecision(const Model& model, const gram::FoldFeatures& fold);

/// The model's voxel weights w_r = beta_r Z_r' coef (FeatureMatrix::Voxels() entries, region by region).
Eigen::VectorXd FeatureVoxelWeights(const Model& model, const gram::FoldFeatures& fold);

}  // namespace neuromkl::learners
