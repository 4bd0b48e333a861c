// `neuromkl predict`: exported models applied to new subjects (docs/predict.md).
#include "neuromkl/pipeline/predict.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <tbb/parallel_for.h>

#include "neuromkl/config/study_config.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/core/table.hpp"
#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/gram/residualise.hpp"
#include "neuromkl/gram/preprocess.hpp"
#include "neuromkl/gram/tabular.hpp"
#include "neuromkl/metrics/metrics.hpp"
#include "neuromkl/pipeline/cohort.hpp"
#include "neuromkl/pipeline/model_export.hpp"
#include "neuromkl/pipeline/output_dir.hpp"
#include "predict_parts.hpp"

namespace neuromkl::pipeline {

namespace fs = std::filesystem;

namespace predicting {

double ParseFinite(const std::string& cell, const std::string& where, const std::string& what) {
  double v = 0;
  if (!ParseFiniteCell(cell, v))
    throw InputError("predict:NotNumeric", where, fmt::format("{} holds \"{}\", expected a finite number", what, cell));
  return v;
}

}  // namespace predicting

namespace {

using predicting::ParseFinite;

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && ToLower(s.substr(s.size() - suffix.size())) == suffix;
}

/// Columns the model reads from the table besides ids and images: covariates, tabular features, connectivity matrix
/// files, the site column and the covariates harmonisation preserves.
std::vector<std::string> NeededColumns(const exporting::ExportedModel& m) {
  std::vector<std::string> cols = m.covariateNumeric;
  for (const auto& [c, levels] : m.covariateCategorical) cols.push_back(c);
  for (const auto& s : m.tabularSources) cols.insert(cols.end(), s.columns.begin(), s.columns.end());
  for (const auto& s : m.connectivitySources) cols.push_back(s.column);
  auto harmonisation = [&](const std::optional<exporting::ModelHarmonisation>& h) {
    if (!h) return;
    const std::vector<std::string> read = h->TableColumns();
    cols.insert(cols.end(), read.begin(), read.end());
  };
  for (const auto& s : m.imageSources) harmonisation(s.harmonisation);
  for (const auto& s : m.tabularSources) harmonisation(s.harmonisation);
  std::sort(cols.begin(), cols.end());
  cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
  return cols;
}

NewSubjects FromTable(const std::string& tablePath, std::string idColumn, const exporting::ExportedModel& model,
                      const std::map<std::string, std::string>& imageColumns) {
  const DelimitedTable table = ReadDelimitedTable(tablePath);
  NewSubjects s;
  s.where = tablePath;
  if (idColumn != "#row" && !table.Find(idColumn)) {
    if (table.Find("participant_id")) idColumn = "participant_id";
    else if (table.Find("subject")) idColumn = "subject";
  }
  const bool byRow = idColumn == "#row";
  const std::size_t idCol = byRow ? 0 : table.Require(idColumn, "subject id column (the model's id column)");
  RowsById(table, idColumn, "subject id column");  // a subject listed twice would be scored (and counted in the metrics) twice
  for (std::size_t r = 0; r < table.rows.size(); ++r) s.ids.push_back(byRow ? std::to_string(r + 1) : table.rows[r][idCol]);
  if (s.ids.empty()) throw InputError("predict:NoSubjects", tablePath, "the table has no subject row");
  for (const auto& [source, column] : imageColumns) {
    const std::size_t col = table.Require(column, source.empty() ? "image column of the model" : "image column of source \"" + source + "\"");
    // A source the model imputes (missing_source "impute"): a subject without an image is scored as the folds imputed one.
    const bool imputes = std::any_of(model.imageSources.begin(), model.imageSources.end(), [&](const auto& src) { return src.name == source && src.imputed.size() > 0; });
    std::vector<std::string> missing;
    auto& paths = s.images[source];
    for (std::size_t r = 0; r < table.rows.size(); ++r) {
      const bool lacking = IsMissingCell(table.rows[r][col]);
      if (lacking) missing.push_back(s.ids[r]);
      paths.push_back(lacking && imputes ? std::string() : ResolveImagePath(tablePath, table.rows[r][col]));
    }
    if (!missing.empty() && imputes) s.lacking[source] = missing;
    else if (!missing.empty())
      throw InputError("predict:MissingImage", tablePath, fmt::format("{} subjects have no image in column \"{}\": {}", missing.size(), column, Shown(missing)));
  }
  for (const auto& column : NeededColumns(model)) {
    const std::size_t col = table.Require(column, "column the model needs (covariate or feature)");
    auto& cells = s.cells[column];
    for (const auto& row : table.rows) cells.push_back(row[col]);
  }
  if (const auto col = table.Find(model.targetColumn)) {
    auto& cells = s.cells[model.targetColumn];
    for (const auto& row : table.rows) cells.push_back(row[*col]);
    // A model of a target adjusted for confounds scores known targets adjusted alike: their columns, where given.
    if (model.targetConfounds)
      for (const auto& column : predicting::TargetConfoundColumns(*model.targetConfounds))
        if (const auto at = table.Find(column); at && !s.cells.count(column)) {
          auto& confound = s.cells[column];
          for (const auto& row : table.rows) confound.push_back(row[*at]);
        }
  }
  // Connectivity matrices: paths relative to the table's folder, as its images.
  for (const auto& src : model.connectivitySources) {
    std::vector<std::string> missing;
    for (std::size_t r = 0; r < s.ids.size(); ++r) {
      auto& cell = s.cells.at(src.column)[r];
      if (IsMissingCell(cell)) missing.push_back(s.ids[r]), cell.clear();
      else cell = ResolveImagePath(tablePath, cell);
    }
    if (!missing.empty() && src.imputed.size() > 0) s.lacking[src.name] = missing;
    else if (!missing.empty())
      throw InputError("predict:MissingConnectivity", tablePath,
                       fmt::format("{} subjects have no connectivity matrix in column \"{}\": {}", missing.size(), src.column, Shown(missing)));
  }
  // The other columns too: options may name one (the reference group of a new site).
  for (std::size_t c = 0; c < table.header.size(); ++c)
    if (!s.cells.count(table.header[c]))
      for (const auto& row : table.rows) s.cells[table.header[c]].push_back(row[c]);
  return s;
}

/// The covariate residualiser of the training rows and the new subjects (kernel-space sources), if the model has covariates.
std::optional<gram::FoldResidualiser> NewResidualiser(const exporting::ExportedModel& m, const Eigen::MatrixXd& newDesign) {
  if (m.design.cols() == 0) return std::nullopt;
  const auto n = newDesign.rows(), l = static_cast<Eigen::Index>(m.trainingIds.size());
  gram::Covariates cov;
  cov.design.resize(l + n, m.design.cols());
  cov.design << m.design, newDesign;
  cov.fitRow = m.fitRows;
  cov.fitRow.resize(static_cast<std::size_t>(l + n), 0);
  const Eigen::VectorXi tr = Eigen::VectorXi::LinSpaced(l, 0, static_cast<int>(l) - 1);
  const Eigen::VectorXi te = Eigen::VectorXi::LinSpaced(n, static_cast<int>(l), static_cast<int>(l + n) - 1);
  return gram::MakeFoldResidualiser(cov, tr, te, "model training rows");
}

/// One kernel-space kernel's part of the scores: its raw training block and new rows, residualised, centred and
/// normalised with the training rows exactly as in the folds, times beta and the coefficients. With `parts` (binary and
/// regression models) the same part also goes to the kernel's column.
void AddKernelScores(const exporting::ExportedModel& m, std::size_t kernel, gram::FoldKernel fk, const std::optional<gram::FoldResidualiser>& residualiser,
                     Eigen::MatrixXd& scores, Eigen::MatrixXd* parts) {
  if (residualiser) gram::ResidualiseFold(fk, *residualiser);
  if (m.centre) gram::CentreFold(fk);
  if (m.normalise) gram::NormaliseFold(fk);
  for (Eigen::Index c = 0; c < scores.cols(); ++c)
    if (const double b = m.beta(static_cast<Eigen::Index>(kernel), c); b != 0.0) {
      scores.col(c) += b * (fk.testTrain * m.coef.col(c));
      if (parts && parts->size() > 0) parts->col(static_cast<Eigen::Index>(kernel)) += b * (fk.testTrain * m.coef.col(c));
    }
}

/// Precomputed and connectivity kernels given as rows (NewSubjects::kernels), checked against the model's training set.
void AddGivenKernelScores(const exporting::ExportedModel& m, const NewSubjects& s, const Eigen::MatrixXd& newDesign, Eigen::MatrixXd& scores,
                          Eigen::MatrixXd* parts) {
  const auto n = static_cast<Eigen::Index>(s.ids.size()), l = static_cast<Eigen::Index>(m.trainingIds.size());
  const auto residualiser = NewResidualiser(m, newDesign);
  for (std::size_t k = 0; k < m.kernelKinds.size(); ++k) {
    // Connectivity kernels are scored from the matrices (AddConnectivityScores); a model without its connectivity arrays
    // takes them as given rows too.
    if (m.kernelKinds[k] != "precomputed" && (m.kernelKinds[k] != "connectivity" || !m.connectivitySources.empty())) continue;
    const auto given = s.kernels.find(m.kernelNames[k]);
    const auto table = s.kernelTables.find(m.kernelNames[k]);
    if (given == s.kernels.end() && table == s.kernelTables.end())
      throw InputError("predict:MissingKernel", s.where,
                       fmt::format("no kernel rows given for kernel {} of the model: predict --kernel-rows {}=FILE (docs/predict.md)", m.kernelNames[k],
                                   m.kernelNames[k]));
    const gram::FoldKernel fk = given != s.kernels.end() ? given->second : predicting::KernelFromTable(m, k, table->second, s);
    if (fk.train.rows() != l || fk.train.cols() != l || fk.testTrain.rows() != n || fk.testTrain.cols() != l || fk.testDiag.size() != n)
      throw InputError("predict:KernelShape", s.where,
                       fmt::format("kernel {}: training block {}x{}, rows {}x{}, self-similarities {}; expected {}x{}, {}x{} and {} "
                                   "(training subjects in the model's order x new subjects)",
                                   m.kernelNames[k], fk.train.rows(), fk.train.cols(), fk.testTrain.rows(), fk.testTrain.cols(), fk.testDiag.size(), l, l, n, l, n));
    AddKernelScores(m, k, fk, residualiser, scores, parts);
  }
}

/// Kernel-space sources (tabular): raw rows imputed, harmonised and standardised with the model's training fit, their
/// kernels against the training rows, preprocessed as in the folds. A missing value is an error unless the model imputes
/// it; a site the model was not trained on has its effects estimated from its own subjects' imputed rows.
void AddTabularScores(const exporting::ExportedModel& m, const NewSubjects& s, const Eigen::MatrixXd& newDesign, Eigen::MatrixXd& scores,
                      Eigen::MatrixXd* parts, std::vector<std::string>& warnings) {
  const auto n = static_cast<Eigen::Index>(s.ids.size());
  const auto residualiser = NewResidualiser(m, newDesign);
  std::vector<std::string> notes;  // (every model of a folder fills the same cells: each named once)
  for (const auto& src : m.tabularSources) {
    // A source the model imputes: a subject with no value in any of its columns lacks it (as the folds imputed such rows).
    std::vector<char> has(static_cast<std::size_t>(n), 1);
    for (Eigen::Index i = 0; i < n && !src.trainingHas.empty(); ++i)
      has[static_cast<std::size_t>(i)] = std::any_of(src.columns.begin(), src.columns.end(), [&](const std::string& column) {
        return !IsMissingCell(s.cells.at(column)[static_cast<std::size_t>(i)]);
      });
    Eigen::MatrixXd Z = Eigen::MatrixXd::Zero(n, static_cast<Eigen::Index>(src.columns.size()));
    for (std::size_t c = 0; c < src.columns.size(); ++c) {
      const auto& cells = s.cells.at(src.columns[c]);
      const auto col = static_cast<Eigen::Index>(c);
      for (Eigen::Index i = 0; i < n; ++i) {
        const std::string& id = s.ids[static_cast<std::size_t>(i)];
        double v = 0;
        if (!has[static_cast<std::size_t>(i)]) continue;
        if (src.fill.size() > 0 && IsMissingCell(cells[static_cast<std::size_t>(i)])) {
          v = src.fill[col];
          notes.push_back(fmt::format("subject {}: feature column \"{}\" is missing; imputed with the training subjects' median {}", id, src.columns[c], v));
        } else {
          v = ParseFinite(cells[static_cast<std::size_t>(i)], s.where, fmt::format("subject {}: feature column \"{}\"", id, src.columns[c]));
        }
        Z(i, col) = v;
      }
    }
    if (src.harmonisation) {
      const auto h = predicting::PrepareHarmonisation(
          *src.harmonisation, src.name.empty() ? "tabular" : src.name, s,
          [&](const std::vector<std::size_t>& fitting, const predicting::SubjectHarmonisation&) {
            return Eigen::MatrixXd(Z(std::vector<Eigen::Index>(fitting.begin(), fitting.end()), Eigen::all));
          },
          notes);
      for (Eigen::Index c = 0; c < Z.cols(); ++c)
        for (Eigen::Index i = 0; i < n; ++i) Z(i, c) = predicting::Harmonised(*h, c, i, Z(i, c));
    }
    for (Eigen::Index c = 0; c < Z.cols(); ++c) Z.col(c) = (Z.col(c).array() - src.mean[c]) / src.sd[c];
    for (Eigen::Index i = 0; i < n; ++i)
      if (!has[static_cast<std::size_t>(i)]) {
        Z.row(i).setZero();
        notes.push_back(fmt::format("subject {}: no value in any column of tabular source {}; scored as the study imputed such subjects, with the "
                                    "mean of the training subjects having it (/kernels/missing_source \"impute\")",
                                    s.ids[static_cast<std::size_t>(i)], src.name));
      }
    for (const auto& k : src.kernels) {
      std::vector<Eigen::Index> idx;
      for (const auto& col : k.columns) idx.push_back(static_cast<Eigen::Index>(std::find(src.columns.begin(), src.columns.end(), col) - src.columns.begin()));
      const Eigen::MatrixXd Xt = src.rows(Eigen::all, idx), Xn = Z(Eigen::all, idx);
      const gram::FeatureKernel function{gram::FeatureKernel::FromName(k.function), k.value, k.offset};
      gram::FoldKernel fk;
      if (src.trainingHas.empty()) {
        fk.train = function.Gram(Xt);
        fk.testTrain = function.Between(Xn, Xt);
        fk.testDiag = function.Self(Xn);
      } else {
        fk = predicting::ImputedFeatureKernel(function, Xt, Xn, src.trainingHas, has);
      }
      AddKernelScores(m, k.kernel, std::move(fk), residualiser, scores, parts);
    }
  }
  predicting::AddOnce(notes, warnings);
}

/// Every model's scores, starting at its bias. A model with precomputed or connectivity kernels needs the new
/// subjects' kernel rows, which a table and images do not give.
std::vector<Eigen::MatrixXd> BiasScores(const std::vector<exporting::ExportedModel>& models, const NewSubjects& subjects) {
  const auto n = static_cast<Eigen::Index>(subjects.ids.size());
  std::vector<Eigen::MatrixXd> scores;
  for (const auto& m : models) {
    if (!m.precomputedSources.empty() && subjects.kernels.empty() && subjects.kernelTables.empty())
      throw InputError("predict:Precomputed", m.study,
                       fmt::format("model of learner {} has precomputed kernel sources ({}) that predict cannot compute from a table and images: "
                                   "give each new subject's kernel row against the training subjects with --kernel-rows KERNEL=FILE (docs/predict.md)",
                                   m.learner, Join(m.precomputedSources, ", ")));
    scores.push_back(m.bias.transpose().replicate(n, 1));
  }
  return scores;
}

/// Each model's covariate design of the new subjects (empty for a model without covariates), and the groups of subjects
/// whose unseen levels' effects are estimated.
std::vector<Eigen::MatrixXd> NewDesigns(const std::vector<exporting::ExportedModel>& models, const NewSubjects& subjects, std::vector<std::string>& warnings,
                                        std::vector<predicting::LevelGroups>& groups) {
  std::vector<Eigen::MatrixXd> designs(models.size());
  groups.assign(models.size(), {});
  std::vector<std::string> notes;
  for (std::size_t q = 0; q < models.size(); ++q) {
    if (models[q].design.cols() == 0) continue;
    std::vector<std::vector<std::string>> unseen(subjects.ids.size());
    designs[q] = predicting::NewCovariateRows({"covariate", 1, models[q].covariateNumeric, models[q].covariateCategorical, models[q].covariateFill},
                                              subjects, notes, &unseen);
    groups[q] = predicting::GroupUnseenLevels(models[q], subjects, unseen);
    for (std::size_t g = 0; g < groups[q].names.size(); ++g)
      notes.push_back(fmt::format("covariate level(s) {} are not among the model's training levels: their effect was estimated from the mean of "
                                  "their {} subjects' images and connections (--unseen-levels estimate)",
                                  groups[q].names[g], groups[q].fitting[g].size()));
  }
  // Models of one study share their covariates: each subject's note once, in table order.
  predicting::AddOnce(notes, warnings);
  return designs;
}

}  // namespace

