// The final models and the outer folds' models, exported for `neuromkl predict` (docs/predict.md).
#include "neuromkl/pipeline/model_export.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <tbb/parallel_for.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/hash.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/core/table.hpp"
#include "neuromkl/export/derivative.hpp"
#include "neuromkl/gram/fold_formed.hpp"
#include "neuromkl/gram/residualise.hpp"
#include "neuromkl/gram/preprocess.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/pipeline/kernel_stage.hpp"
#include "neuromkl/pipeline/sources.hpp"
#include "neuromkl/weights/weights.hpp"
#include "neuromkl/ranks/held_kernels.hpp"
#include "model_arrays.hpp"

namespace neuromkl::pipeline {

namespace modelexport {

Eigen::VectorXi Indices(const std::vector<int>& v) { return Eigen::Map<const Eigen::VectorXi>(v.data(), static_cast<Eigen::Index>(v.size())); }

/// The model's training rows (positions in the kernels' rows): the training set, then unlabelled subjects.
std::vector<int> TrainingRows(const cv::OuterFoldResult& fold) {
  std::vector<int> rows = fold.train;
  rows.insert(rows.end(), fold.unlabelled.begin(), fold.unlabelled.end());
  return rows;
}

std::vector<std::string> CategoricalLevels(const StudyContext& ctx, const std::string& column, const std::vector<int>* rows) {
  std::vector<std::string> levels;
  for (int r : rows ? *rows : ctx.kernelRows)
    if (const std::string& cell = ctx.cohort.covariateCells.at(column)[static_cast<std::size_t>(r)]; !IsMissingCell(cell)) levels.push_back(cell);
  std::sort(levels.begin(), levels.end(), LabelLess);
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  return levels;
}

}  // namespace modelexport

namespace {

using modelexport::CategoricalLevels;
using modelexport::Indices;
using modelexport::ModelEntry;
using modelexport::TrainingRows;

using config::KernelSource;

constexpr double kZeroNormRelative = 1e-12;  // as gram::InverseNorms

/// Kernel k's source name and kind.
std::pair<std::string, std::string> KernelSourceOf(const StudyContext& ctx, std::size_t k) {
  const auto& ks = ctx.ks;
  if (ks.sourceNames.empty()) return {"", config::ToString(ctx.study.kernels.source)};
  std::size_t first = 0;
  for (std::size_t s = 0; s < ks.sourceNames.size(); ++s) {
    if (k < first + ks.sourceKernelCounts[s]) return {ks.sourceNames[s], config::ToString(ctx.study.kernels.sources[s].kind)};
    first += ks.sourceKernelCounts[s];
  }
  return {"", ""};
}

std::string HashOrEmpty(const std::string& path) {
  if (path.empty()) return "";
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) ? HashFile(path).Hex() : "";
}

/// A tabular source's training rows and kernels (sourceName "" for a single-source study): the model's training rows
/// (`rows`, positions in the kernels' rows) imputed, harmonised and standardised with their own fit, as the fold the model
/// was fitted on formed its kernels (FoldFormedKernels), and that fit for new subjects.
exporting::ModelTabularSource TabularSource(const StudyContext& ctx, const config::StudyConfig& study, const std::string& sourceName,
                                            const std::vector<int>& rows) {
  const auto& spec = study.kernels.tabular;
  exporting::ModelTabularSource src;
  src.name = sourceName;
  src.idColumn = spec.idColumn;
  src.standardise = spec.standardise;
  // missing_source "impute": the feature table's rows of the subjects having the source.
  const auto imputed = ctx.cohort.imputedSources.find(sourceName);
  const auto source = std::find_if(ctx.study.kernels.sources.begin(), ctx.study.kernels.sources.end(), [&](const auto& s) { return s.name == sourceName; });
  const Cohort having = imputed != ctx.cohort.imputedSources.end() && source != ctx.study.kernels.sources.end() ? SourceCohort(study, *source, ctx.cohort) : Cohort{};
  const Cohort& over = having.ids.empty() ? ctx.cohort : having;
  const TabularFeatureTable table = TabularFeatures(study, over);
  src.columns = table.columns;
  const auto p = static_cast<Eigen::Index>(table.columns.size());
  const auto* store = ctx.foldFormedKernels.get();
  const auto& formed = store ? store->TabularSources() : std::vector<gram::FoldTabularSource>{};
  const auto found = std::find_if(formed.begin(), formed.end(), [&](const gram::FoldTabularSource& s) { return s.name == sourceName; });
  if (found == formed.end()) {  // the columns as they are: the folds read the stage's kernels
    src.mean = Eigen::VectorXd::Zero(p);
    src.sd = Eigen::VectorXd::Ones(p);
    // A training subject lacking the source (missing_source "impute") keeps a zero row: its kernel values are the means
    // over the training rows having it (trainingHas), as in the folds.
    std::map<std::string, Eigen::Index> rowOf;
    for (std::size_t r = 0; r < over.ids.size(); ++r) rowOf.emplace(over.ids[r], static_cast<Eigen::Index>(r));
    src.rows = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(rows.size()), p);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto at = rowOf.find(ctx.cohort.ids[static_cast<std::size_t>(ctx.kernelRows[static_cast<std::size_t>(rows[i])])]);
      src.trainingHas.push_back(at != rowOf.end() ? 1 : 0);
      if (at != rowOf.end()) src.rows.row(static_cast<Eigen::Index>(i)) = table.X.row(at->second);
    }
    // Kept for every model of a source some subject lacks: predict imputes a new subject lacking it from the training rows.
    if (imputed == ctx.cohort.imputedSources.end()) src.trainingHas.clear();
  } else {
    const auto t = static_cast<std::size_t>(found - formed.begin());
    const std::string where = "the model's training subjects";
    const gram::TabularFoldFit fit = store->FitTabularFold(t, rows, where, true);
    src.mean = fit.fit.mean.transpose();
    src.sd = fit.fit.sd.transpose();
    if (spec.imputeMedian) src.fill = fit.fit.fill.transpose();
    src.rows = store->TabularFoldRows(fit, t, rows, rows.size(), where);
    if (fit.combat) {
      modelexport::EntryColumns columns;
      for (Eigen::Index c = 0; c < p; ++c) columns.voxel.push_back(c), columns.column.push_back(c), columns.scale.push_back(1.0);
      src.harmonisation = modelexport::HarmonisationOf(ctx, *fit.combat, rows, p, columns);
    }
  }
  const std::string prefix = sourceName.empty() ? "" : sourceName + ":";
  for (const TabularKernelSpec& k : TabularKernelSpecs(table, spec.functions))
    for (std::size_t j = 0; j < ctx.ks.set.info.size(); ++j)
      if (ctx.ks.set.info[j].name == prefix + k.name) {
        exporting::ModelTabularKernel m;
        m.kernel = j;
        for (const Eigen::Index c : table.groups[k.group].columns) m.columns.push_back(table.columns[static_cast<std::size_t>(c)]);
        m.function = k.function.Name();
        m.value = k.function.value;
        m.offset = k.function.offset;
        src.kernels.push_back(std::move(m));
      }
  return src;
}

