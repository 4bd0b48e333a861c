#pragma once
// Connectivity sources (kernels.sources kind "connectivity"): one symmetric node x node matrix per
// subject. A kernel's features are connections (edges i < j; the diagonal is ignored, so Fisher-z
// matrices with an infinite diagonal are fine). Kernels are linear, so their primal weights are
// edge weights (WeightEdges), the connectivity counterpart of a voxel map.
#include <cstddef>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/config/study_config.hpp"
#include "neuromkl/kernels/kernel_set.hpp"
#include "neuromkl/pipeline/cohort.hpp"

namespace neuromkl::pipeline {

/// Every subject's connections, read and checked.
struct ConnectivityData {
  std::vector<std::string> nodes;     ///< node names (node table "name", else node1, node2, ...)
  std::vector<std::string> networks;  ///< node table "network" (empty without one)
  Eigen::MatrixXd edges;              ///< subjects x edges; edge (a, b), a < b, at EdgeIndex(a, b, nodes.size())
};

inline Eigen::Index EdgeIndex(std::size_t a, std::size_t b, std::size_t nodes) {
  return static_cast<Eigen::Index>(a * nodes - a * (a + 1) / 2 + (b - a - 1));
}

/// Each subject's matrix file from the source's column of the subjects table (paths relative to the
/// table's folder). InputError [sources:MissingData] listing every subject without a cell or a file.
std::vector<std::string> ConnectivityFiles(const config::StudyConfig& study, const config::ConnectivitySpec& spec, const Cohort& cohort);

/// One subject's matrix: square, at least 2 nodes, finite connections (the diagonal is ignored) and symmetric
/// (|m_ab - m_ba| <= 1e-6 max(1, max |m|)); InputError naming `where` otherwise.
void CheckConnectivityMatrix(const Eigen::MatrixXd& M, const std::string& where);

/// Reads every matrix (.npy or delimited text) and the node table. InputError naming the file and the
/// subject for a matrix that is not square, has another size than the first subject's (or than the node
/// table), holds a non-finite connection, or is not symmetric (|m_ab - m_ba| > 1e-6 max(1, max |m|)).
ConnectivityData ReadConnectivity(const config::StudyConfig& study, const config::ConnectivitySpec& spec, const Cohort& cohort);

/// The kernels' names and their edges (indices into ConnectivityData::edges' columns), in kernel order.
struct ConnectivityKernelPlan {
  std::vector<std::string> names;
  std::vector<std::vector<Eigen::Index>> edges;
};
ConnectivityKernelPlan PlanConnectivityKernels(const ConnectivityData& data, config::ConnectivitySpec::Kernels kind);

/// One linear kernel per planned edge set (features = connections).
kernels::KernelSet ConnectivityKernels(const config::StudyConfig& study, const config::ConnectivitySpec& spec, const Cohort& cohort);

/// Edge weights of linear kernels from subject weights D (subjects x kernels, gram::KernelStore::SubjectWeights):
/// w_e = sum over the kernels k holding edge e of sum_i D(i, k) x_ie. Returned as a symmetric node x node
/// matrix with a zero diagonal.
Eigen::MatrixXd WeightEdges(const ConnectivityData& data, const ConnectivityKernelPlan& plan, const Eigen::MatrixXd& subjectWeights);

}  // namespace neuromkl::pipeline