NewSubjects ReadNewSubjects(const std::string& input, const exporting::ExportedModel& model) {
  std::error_code ec;
  if (!fs::is_regular_file(input, ec)) throw InputError("predict:Missing", input, "the subjects table or study file does not exist");
  std::map<std::string, std::string> imageColumns;
  for (const auto& src : model.imageSources) imageColumns[src.name] = src.imageColumn;
  if (!EndsWith(input, ".json")) return FromTable(input, model.idColumn, model, imageColumns);
  const config::StudyConfig study = config::LoadStudyConfig(input);
  if (study.kernels.source == config::KernelSource::Images && imageColumns.count("")) imageColumns[""] = study.subjects.imageColumn;
  for (const auto& s : study.kernels.sources)
    if (imageColumns.count(s.name) && s.kind == config::KernelSource::Images) imageColumns[s.name] = s.imageColumn;
  if (study.subjects.bids.root.empty()) return FromTable(study.subjects.table, study.subjects.idColumn, model, imageColumns);
  // A BIDS dataset: ids from its participants table, each image found by the study's entities.
  std::map<std::string, std::string> none;
  NewSubjects s = FromTable(study.subjects.table, study.subjects.idColumn, model, none);
  if (model.imageSources.size() > 1) throw InputError("predict:Bids", input, "a BIDS dataset gives one image per subject; this model has several image sources");
  if (!model.imageSources.empty()) s.images[model.imageSources[0].name] = FindBidsImages(study.subjects.bids, s.ids);
  return s;
}