Eigen::MatrixXd ModelBeta(const learners::Model& model, Eigen::Index K) {
  if (!model.Multiclass()) return model.beta;
  Eigen::MatrixXd beta(K, model.coefs.cols());
  for (Eigen::Index c = 0; c < beta.cols(); ++c) beta.col(c) = model.betas.cols() > c ? Eigen::VectorXd(model.betas.col(c)) : model.beta;
  return beta;
}

/// The model card's identity and provenance: study, learner, which model, its parameters, how they were chosen,
/// the inputs' hashes, probabilities and bias correction, and the nested CV's performance.
void DescribeProvenance(const StudyContext& ctx, const exporting::RunRecord& record, const exporting::LearnerRecord& learner,
                        const cv::OuterFoldResult& fold, bool final, exporting::ExportedModel& m) {
  const auto& study = ctx.study;
  m.study = study.name;
  m.learner = learner.outcome.label;
  m.learnerName = learner.outcome.name;
  m.task = config::ToString(study.target.task);
  m.fold = final ? -1 : fold.index;
  m.repeat = final ? 0 : fold.repeat;
  m.which = final ? "final: parameters chosen by the inner CV over every labelled subject, refitted on all of them"
                  : fmt::format("outer fold {}{}: trained on that fold's training subjects", fold.index, fold.repeat > 0 ? fmt::format(" (repeat {})", fold.repeat) : "");
  m.params = learner.outcome.grid.at(fold.chosen);
  m.targetColumn = study.target.column;
  m.positiveClass = ctx.cohort.positiveClass;
  m.negativeClass = ctx.cohort.negativeClass;
  if (study.target.task == learners::Task::Multiclass) m.classNames = ctx.cohort.classNames;
  m.idColumn = study.subjects.idColumn;
  m.version = record.version;
  m.seed = study.seed;
  m.fitStatus = cv::FoldStatus(fold);
  // Probabilities and bias correction as the nested CV made them for this fold (the final model: from the
  // inner-CV out-of-fold values over every labelled subject), so predict gives what the study reported.
  if (fold.platt.Valid()) m.calibration = std::make_pair(fold.platt.a, fold.platt.b);
  if (fold.bias.Valid()) m.biasCorrection = std::make_pair(fold.bias.slope, fold.bias.offset);
  m.info["selection"] = learner.outcome.grid.size() > 1
                            ? fmt::format("inner CV ({}) over the training subjects, criterion {}, ties to the most regularised grid point", record.innerScheme,
                                          study.cv.criterion.empty() ? (study.target.task == learners::Task::Regression ? "mse" : "balanced_accuracy") : study.cv.criterion)
                            : "fixed parameters (no search)";
  if (final) m.info["final_model_inner_cv_seed"] = std::to_string(cv::DeriveSeed(study.cv.seed, 0x46494E414CULL));
  m.info["outer_cv"] = record.outerScheme;
  m.info["inner_cv"] = record.innerScheme;
  m.info["input_hash"] = record.inputHash;
  m.info["kernel_source"] = record.kernelSource;
  if (!record.atlas.empty()) {
    m.info["atlas"] = record.atlas;
    std::string atlasImage = study.atlas.image;
    if (!study.atlas.builtin.empty())
      if (auto f = atlas::BuiltinAtlas(study.atlas.builtin)) atlasImage = f->image;
    m.info["atlas_xxh3"] = HashOrEmpty(atlasImage);
    for (std::size_t p = 0; p < study.atlas.parts.size(); ++p) m.info[fmt::format("atlas_part{}_xxh3", p)] = HashOrEmpty(study.atlas.parts[p].image);
  }
  if (!study.mask.empty()) {
    m.info["mask"] = study.mask;
    m.info["mask_xxh3"] = HashOrEmpty(study.mask);
  }
  m.info["intensity_scaling"] = record.intensityScaling.empty() ? "none" : record.intensityScaling;
  m.expected = learner.summary.pooled;
  m.expectedSd = learner.summary.foldSd;
}

