// `neuromkl predict --kernel-rows`: precomputed kernels' rows of new subjects, read from tables and matched to each
// model's training subjects by id (docs/predict.md).
#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/core/table.hpp"
#include "neuromkl/gram/fold_formed.hpp"
#include "neuromkl/pipeline/cohort.hpp"
#include "predict_parts.hpp"

namespace neuromkl::pipeline {

KernelRowTable ReadKernelRowTable(const std::string& file) {
  const DelimitedTable table = ReadDelimitedTable(file);
  KernelRowTable out;
  out.file = file;
  const std::size_t self = table.Require("self", "self-similarity column of the kernel rows");
  if (self == 0) throw InputError("predict:KernelRows", file, "the first column holds the new subjects' ids, \"self\" their self-similarities");
  std::vector<std::size_t> columns;
  for (std::size_t c = 1; c < table.header.size(); ++c) {
    if (c == self) continue;
    out.columnOf[table.header[c]] = static_cast<Eigen::Index>(columns.size());
    columns.push_back(c);
  }
  out.rowOf = RowsById(table, table.header[0], "new subjects' ids, the first column of the kernel rows");
  out.values.resize(static_cast<Eigen::Index>(table.rows.size()), static_cast<Eigen::Index>(columns.size()));
  out.self.resize(static_cast<Eigen::Index>(table.rows.size()));
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    const auto& row = table.rows[r];
    const std::string where = fmt::format("{}:{}", file, table.lineNumbers[r]);
    auto number = [&](std::size_t c) {
      double v = 0;
      if (!ParseFiniteCell(row[c], v))
        throw InputError("predict:KernelRows", where, fmt::format("subject {}, column \"{}\": \"{}\", expected a finite number", row[0], table.header[c], row[c]));
      return v;
    };
    out.self[static_cast<Eigen::Index>(r)] = number(self);
    for (std::size_t j = 0; j < columns.size(); ++j) out.values(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(j)) = number(columns[j]);
  }
  return out;
}

namespace predicting {

gram::FoldKernel ImputedFeatureKernel(const gram::FeatureKernel& function, const Eigen::MatrixXd& Xt, const Eigen::MatrixXd& Xn,
                                      const std::vector<char>& trainingHas, const std::vector<char>& newHas) {
  const Eigen::Index l = Xt.rows(), n = Xn.rows();
  Eigen::MatrixXd rows(l + n, Xt.cols());
  rows << Xt, Xn;
  Eigen::MatrixXd K = function.Gram(rows);
  std::vector<char> present = trainingHas;
  present.insert(present.end(), newHas.begin(), newHas.end());
  if (!gram::ImputeLackingRows(K, present, static_cast<std::size_t>(l)))
    throw InputError("model:Corrupt", "tabular source", "no training subject of the model has the source, so the subjects lacking it cannot be imputed");
  gram::FoldKernel fk;
  fk.train = K.topLeftCorner(l, l);
  fk.testTrain = K.bottomLeftCorner(n, l);
  fk.testDiag = K.diagonal().tail(n);
  return fk;
}

gram::FoldKernel KernelFromTable(const exporting::ExportedModel& m, std::size_t kernel, const KernelRowTable& t, const NewSubjects& s) {
  const auto train = std::find_if(m.precomputedKernels.begin(), m.precomputedKernels.end(), [&](const auto& pk) { return pk.kernel == kernel; });
  if (train == m.precomputedKernels.end())
    throw InputError("predict:NoTrainingBlock", m.study,
                     fmt::format("model {} has no training block for kernel {} (exported before predict read kernel rows): run the study again "
                                 "to export it",
                                 m.learner, m.kernelNames[kernel]));
  std::vector<std::string> missingSubjects, missingTraining;
  std::vector<Eigen::Index> rows, columns;
  for (const auto& id : s.ids) {
    const auto it = t.rowOf.find(id);
    if (it == t.rowOf.end()) missingSubjects.push_back(id);
    else rows.push_back(static_cast<Eigen::Index>(it->second));
  }
  for (const auto& id : m.trainingIds) {
    const auto it = t.columnOf.find(id);
    if (it == t.columnOf.end()) missingTraining.push_back(id);
    else columns.push_back(it->second);
  }
  if (!missingSubjects.empty())
    throw InputError("predict:KernelRows", t.file,
                     fmt::format("kernel {}: no row for {} of the new subjects: {}", m.kernelNames[kernel], missingSubjects.size(), Shown(missingSubjects)));
  if (!missingTraining.empty())
    throw InputError("predict:KernelRows", t.file,
                     fmt::format("kernel {}: no column for {} of the {} training subjects of model {} ({}): {}; the header names every training "
                                 "subject (training.subjects in model.json) after the ids and \"self\"",
                                 m.kernelNames[kernel], missingTraining.size(), m.trainingIds.size(), m.learner, m.fold < 0 ? "final" : fmt::format("fold {}", m.fold),
                                 Shown(missingTraining)));
  gram::FoldKernel fk;
  fk.train = train->train;
  fk.testTrain = t.values(rows, columns);
  fk.testDiag = t.self(rows);
  return fk;
}

}  // namespace predicting

}  // namespace neuromkl::pipeline