std::vector<Eigen::MatrixXd> ModelScores(const std::vector<exporting::ExportedModel>& models, const NewSubjects& subjects, std::vector<std::string>& warnings,
                                         std::vector<Eigen::MatrixXd>* parts) {
  const auto n = static_cast<Eigen::Index>(subjects.ids.size());
  std::vector<Eigen::MatrixXd> scores = BiasScores(models, subjects);
  if (parts) {  // one decision per subject: its split over the kernels; a multiclass model has none (0 x 0)
    parts->clear();
    for (const auto& m : models) parts->push_back(m.beta.cols() == 1 ? Eigen::MatrixXd::Zero(n, m.beta.rows()) : Eigen::MatrixXd());
  }
  std::vector<predicting::LevelGroups> groups;
  const std::vector<Eigen::MatrixXd> designs = NewDesigns(models, subjects, warnings, groups);
  predicting::AddImageScores(models, subjects, designs, groups, scores, parts, warnings);
  predicting::AddConnectivityScores(models, subjects, designs, groups, scores, parts);
  for (std::size_t q = 0; q < models.size(); ++q) {
    const Eigen::MatrixXd design = designs[q].rows() > 0 ? designs[q] : Eigen::MatrixXd(n, 0);
    Eigen::MatrixXd* modelParts = parts ? &(*parts)[q] : nullptr;
    if (!models[q].tabularSources.empty()) AddTabularScores(models[q], subjects, design, scores[q], modelParts, warnings);
    if (!models[q].precomputedSources.empty()) AddGivenKernelScores(models[q], subjects, design, scores[q], modelParts);
  }
  return scores;
}