/// The training cohort summary (labelled training subjects): their count, and the target's range and mean or the
/// count of each class.
void SummariseTraining(const StudyContext& ctx, const cv::OuterFoldResult& fold, exporting::ExportedModel& m) {
  const auto& study = ctx.study;
  std::vector<double> y;
  for (int i : fold.train) y.push_back(ctx.cohort.y[i]);
  m.trainingSummary["n"] = static_cast<double>(y.size());
  if (ctx.unlabelledCount > 0 && !fold.unlabelled.empty()) m.trainingSummary["n_unlabelled"] = static_cast<double>(fold.unlabelled.size());
  if (study.target.task == learners::Task::Regression) {
    if (!y.empty()) {
      m.trainingSummary["target_min"] = *std::min_element(y.begin(), y.end());
      m.trainingSummary["target_max"] = *std::max_element(y.begin(), y.end());
      double sum = 0;
      for (double v : y) sum += v;
      m.trainingSummary["target_mean"] = sum / static_cast<double>(y.size());
    }
  } else {
    for (double v : y) {
      const std::string cls = study.target.task == learners::Task::Multiclass ? ctx.cohort.classNames.at(static_cast<std::size_t>(v))
                                                                               : (v > 0 ? ctx.cohort.positiveClass : ctx.cohort.negativeClass);
      m.trainingSummary["n_" + cls] += 1;
    }
  }
}

