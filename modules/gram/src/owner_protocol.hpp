#pragma once
// What each operation on kernels held by several owners sends and what an owner replies (owners.hpp): one request type
// per operation, with named fields, written to and read from the plain numbers of an OwnerRequest here and nowhere
// else. Owner 0 encodes (owned_fold.cpp, kernel_owners.cpp), every owner decodes (kernel_shard.cpp).
#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/gram/owners.hpp"

namespace neuromkl::gram::detail {

enum Op : int {
  kPreprocessing = 1,
  kOpenFold,
  kSetScales,
  kCloseFold,
  kFacts,
  kCombine,
  kQuadratics,
  kProducts,
  kRootBounds,
  kTestBlocks,
  kSummed,
  kViewProducts,
  kSubjectWeights,
  kLargestSelfSimilarity,
  kSaveKernels,
  kTestProducts,
};
/// The operation's name ("combine", "quadratics", ...) for the request statistics.
std::string OpName(int op);

/// The fold preprocessing of every later fold. The covariate design has a row per row the owners hold.
/// Reply: nothing.
struct PreprocessingRequest {
  bool centre = true, normalise = true;
  std::vector<int> groups;
  Eigen::MatrixXd design;  ///< empty: no covariates
  std::vector<int> fitRows;
  std::vector<int> categoryOf;  ///< per design column (Covariates::categoryOf)
};
/// Opens fold `fold` on rows `train` and `test`. Reply: the traces of the owner's prepared kernels when the study weighs
/// its sources (the fold's scales come from every kernel's).
struct RowsRequest {
  Eigen::VectorXi train, test;
};
/// Per-kernel values of every kernel (set scales, combine): each owner reads its own. Combine's reply: the packed
/// upper triangle of the owner's partial sum, or nothing when none of its weights is non-zero.
struct KernelValuesRequest {
  std::vector<double> values;
};
/// Kernels by global index (root bounds, test blocks): each owner answers for its own, in the order of `which`.
struct KernelsRequest {
  std::vector<Eigen::Index> which;
};
/// a'K_j a of the kernels of `which` (KernelStack::Form when `perKernel`, else KernelStack::Quadratics of A's one column).
struct QuadraticsRequest {
  bool perKernel = true;
  Eigen::MatrixXd A;
  std::vector<Eigen::Index> which;
};
/// K_j v for the kernels of `which`.
struct ProductsRequest {
  std::vector<Eigen::Index> which;
  Eigen::VectorXd v;
};
/// TestProduct(test block j, C, form) for the kernels of `which`.
struct TestProductsRequest {
  int form = 0;
  Eigen::MatrixXd C;
  std::vector<Eigen::Index> which;
};
/// scales[i] x K~_j A for j = which[i] (PreparedFold::Products).
struct ViewProductsRequest {
  std::vector<Eigen::Index> which;
  std::vector<double> scales;
  Eigen::MatrixXd A;
};
/// KernelStore::SubjectWeights of a fold model (coefficients of the training rows, kernel weights of every kernel).
struct SubjectWeightsRequest {
  Eigen::VectorXi train, test;
  Eigen::VectorXd coef, beta;
};
/// Every kernel saved to `folder`/`files[j]`. Reply text: the owner's checksums, one per line.
struct SaveRequest {
  std::string folder;
  std::vector<std::string> files;
};

OwnerRequest Encode(const PreprocessingRequest& r);
OwnerRequest Encode(int op, std::int64_t fold, const RowsRequest& r);
OwnerRequest Encode(int op, std::int64_t fold, const KernelValuesRequest& r);
OwnerRequest Encode(int op, std::int64_t fold, const KernelsRequest& r);
OwnerRequest Encode(std::int64_t fold, const QuadraticsRequest& r);
OwnerRequest Encode(std::int64_t fold, const ProductsRequest& r);
OwnerRequest Encode(std::int64_t fold, const TestProductsRequest& r);
OwnerRequest Encode(std::int64_t fold, const ViewProductsRequest& r);
OwnerRequest Encode(const SubjectWeightsRequest& r);
OwnerRequest Encode(const SaveRequest& r);
/// A request with no content (close fold, facts, summed).
OwnerRequest Encode(int op, std::int64_t fold);

PreprocessingRequest DecodePreprocessing(const OwnerRequest& q);
RowsRequest DecodeRows(const OwnerRequest& q);
KernelValuesRequest DecodeKernelValues(const OwnerRequest& q);
KernelsRequest DecodeKernels(const OwnerRequest& q);
QuadraticsRequest DecodeQuadratics(const OwnerRequest& q);
ProductsRequest DecodeProducts(const OwnerRequest& q);
TestProductsRequest DecodeTestProducts(const OwnerRequest& q, Eigen::Index trainRows);
ViewProductsRequest DecodeViewProducts(const OwnerRequest& q, Eigen::Index trainRows);
SubjectWeightsRequest DecodeSubjectWeights(const OwnerRequest& q);
SaveRequest DecodeSave(const OwnerRequest& q);

/// The upper triangle of a symmetric matrix, column by column, and back.
std::vector<double> PackUpper(const Eigen::MatrixXd& K);
void UnpackUpper(const std::vector<double>& packed, Eigen::Index n, Eigen::MatrixXd& K);

}  // namespace neuromkl::gram::detail