namespace {

/// Every model of the folder; they must share task and target (one predictions table per folder).
std::vector<exporting::ExportedModel> ReadModels(const std::string& modelDir) {
  std::vector<exporting::ExportedModel> models;
  for (const auto& dir : exporting::ModelFolders(modelDir)) models.push_back(exporting::ReadModel(dir));
  const auto& first = models.front();
  for (const auto& m : models)
    if (m.task != first.task || m.targetColumn != first.targetColumn)
      throw InputError("model:Mixed", modelDir, "the models of this folder differ in task or target; predict with one model folder at a time");
  return models;
}

/// The new subjects as the first model reads them, with the columns and images of every other model too.
NewSubjects ReadSubjectsOfModels(const std::string& input, const std::vector<exporting::ExportedModel>& models) {
  NewSubjects subjects = ReadNewSubjects(input, models.front());
  for (std::size_t q = 1; q < models.size(); ++q) {  // every model's columns must be there too
    const NewSubjects other = ReadNewSubjects(input, models[q]);
    for (const auto& [col, cells] : other.cells) subjects.cells.emplace(col, cells);
    for (const auto& [src, paths] : other.images) subjects.images.emplace(src, paths);
    for (const auto& [src, ids] : other.lacking) subjects.lacking.emplace(src, ids);
  }
  return subjects;
}

/// The output folder, absolute: the one asked for, else predictions_<study> beside the input.
std::string PredictionsDir(const PredictOptions& options, const std::string& study) {
  std::string outDir = options.outDir;
  if (outDir.empty()) outDir = (fs::path(options.input).parent_path() / ("predictions_" + study)).string();
  return fs::absolute(outDir).lexically_normal().string();
}

/// The new subjects' targets, when the table has the target column, coded as the models code them (classification
/// +1/-1, multiclass the class index); a subject with a missing cell has none.
struct KnownTargets {
  const std::vector<std::string>* cells = nullptr;  ///< the target column's cells (null without the column)
  std::vector<std::optional<double>> y;
  bool any = false;  ///< some subject has a target
  /// What a model's predictions are scored against (gaps, metrics): y, or for a model with target confounds y adjusted
  /// for them (ForModel).
  std::vector<std::optional<double>> scored;
  bool adjusted = false;
};

/// The targets as model m scores them.
KnownTargets ForModel(const exporting::ExportedModel& m, const KnownTargets& targets, const NewSubjects& subjects, std::vector<std::string>& warnings) {
  KnownTargets out = targets;
  out.adjusted = m.targetConfounds.has_value() && targets.any;
  out.scored = out.adjusted ? predicting::AdjustedTargets(m, subjects, targets.y, warnings) : targets.y;
  return out;
}

KnownTargets ReadTargets(const exporting::ExportedModel& first, const NewSubjects& subjects) {
  const std::string& task = first.task;
  const auto n = subjects.ids.size();
  KnownTargets targets;
  targets.y.resize(n);
  const auto targetCells = subjects.cells.find(first.targetColumn);
  if (targetCells != subjects.cells.end()) targets.cells = &targetCells->second;
  auto& y = targets.y;
  if (targets.cells)
    for (std::size_t i = 0; i < n; ++i) {
      const std::string& cell = (*targets.cells)[i];
      if (IsMissingCell(cell)) continue;
      if (task == "regression") y[i] = ParseFinite(cell, subjects.where, fmt::format("subject {}: target column \"{}\"", subjects.ids[i], first.targetColumn));
      else if (task == "classification") {
        if (cell != first.positiveClass && cell != first.negativeClass)
          throw InputError("predict:UnknownClass", subjects.where,
                           fmt::format("subject {}: target \"{}\" is neither class of the model ({}, {})", subjects.ids[i], cell, first.positiveClass, first.negativeClass));
        y[i] = cell == first.positiveClass ? 1.0 : -1.0;
      } else {
        const auto it = std::find(first.classNames.begin(), first.classNames.end(), cell);
        if (it == first.classNames.end())
          throw InputError("predict:UnknownClass", subjects.where,
                           fmt::format("subject {}: target \"{}\" is not a class of the model ({})", subjects.ids[i], cell, Join(first.classNames, ", ")));
        y[i] = static_cast<double>(it - first.classNames.begin());
      }
    }
  targets.any = std::any_of(y.begin(), y.end(), [](const auto& v) { return v.has_value(); });
  targets.scored = y;
  return targets;
}

/// Per model, which new subjects it was trained on. Such a subject is predicted in-sample (the model was fitted to
/// it): its predictions are marked and left out of the metrics, which would otherwise overstate what the model does
/// on new subjects. The same id is the same subject only with the same images (sub-0001 of another cohort is not):
/// image models keep each training subject's image hash.
std::vector<std::vector<char>> InTraining(const std::vector<exporting::ExportedModel>& models, const NewSubjects& subjects) {
  const auto n = subjects.ids.size();
  std::vector<std::vector<char>> trained(models.size(), std::vector<char>(n, 0));
  for (std::size_t q = 0; q < models.size(); ++q) {
    const auto& m = models[q];
    std::map<std::string, std::string> training;  // id -> image hash ("" without one)
    for (std::size_t t = 0; t < m.trainingIds.size(); ++t) training[m.trainingIds[t]] = m.trainingImageHashes.empty() ? "" : m.trainingImageHashes[t];
    std::vector<const std::vector<std::string>*> imageLists;
    for (const auto& src : m.imageSources) imageLists.push_back(&subjects.images.at(src.name));
    for (std::size_t i = 0; i < n; ++i) {
      const auto it = training.find(subjects.ids[i]);
      trained[q][i] = static_cast<char>(it != training.end() && (it->second.empty() || it->second == SubjectImageHash(imageLists, i)));
    }
  }
  return trained;
}

/// The optional columns of predictions.tsv.
struct PredictionColumns {
  bool target = false;       ///< some subject has a target
  bool adjusted = false;     ///< ... and some model scores it adjusted for confounds (target_adjusted)
  bool calibration = false;  ///< some model gives probabilities
  bool correction = false;   ///< some model has a bias correction
  bool inTraining = false;   ///< some subject was a training subject of some model
};

std::vector<std::string> PredictionHeader(const std::string& task, const std::vector<std::string>& classNames, const PredictionColumns& columns) {
  std::vector<std::string> header = {"subject", "learner", "model"};
  if (columns.target) header.push_back("target");
  if (columns.adjusted) header.push_back("target_adjusted");
  if (task == "multiclass") {
    header.push_back("predicted");
    for (const auto& c : classNames) header.push_back("score_" + c);
  } else if (task == "classification") {
    header.insert(header.end(), {"decision", "predicted"});
    if (columns.calibration) header.push_back("probability");
  } else {
    header.push_back("prediction");
    if (columns.target) header.push_back("gap");
    if (columns.correction) header.push_back("prediction_corrected");
    if (columns.correction && columns.target) header.push_back("gap_corrected");
  }
  if (columns.inTraining) header.push_back("in_training");
  return header;
}

/// "final" or "fold<k>": which of its learner's models m is.
std::string ModelLabel(const exporting::ExportedModel& m) {
  return m.fold < 0 ? "final" : fmt::format("fold{}", m.fold);
}

/// Warns (and notes in `warnings`) when model m was trained on some of the new subjects.
void WarnInSample(const exporting::ExportedModel& m, const NewSubjects& subjects, const std::vector<char>& trained, std::vector<std::string>& warnings) {
  const auto n = subjects.ids.size();
  std::vector<std::string> seen;
  for (std::size_t i = 0; i < n; ++i)
    if (trained[i]) seen.push_back(subjects.ids[i]);
  if (!seen.empty()) {
    warnings.push_back(fmt::format("model {} ({}): {} of the {} subjects were among its training subjects ({}): their predictions are "
                                   "in-sample, marked in_training in predictions.tsv and left out of its metrics",
                                   m.learner, ModelLabel(m), seen.size(), n, Shown(seen)));
    spdlog::warn("{}", warnings.back());
  }
}

/// Subject i's row of predictions.tsv under model m (scores S).
std::vector<std::string> PredictionRow(const exporting::ExportedModel& m, const Eigen::MatrixXd& S, const NewSubjects& subjects, std::size_t i,
                                       const KnownTargets& targets, const PredictionColumns& columns, bool inTraining) {
  const std::string& task = m.task;
  const auto& y = targets.y;
  const auto r = static_cast<Eigen::Index>(i);
  std::vector<std::string> row = {subjects.ids[i], m.learner, ModelLabel(m)};
  if (columns.target) row.push_back(y[i] ? (*targets.cells)[i] : "n/a");
  if (columns.adjusted) row.push_back(targets.adjusted && targets.scored[i] ? FormatDouble(*targets.scored[i]) : "n/a");
  if (task == "multiclass") {
    Eigen::Index best = 0;
    S.row(r).maxCoeff(&best);
    row.push_back(m.classNames[static_cast<std::size_t>(best)]);
    for (Eigen::Index c = 0; c < S.cols(); ++c) row.push_back(FormatDouble(S(r, c)));
  } else if (task == "classification") {
    const double f = S(r, 0);
    row.push_back(FormatDouble(f));
    row.push_back(f >= 0 ? m.positiveClass : m.negativeClass);  // as the study's predictions.tsv
    if (columns.calibration) row.push_back(m.calibration ? FormatDouble(1.0 / (1.0 + std::exp(m.calibration->first * f + m.calibration->second))) : "n/a");
  } else {
    const double f = S(r, 0);
    row.push_back(FormatDouble(f));
    const auto& scored = targets.scored[i];
    if (columns.target) row.push_back(scored ? FormatDouble(f - *scored) : "n/a");
    if (columns.correction) {
      const std::optional<double> corrected =
          m.biasCorrection ? std::optional<double>((f - m.biasCorrection->second) / m.biasCorrection->first) : std::nullopt;
      row.push_back(corrected ? FormatDouble(*corrected) : "n/a");
      if (columns.target) row.push_back(corrected && scored ? FormatDouble(*corrected - *scored) : "n/a");
    }
  }
  if (columns.inTraining) row.push_back(inTraining ? "yes" : "no");
  return row;
}

/// Model m's metrics over the subjects with a target that it was not trained on, stored in `performance`; returns the
/// terminal line (with what the nested CV expected).
std::string ModelMetrics(const exporting::ExportedModel& m, const Eigen::MatrixXd& S, const KnownTargets& targets, const std::vector<char>& trained,
                         std::map<std::string, std::map<std::string, double>>& performance) {
  const std::string& task = m.task;
  const auto& y = targets.scored;
  std::vector<Eigen::Index> have;
  for (std::size_t i = 0; i < y.size(); ++i)
    if (y[i] && !trained[i]) have.push_back(static_cast<Eigen::Index>(i));
  if (have.empty())
    return fmt::format("{:<12} no metrics: {}", m.learner,
                       targets.adjusted ? "no subject outside the model's training subjects has a target adjusted for its confounds (a target "
                                          "and every confound column)"
                                        : "every subject with a target was among the model's training subjects");
  const auto h = static_cast<Eigen::Index>(have.size());
  Eigen::VectorXd yy(h), f(h);
  Eigen::MatrixXd sc(h, task == "multiclass" ? S.cols() : 0);
  for (Eigen::Index k = 0; k < h; ++k) {
    yy[k] = *y[static_cast<std::size_t>(have[static_cast<std::size_t>(k)])];
    f[k] = S(have[static_cast<std::size_t>(k)], 0);
    if (task == "multiclass") sc.row(k) = S.row(have[static_cast<std::size_t>(k)]);
  }
  if (task == "multiclass") f = metrics::PredictedClasses(sc);
  const learners::Task t = task == "multiclass" ? learners::Task::Multiclass : task == "classification" ? learners::Task::Classification : learners::Task::Regression;
  learners::Targets known{t, yy, static_cast<int>(m.classNames.size())};
  auto& perf = performance[m.learner + (m.fold < 0 ? "" : " " + ModelLabel(m))];
  perf = cv::Metrics(known, yy, f, sc);
  if (task == "regression")
    return fmt::format("{:<12} r {:.3f}, R^2 {:.3f}, MAE {:.4g} on {} subjects (expected from the nested CV: r {:.3f}, R^2 {:.3f})", m.learner,
                       perf["pearson_r"], perf["r2"], perf["mae"], h, m.expected.count("pearson_r") ? m.expected.at("pearson_r") : NAN,
                       m.expected.count("r2") ? m.expected.at("r2") : NAN);
  return fmt::format("{:<12} balanced accuracy {:.3f}, accuracy {:.3f} on {} subjects (expected from the nested CV: balanced accuracy {:.3f})",
                     m.learner, perf["balanced_accuracy"], perf["accuracy"], h,
                     m.expected.count("balanced_accuracy") ? m.expected.at("balanced_accuracy") : NAN);
}

/// Each subject's decision value under each binary or regression model split over the model's kernels (as the
/// study's attributions.tsv): bias + the parts = the decision value. Models of other kernels than the first's are
/// left out (one header per table).
exporting::PredictionRows AttributionRows(const std::vector<exporting::ExportedModel>& models, const std::vector<Eigen::MatrixXd>& scores,
                                          const std::vector<Eigen::MatrixXd>& parts, const NewSubjects& subjects) {
  exporting::PredictionRows table;
  table.header = {"subject", "learner", "model", "decision", "bias"};
  table.header.insert(table.header.end(), models.front().kernelNames.begin(), models.front().kernelNames.end());
  for (std::size_t q = 0; q < models.size(); ++q) {
    if (parts[q].size() == 0 || models[q].kernelNames != models.front().kernelNames) continue;
    for (Eigen::Index i = 0; i < parts[q].rows(); ++i) {
      std::vector<std::string> row = {subjects.ids[static_cast<std::size_t>(i)], models[q].learner, ModelLabel(models[q]), FormatDouble(scores[q](i, 0)),
                                      FormatDouble(models[q].bias[0])};
      for (Eigen::Index k = 0; k < parts[q].cols(); ++k) row.push_back(FormatDouble(parts[q](i, k)));
      table.rows.push_back(std::move(row));
    }
  }
  return table;
}

}  // namespace