/// What prediction needs of the fitted model: the kernels (names, sources, kinds, zero-norm floors), kernel weights,
/// bias, coefficients and the training subjects (`rows`, positions in the kernels' rows).
void DescribeFit(const StudyContext& ctx, const learners::Model& model, const std::vector<int>& rows, exporting::ExportedModel& m) {
  const auto& study = ctx.study;
  const auto K = static_cast<Eigen::Index>(ctx.KernelCount());
  const auto l = static_cast<Eigen::Index>(rows.size());
  m.centre = study.kernels.centre;
  m.normalise = study.kernels.normalise;
  for (Eigen::Index k = 0; k < K; ++k) {
    m.kernelNames.push_back(ctx.ks.set.info[static_cast<std::size_t>(k)].name);
    const auto [source, kind] = KernelSourceOf(ctx, static_cast<std::size_t>(k));
    m.kernelSources.push_back(source);
    m.kernelKinds.push_back(kind);
  }
  m.beta = ModelBeta(model, K);
  if (!ctx.nestedOptions.preprocessing.kernelGroups.empty()) {
    // Equal source weighting: the learner saw kernel k scaled by the fold's source scale g_k; the model keeps beta_k g_k.
    const Eigen::VectorXd g = ctx.FoldScales(rows, {});
    m.beta = g.asDiagonal() * m.beta;
    m.info["source_weighting"] = "equal: kernel weights are beta times the training set's source scale g";
  }
  m.bias = model.Multiclass() ? model.biases : Eigen::VectorXd::Constant(1, model.bias);
  m.coef = model.Multiclass() ? model.coefs : Eigen::MatrixXd(model.coef);
  for (int r : rows) m.trainingIds.push_back(ctx.cohort.ids[static_cast<std::size_t>(ctx.kernelRows[static_cast<std::size_t>(r)])]);
  // The zero-norm floor of each kernel: 1e-12 of its largest centred training self-similarity.
  m.floors = Eigen::VectorXd::Zero(K);
  if (m.normalise) {
    // Centred training self-similarities (after the covariates, as the folds prepare them), each kernel's where it is
    // held; a centred compact store gives the same under fold centring.
    const Eigen::VectorXd largest = ctx.LargestTrainingSelfSimilarity(rows);
    for (Eigen::Index k = 0; k < K; ++k) m.floors[k] = l > 0 ? kZeroNormRelative * std::max(0.0, largest[k]) : 0.0;
  }
}

/// The covariates prediction removes, when the study has them: numeric columns, categorical columns with their
/// training levels, and the training rows' design.
void DescribeCovariates(const StudyContext& ctx, const std::vector<int>& rows, exporting::ExportedModel& m) {
  const gram::Covariates* covariates = ctx.nestedOptions.preprocessing.covariates.get();
  if (!covariates) return;
  const auto& spec = ctx.study.covariates;
  m.covariateNumeric = spec.columns;
  for (const auto& col : spec.categorical) m.covariateCategorical.emplace_back(col, CategoricalLevels(ctx, col));
  m.covariateFitOn = ctx.covariates->fitOn;
  // The training rows as this model's fold imputed them (its residualiser fills them alike), and every column's value
  // for new subjects.
  if (spec.imputeMedian) m.covariateFill = gram::ImputationFill(*covariates, Indices(rows), "the model's training subjects", true);
  m.design = gram::FilledRows(*covariates, Indices(rows), spec.imputeMedian ? m.covariateFill : Eigen::RowVectorXd::Zero(covariates->design.cols()));
  for (const int r : rows) m.fitRows.push_back(covariates->fitRow.empty() ? 1 : covariates->fitRow[static_cast<std::size_t>(r)]);
}

