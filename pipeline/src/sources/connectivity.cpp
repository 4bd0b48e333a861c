#include "neuromkl/pipeline/connectivity.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/core/table.hpp"
#include "neuromkl/io/matrix_file.hpp"
#include "neuromkl/pipeline/kernel_stage.hpp"

namespace neuromkl::pipeline {

namespace fs = std::filesystem;
using Kind = config::ConnectivitySpec::Kernels;

std::vector<std::string> ConnectivityFiles(const config::StudyConfig& study, const config::ConnectivitySpec& spec, const Cohort& cohort) {
  const DelimitedTable table = ReadDelimitedTable(study.subjects.table);
  const std::size_t col = table.Require(spec.column, "connectivity column of a source, /kernels/sources/<i>/connectivity/column");
  const auto rowOf = RowsById(table, SubjectIdColumn(study.subjects, table), "subject id column, /subjects/id_column");
  std::vector<std::string> files, problems;
  for (const auto& id : cohort.ids) {
    const auto it = rowOf.find(id);
    const std::string cell = it == rowOf.end() ? std::string() : table.rows[it->second][col];
    if (IsMissingCell(cell)) {
      problems.push_back(id + ": no file in column \"" + spec.column + "\"");
      files.emplace_back();
      continue;
    }
    files.push_back(ResolveImagePath(table.path, cell));
    std::error_code ec;
    if (!fs::is_regular_file(files.back(), ec)) problems.push_back(id + ": file not found: " + files.back());
  }
  if (!problems.empty())
    throw InputError("sources:MissingData", table.path,
                     fmt::format("{} of {} subjects have no connectivity matrix: {} (relative paths resolve against the table's folder; "
                                 "/kernels/missing_source \"drop\" leaves such subjects out)",
                                 problems.size(), cohort.ids.size(), Join(problems, "; ")));
  return files;
}

namespace {

/// The node table: one row per node in matrix order, column "name" (unique) and optionally "network".
void ReadNodes(const config::ConnectivitySpec& spec, std::size_t count, const std::string& firstFile, ConnectivityData& data) {
  if (spec.nodes.empty()) {
    for (std::size_t a = 0; a < count; ++a) data.nodes.push_back(fmt::format("node{}", a + 1));
    return;
  }
  const DelimitedTable table = ReadDelimitedTable(spec.nodes);
  const std::size_t nameCol = table.Require("name", "node names of the connectivity source");
  if (table.rows.size() != count)
    throw InputError("connectivity:NodeCount", spec.nodes,
                     fmt::format("the node table has {} rows, but the matrices have {} nodes ({}); one row per node, in matrix order",
                                 table.rows.size(), count, firstFile));
  const auto netCol = table.Find("network");
  if (spec.kernels == Kind::Network && !netCol)
    throw InputError("connectivity:NoNetwork", spec.nodes, "kernels \"network\" need a \"network\" column in the node table (columns: " + Join(table.header, ", ") + ")");
  std::set<std::string> seen;
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    const std::string where = spec.nodes + ":" + std::to_string(table.lineNumbers[r]);
    const std::string name = Trim(table.rows[r][nameCol]);
    if (IsMissingCell(name)) throw InputError("connectivity:NodeName", where, "empty node name");
    if (!seen.insert(name).second) throw InputError("connectivity:NodeName", where, "node name \"" + name + "\" appears twice");
    data.nodes.push_back(name);
    if (netCol) {
      const std::string net = Trim(table.rows[r][*netCol]);
      if (spec.kernels == Kind::Network && IsMissingCell(net))
        throw InputError("connectivity:NodeNetwork", where, "node \"" + name + "\" has no network (kernels \"network\" need one per node)");
      data.networks.push_back(net);
    }
  }
}

}  // namespace

void CheckConnectivityMatrix(const Eigen::MatrixXd& M, const std::string& where) {
  if (M.rows() != M.cols())
    throw InputError("connectivity:NotSquare", where, fmt::format("expected a square node x node matrix, found {} x {}", M.rows(), M.cols()));
  const auto N = static_cast<std::size_t>(M.rows());
  if (N < 2) throw InputError("connectivity:Size", where, "a connectivity matrix needs at least 2 nodes");
  double scale = 1.0;
  for (std::size_t a = 0; a < N; ++a)
    for (std::size_t b = 0; b < N; ++b) {
      if (a == b) continue;
      const double v = M(static_cast<Eigen::Index>(a), static_cast<Eigen::Index>(b));
      if (!std::isfinite(v))
        throw InputError("connectivity:NonFinite", where,
                         fmt::format("connection ({}, {}) is {}; connections must be finite (only the diagonal is ignored)", a + 1, b + 1, v));
      scale = std::max(scale, std::abs(v));
    }
  for (std::size_t a = 0; a < N; ++a)
    for (std::size_t b = a + 1; b < N; ++b) {
      const double ab = M(static_cast<Eigen::Index>(a), static_cast<Eigen::Index>(b)), ba = M(static_cast<Eigen::Index>(b), static_cast<Eigen::Index>(a));
      if (std::abs(ab - ba) > 1e-6 * scale)
        throw InputError("connectivity:Asymmetric", where,
                         fmt::format("connection ({0}, {1}) = {2} but ({1}, {0}) = {3}: expected a symmetric (undirected) matrix", a + 1, b + 1, ab, ba));
    }
}