PredictOutcome Predict(const PredictOptions& options) {
  const std::vector<exporting::ExportedModel> models = ReadModels(options.modelDir);
  const auto& first = models.front();
  NewSubjects subjects = ReadSubjectsOfModels(options.input, models);
  subjects.unseenLevels = options.unseenLevels;
  subjects.newSites = options.newSites;
  subjects.newSiteMinimum = options.newSiteMinimum;
  subjects.newSiteReference = options.newSiteReference;
  for (const auto& [kernel, file] : options.kernelRows) {
    const bool known = std::any_of(models.begin(), models.end(), [&](const auto& m) {
      return std::any_of(m.precomputedKernels.begin(), m.precomputedKernels.end(), [&](const auto& pk) { return m.kernelNames[pk.kernel] == kernel; });
    });
    if (!known) {
      std::vector<std::string> names;
      for (const auto& m : models)
        for (const auto& pk : m.precomputedKernels) names.push_back(m.kernelNames[pk.kernel]);
      std::sort(names.begin(), names.end());
      names.erase(std::unique(names.begin(), names.end()), names.end());
      throw InputError("predict:UnknownKernel", options.modelDir,
                       fmt::format("--kernel-rows names kernel \"{}\", which is not a precomputed kernel of the models (theirs: {})", kernel,
                                   names.empty() ? std::string("none") : Join(names, ", ")));
    }
    subjects.kernelTables[kernel] = ReadKernelRowTable(file);
  }
  std::vector<std::string> inputs = {options.modelDir, options.input};
  for (const auto& [src, paths] : subjects.images) inputs.insert(inputs.end(), paths.begin(), paths.end());
  AtomicOutputDir out(PredictionsDir(options, first.study), options.force, inputs);
  std::vector<std::string> warnings;
  std::vector<Eigen::MatrixXd> parts;
  const auto scores = ModelScores(models, subjects, warnings, &parts);
  for (const auto& [source, ids] : subjects.lacking)
    warnings.push_back(fmt::format("source {}: {} subject(s) without its data ({}) were scored as the study imputed such subjects, with the mean "
                                   "of the training subjects having it (/kernels/missing_source \"impute\"): their other sources carry their prediction",
                                   source.empty() ? "images" : source, ids.size(), Shown(ids)));
  for (const auto& w : warnings) spdlog::warn("{}", w);

  const auto n = subjects.ids.size();
  const KnownTargets targets = ReadTargets(first, subjects);
  const std::vector<std::vector<char>> trained = InTraining(models, subjects);
  PredictionColumns columns;
  columns.target = targets.any;
  std::vector<KnownTargets> scored;
  for (const auto& m : models) {
    scored.push_back(ForModel(m, targets, subjects, warnings));
    columns.adjusted |= scored.back().adjusted;
  }
  for (const auto& m : models) columns.calibration |= m.calibration.has_value(), columns.correction |= m.biasCorrection.has_value();
  for (const auto& t : trained) columns.inTraining |= std::find(t.begin(), t.end(), char{1}) != t.end();
  exporting::PredictionRows rows;
  rows.header = PredictionHeader(first.task, first.classNames, columns);
  std::map<std::string, std::map<std::string, double>> performance;
  std::vector<std::string> lines;
  for (std::size_t q = 0; q < models.size(); ++q) {
    WarnInSample(models[q], subjects, trained[q], warnings);
    for (std::size_t i = 0; i < n; ++i) rows.rows.push_back(PredictionRow(models[q], scores[q], subjects, i, scored[q], columns, trained[q][i] != 0));
    if (targets.any) lines.push_back(ModelMetrics(models[q], scores[q], scored[q], trained[q], performance));
  }
  std::map<std::string, std::string> summary = {{"format", "neuromkl-predictions"},
                                                {"model", fs::absolute(options.modelDir).lexically_normal().string()},
                                                {"input", fs::absolute(options.input).lexically_normal().string()},
                                                {"study", first.study},
                                                {"task", first.task},
                                                {"subjects", std::to_string(n)},
                                                {"learners", std::to_string(models.size())}};
  const bool harmonised = std::any_of(models.begin(), models.end(), [](const auto& m) {
    return std::any_of(m.imageSources.begin(), m.imageSources.end(), [](const auto& src) { return src.harmonisation.has_value(); });
  });
  if (std::any_of(models.begin(), models.end(), [](const auto& m) { return !m.covariateCategorical.empty(); }))
    summary["unseen_levels"] = options.unseenLevels == NewSubjects::UnseenLevels::Refuse      ? "refuse"
                               : options.unseenLevels == NewSubjects::UnseenLevels::Reference ? "reference"
                                                                                              : "estimate";
  if (harmonised) {
    const auto& [column, value] = options.newSiteReference;
    summary["new_sites"] = options.newSites == NewSubjects::NewSites::Refuse
                               ? "refuse"
                               : fmt::format("estimate: a site the models were not trained on gets ComBat effects estimated from its own subjects "
                                             "({}at least {}); the warnings name each such site",
                                             column.empty() ? "" : column + " = " + value + ", ", options.newSiteMinimum);
  }
  exporting::WritePredictionOutputs(out.Path(), rows, summary, performance, warnings);
  if (const exporting::PredictionRows attributions = AttributionRows(models, scores, parts, subjects); !attributions.rows.empty())
    exporting::WriteTsv(out.Path() + "/attributions.tsv", attributions);
  out.Commit();
  lines.insert(lines.begin(), fmt::format("Predicted {} subjects with {} model(s) of study {}", n, models.size(), first.study));
  return {out.FinalPath(), lines};
}

}  // namespace neuromkl::pipeline