/// The target's confounds, when the study has them: the model predicts the target they leave, with the coefficients
/// fitted on its labelled training subjects.
void DescribeTargetConfounds(const StudyContext& ctx, const cv::OuterFoldResult& fold, exporting::ExportedModel& m) {
  if (!ctx.targetConfounds) return;
  const auto& spec = ctx.study.target.confounds;
  const gram::Covariates& confounds = ctx.targetConfounds->covariates;
  exporting::ModelTargetConfounds t;
  t.numeric = spec.columns;
  for (const auto& col : spec.categorical) t.categorical.emplace_back(col, CategoricalLevels(ctx, col, &ctx.cohort.labelledRows));  // the design's rows
  if (spec.imputeMedian) t.fill = gram::ImputationFill(confounds, Indices(fold.train), "the model's training subjects", true);
  t.coefficients = cv::TargetConfoundCoefficients(ctx.cohort.y, confounds, fold.train, "the model's training subjects");
  m.targetConfounds = std::move(t);
}

/// The model's sources: image and connectivity sources (their arrays come later, from ExportModels), tabular sources
/// with their training rows, and the names of precomputed sources.
void DescribeSources(const StudyContext& ctx, const std::vector<int>& rows, exporting::ExportedModel& m) {
  const auto& study = ctx.study;
  auto imageSource = [&](const std::string& name, const std::string& column, const atlas::RegionIndex& regions, kernels::NanPolicy policy,
                         kernels::IntensityScaling scaling) {
    exporting::ModelImageSource src;
    src.name = name;
    src.imageColumn = column;
    src.grid = regions.grid;
    src.space = study.atlas.space.empty() && !study.atlas.builtin.empty() ? "MNIColin27" : study.atlas.space;
    src.nanPolicy = policy == kernels::NanPolicy::Zero ? "zero" : "drop_voxel";
    if (scaling != kernels::IntensityScaling::None)
      src.intensityScaling = scaling == kernels::IntensityScaling::GlobalMean ? "global_mean" : "reference_region";
    m.imageSources.push_back(std::move(src));
  };
  if (study.kernels.source == KernelSource::Sources) {
    std::size_t image = 0;
    for (const auto& s : study.kernels.sources) {
      if (s.kind == KernelSource::Images) {
        const auto& is = ctx.ks.imageSources.at(image++);
        imageSource(s.name, s.imageColumn, is.regions, is.nanPolicy, SourceStudy(study, s).kernels.intensity.scaling);
      }
      if (s.kind == KernelSource::Tabular) m.tabularSources.push_back(TabularSource(ctx, SourceStudy(study, s), s.name, rows));
      if (s.kind == KernelSource::Connectivity) m.connectivitySources.push_back({s.name, s.connectivity.column, {}, {}, {}, {}});
      if (s.kind == KernelSource::Precomputed) m.precomputedSources.push_back(s.name);
    }
  } else if (study.kernels.source == KernelSource::Images) {
    imageSource("", study.subjects.imageColumn, *ctx.ks.regions, study.kernels.nanPolicy, study.kernels.intensity.scaling);
  } else if (study.kernels.source == KernelSource::Tabular) {
    m.tabularSources.push_back(TabularSource(ctx, study, "", rows));
  } else if (study.kernels.source == KernelSource::Connectivity) {
    m.connectivitySources.push_back({"", study.kernels.connectivity.column, {}, {}, {}, {}});
  } else {
    m.precomputedSources.push_back(config::ToString(study.kernels.source));
  }
}