ConnectivityData ReadConnectivity(const config::StudyConfig& study, const config::ConnectivitySpec& spec, const Cohort& cohort) {
  const std::vector<std::string> files = ConnectivityFiles(study, spec, cohort);
  const std::size_t n = files.size();
  std::vector<Eigen::MatrixXd> matrices(n);
  std::vector<std::string> errors(n);
  // Read in parallel into slots; the first problem in subject order is reported (deterministic).
  tbb::parallel_for(std::size_t{0}, n, [&](std::size_t i) {
    try {
      matrices[i] = io::ReadMatrixFile(files[i]);
    } catch (const Error& e) {
      errors[i] = e.what();
    }
  });
  for (std::size_t i = 0; i < n; ++i)
    if (!errors[i].empty()) throw InputError("connectivity:Unreadable", files[i], "subject " + cohort.ids[i] + ": " + errors[i]);
  ConnectivityData data;
  const auto N = static_cast<std::size_t>(n ? matrices[0].rows() : 0);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& M = matrices[i];
    const std::string where = "subject " + cohort.ids[i] + " (" + files[i] + ")";
    if (M.rows() == M.cols() && static_cast<std::size_t>(M.rows()) != N)
      throw InputError("connectivity:Size", where,
                       fmt::format("has {} nodes, but subject {} ({}) has {}; every subject needs the same nodes", M.rows(), cohort.ids[0], files[0], N));
    CheckConnectivityMatrix(M, where);
  }
  ReadNodes(spec, N, files.empty() ? std::string() : files[0], data);
  const std::size_t E = N * (N - 1) / 2;
  data.edges.resize(static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(E));
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t a = 0; a < N; ++a)
      for (std::size_t b = a + 1; b < N; ++b)
        data.edges(static_cast<Eigen::Index>(i), EdgeIndex(a, b, N)) = matrices[i](static_cast<Eigen::Index>(a), static_cast<Eigen::Index>(b));
  return data;
}

ConnectivityKernelPlan PlanConnectivityKernels(const ConnectivityData& data, Kind kind) {
  const std::size_t N = data.nodes.size();
  ConnectivityKernelPlan plan;
  auto touching = [&](const std::vector<char>& in) {  // every edge with at least one end in the set
    std::vector<Eigen::Index> edges;
    for (std::size_t a = 0; a < N; ++a)
      for (std::size_t b = a + 1; b < N; ++b)
        if (in[a] || in[b]) edges.push_back(EdgeIndex(a, b, N));
    return edges;
  };
  switch (kind) {
    case Kind::Node:
      for (std::size_t a = 0; a < N; ++a) {
        std::vector<char> in(N, 0);
        in[a] = 1;
        plan.names.push_back(data.nodes[a]);
        plan.edges.push_back(touching(in));
      }
      break;
    case Kind::Network: {
      std::vector<std::string> networks;  // in order of first appearance in the node table
      for (const auto& net : data.networks)
        if (std::find(networks.begin(), networks.end(), net) == networks.end()) networks.push_back(net);
      for (const auto& net : networks) {
        std::vector<char> in(N, 0);
        for (std::size_t a = 0; a < N; ++a) in[a] = data.networks[a] == net;
        plan.names.push_back(net);
        plan.edges.push_back(touching(in));
      }
      break;
    }
    case Kind::Whole:
      plan.names.push_back("whole");
      plan.edges.push_back(touching(std::vector<char>(N, 1)));
      break;
  }
  return plan;
}

kernels::KernelSet ConnectivityKernels(const config::StudyConfig& study, const config::ConnectivitySpec& spec, const Cohort& cohort) {
  const ConnectivityData data = ReadConnectivity(study, spec, cohort);
  const ConnectivityKernelPlan plan = PlanConnectivityKernels(data, spec.kernels);
  kernels::KernelSet set;
  set.subjects = cohort.ids;
  set.kernels.resize(plan.names.size());
  const auto n = data.edges.rows();
  tbb::parallel_for(std::size_t{0}, plan.names.size(), [&](std::size_t k) {
    const auto& edges = plan.edges[k];
    Eigen::MatrixXd X(n, static_cast<Eigen::Index>(edges.size()));
    for (std::size_t e = 0; e < edges.size(); ++e) X.col(static_cast<Eigen::Index>(e)) = data.edges.col(edges[e]);
    Eigen::MatrixXd K = Eigen::MatrixXd::Zero(n, n);
    K.selfadjointView<Eigen::Lower>().rankUpdate(X);
    set.kernels[k] = K.selfadjointView<Eigen::Lower>();
  });
  for (std::size_t k = 0; k < plan.names.size(); ++k) {
    kernels::KernelInfo info;
    info.name = plan.names[k];
    info.features = static_cast<std::int64_t>(plan.edges[k].size());
    set.info.push_back(info);
  }
  return set;
}

Eigen::MatrixXd WeightEdges(const ConnectivityData& data, const ConnectivityKernelPlan& plan, const Eigen::MatrixXd& subjectWeights) {
  const std::size_t N = data.nodes.size();
  Eigen::VectorXd w = Eigen::VectorXd::Zero(data.edges.cols());
  for (std::size_t k = 0; k < plan.edges.size(); ++k) {
    const Eigen::VectorXd d = subjectWeights.col(static_cast<Eigen::Index>(k));
    if (d.isZero(0.0)) continue;
    for (const auto e : plan.edges[k]) w[e] += d.dot(data.edges.col(e));
  }
  Eigen::MatrixXd W = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(N), static_cast<Eigen::Index>(N));
  for (std::size_t a = 0; a < N; ++a)
    for (std::size_t b = a + 1; b < N; ++b) {
      const double v = w[EdgeIndex(a, b, N)];
      W(static_cast<Eigen::Index>(a), static_cast<Eigen::Index>(b)) = v;
      W(static_cast<Eigen::Index>(b), static_cast<Eigen::Index>(a)) = v;
    }
  return W;
}

}  // namespace neuromkl::pipeline