/// The study's precomputed kernels (their files read again, as the kernel stage read them), each with the prefix of its
/// name among the study's kernels ("<source>:" with kernels.sources).
std::vector<std::pair<std::string, kernels::KernelSet>> PrecomputedSets(const StudyContext& ctx) {
  const auto& study = ctx.study;
  std::vector<std::pair<std::string, kernels::KernelSet>> sets;
  if (study.kernels.source == KernelSource::Precomputed) sets.emplace_back("", PrecomputedKernels(study, ctx.cohort));
  for (const auto& s : study.kernels.sources)
    if (study.kernels.source == KernelSource::Sources && s.kind == KernelSource::Precomputed)
      sets.emplace_back(s.name + ":", PrecomputedKernels(SourceStudy(study, s), ctx.cohort));
  return sets;
}

/// Each precomputed kernel's raw block over the model's training rows: a new subject's kernel row is prepared against it
/// as the folds prepared their test rows.
void AddPrecomputedBlocks(const StudyContext& ctx, const std::vector<std::pair<std::string, kernels::KernelSet>>& sets, const std::vector<int>& rows,
                          exporting::ExportedModel& m) {
  Eigen::VectorXi cohortRows(static_cast<Eigen::Index>(rows.size()));
  for (std::size_t i = 0; i < rows.size(); ++i) cohortRows[static_cast<Eigen::Index>(i)] = ctx.kernelRows[static_cast<std::size_t>(rows[i])];
  for (const auto& [prefix, set] : sets)
    for (std::size_t j = 0; j < set.info.size(); ++j)
      for (std::size_t k = 0; k < m.kernelNames.size(); ++k)
        if (m.kernelNames[k] == prefix + set.info[j].name) m.precomputedKernels.push_back({k, set.kernels[j](cohortRows, cohortRows)});
}

}  // namespace

std::vector<cv::OuterFoldResult> FitFinalModels(const StudyContext& ctx) {
  cv::Fold all;
  for (int i = 0; i < ctx.n; ++i) all.train.push_back(i);
  auto outcomes = cv::RunNestedCv(*ctx.kernels, ctx.TargetsOf(ctx.cohort.y), {all}, ctx.FinalInner(), ctx.plans, ctx.nestedOptions);
  std::vector<cv::OuterFoldResult> out;
  for (auto& o : outcomes) {
    out.push_back(std::move(o.folds.at(0)));
    out.back().index = -1;
  }
  return out;
}

exporting::ExportedModel DescribeModel(const StudyContext& ctx, const exporting::RunRecord& record, const exporting::LearnerRecord& learner,
                                       const cv::OuterFoldResult& fold, bool final) {
  const std::vector<int> rows = TrainingRows(fold);
  exporting::ExportedModel m;
  DescribeProvenance(ctx, record, learner, fold, final, m);
  SummariseTraining(ctx, fold, m);
  DescribeFit(ctx, fold.model, rows, m);
  DescribeCovariates(ctx, rows, m);
  DescribeTargetConfounds(ctx, fold, m);
  DescribeSources(ctx, rows, m);
  return m;
}

std::string SubjectImageHash(const std::vector<const std::vector<std::string>*>& imageLists, std::size_t row) {
  Hasher h;
  for (const auto* list : imageLists) {
    const std::string& path = (*list)[row];
    if (path.empty()) h.Update(std::string_view("no image"));  // a source the subject lacks (missing_source "impute")
    else
      for (const auto& f : io::ImageFilePaths(path)) h.Update(HashFile(f));
  }
  return h.Hex();
}

namespace {


/// The models to export, learner by learner: the final model (unless its refit failed), then each outer fold's model
/// that fitted.
std::vector<ModelEntry> ModelEntries(const exporting::RunRecord& record, const std::vector<cv::OuterFoldResult>& finals,
                                     const std::vector<std::string>& labels, const std::vector<std::string>& folders) {
  std::vector<ModelEntry> entries;
  for (std::size_t l = 0; l < record.learners.size(); ++l) {
    if (l < finals.size() && finals[l].error.empty()) entries.push_back({l, &finals[l], true, folders[l], {}});
    else if (l < finals.size())
      spdlog::warn("learner {}: the final model failed ({}); model/{} holds the outer folds' models only", labels[l], finals[l].error, folders[l]);
    for (const auto& f : record.learners[l].outcome.folds)
      if (f.error.empty()) entries.push_back({l, &f, false, folders[l] + "/folds/" + std::to_string(f.index), {}});
  }
  return entries;
}

/// Every entry's model card, with each training subject's image content, so that predict tells a training subject
/// from another cohort's subject of the same id (sub-0001 of two cohorts), and its precomputed kernels' training blocks.
void DescribeEntries(const StudyContext& ctx, const exporting::RunRecord& record, std::vector<ModelEntry>& entries) {
  std::vector<std::string> imageHashes(ctx.cohort.ids.size());
  std::vector<const std::vector<std::string>*> imageLists;
  if (ctx.study.kernels.source == KernelSource::Images) imageLists.push_back(&ctx.cohort.images);
  for (const auto& s : ctx.ks.imageSources) imageLists.push_back(&s.images);
  if (!imageLists.empty())
    for (const int r : ctx.kernelRows) imageHashes[static_cast<std::size_t>(r)] = SubjectImageHash(imageLists, static_cast<std::size_t>(r));
  const auto precomputed = PrecomputedSets(ctx);  // read once for every model
  for (auto& e : entries) {
    e.model = DescribeModel(ctx, record, record.learners[e.learner], *e.fold, e.final);
    AddPrecomputedBlocks(ctx, precomputed, TrainingRows(*e.fold), e.model);
    if (!imageLists.empty())
      for (const int r : TrainingRows(*e.fold))
        e.model.trainingImageHashes.push_back(imageHashes[static_cast<std::size_t>(ctx.kernelRows[static_cast<std::size_t>(r)])]);
  }
}

/// Each learner's final model in the run record: its folder, parameters, fit status and inner-CV scores.
void RecordFinalModels(exporting::RunRecord& record, const std::vector<cv::OuterFoldResult>& finals, const std::vector<std::string>& labels,
                       const std::vector<std::string>& folders) {
  for (std::size_t l = 0; l < labels.size() && l < finals.size(); ++l) {
    auto& fm = record.learners[l].finalModel;
    fm.folder = "model/" + folders[l];
    fm.params = record.learners[l].outcome.grid.at(finals[l].chosen);
    fm.status = cv::FoldStatus(finals[l]);
    fm.innerScores = finals[l].innerScores;
  }
}

}  // namespace

void ExportModels(const StudyContext& ctx, exporting::RunRecord& record, const std::vector<cv::OuterFoldResult>& finals, const std::string& dir) {
  std::vector<std::string> labels;
  for (const auto& lr : record.learners) labels.push_back(lr.outcome.label);
  const auto folders = exporting::BidsLearnerLabels(labels);
  std::vector<ModelEntry> entries = ModelEntries(record, finals, labels, folders);
  DescribeEntries(ctx, record, entries);
  modelexport::AddModelArrays(ctx, entries);
  std::vector<std::pair<std::string, std::string>> index;
  for (std::size_t l = 0; l < labels.size(); ++l) index.emplace_back(labels[l], folders[l]);
  for (const auto& e : entries) exporting::WriteModel(dir + "/model/" + e.folder, e.model);
  RecordFinalModels(record, finals, labels, folders);
  exporting::WriteModelIndex(dir + "/model", index, ctx.study.name);
}

}  // namespace neuromkl::pipeline
