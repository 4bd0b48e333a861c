// The arrays of an exported model's image and connectivity sources (model_arrays.hpp).
#include "model_arrays.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "neuromkl/core/strings.hpp"
#include "neuromkl/gram/fold_formed.hpp"
#include "neuromkl/gram/residualise.hpp"
#include "neuromkl/pipeline/connectivity.hpp"
#include "neuromkl/pipeline/kernel_stage.hpp"
#include "neuromkl/pipeline/sources.hpp"
#include "neuromkl/weights/weights.hpp"

namespace neuromkl::pipeline::modelexport {

namespace {

/// One image source as the model arrays see it: its regions, images, kernels and intensity settings.
struct ImageSourceView {
  std::string name;  // as the harmonised sources name it: "images" for a single-source study
  const atlas::RegionIndex* regions;
  const std::vector<std::string>* images;  // per cohort row
  std::size_t first, count;
  kernels::NanPolicy policy;
  const std::vector<double>* intensityScale;  // per cohort row; empty = none
  config::StudyConfig study;                  // the source's view of the study (its intensity settings)
};

/// The study's image sources, in the order of the models' imageSources.
std::vector<ImageSourceView> ImageSourceViews(const StudyContext& ctx) {
  const auto& study = ctx.study;
  const auto& ks = ctx.ks;
  std::vector<ImageSourceView> views;
  if (ks.regions)  // (the kernels may have moved to ctx: counted by their info)
    views.push_back({"images", &*ks.regions, &ctx.cohort.images, 0, ks.set.info.size(), study.kernels.nanPolicy, &ks.set.intensityScale, study});
  for (const auto& s : ks.imageSources) {
    config::StudyConfig sourceStudy = study;
    for (const auto& spec : study.kernels.sources)
      if (spec.name == s.name) sourceStudy = SourceStudy(study, spec);
    views.push_back({s.name, &s.regions, &s.images, s.firstKernel, s.kernelCount, s.nanPolicy, &s.intensityScale, sourceStudy});
  }
  return views;
}

/// What model e needs of its images, as weights on the kernels' rows: S (rows x (1 + p)) gives each voxel's training
/// mean and covariate coefficients, D[c] (rows x kernels) each class's primal weights.
struct RowWeights {
  Eigen::MatrixXd S;
  std::vector<Eigen::MatrixXd> D;
};

RowWeights ModelRowWeights(const StudyContext& ctx, const ModelEntry& e) {
  const auto& study = ctx.study;
  const gram::Covariates* covariates = ctx.nestedOptions.preprocessing.covariates.get();
  const std::vector<int> rows = TrainingRows(*e.fold);
  const auto l = static_cast<double>(rows.size());
  const Eigen::Index p = covariates ? covariates->design.cols() : 0;
  RowWeights out;
  out.S = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(ctx.kernelRows.size()), 1 + p);
  if (study.kernels.centre)
    for (int r : rows) out.S(r, 0) = 1.0 / l;
  if (covariates) {
    const Eigen::VectorXi none(0);
    const auto res = gram::MakeFoldResidualiser(*covariates, Indices(rows), none);
    const Eigen::RowVectorXd abar = res.trainA.colwise().mean();
    for (std::size_t k = 0; k < res.fitPositions.size(); ++k) {
      const int r = rows[static_cast<std::size_t>(res.fitPositions[k])];
      if (study.kernels.centre) out.S(r, 0) -= abar[static_cast<Eigen::Index>(k)];
      for (Eigen::Index j = 0; j < p; ++j) out.S(r, 1 + j) = res.P(j, static_cast<Eigen::Index>(k));
    }
  }
  const Eigen::MatrixXd beta = e.model.beta;
  for (Eigen::Index c = 0; c < beta.cols(); ++c) {
    const Eigen::VectorXd coef = e.model.coef.col(c);
    out.D.push_back(ctx.SubjectWeights({rows, {}, coef, beta.col(c)}));
  }
  return out;
}

/// Model e's row weights as one source sees them (`first`, `count`: its kernels). Where the source imputes subjects lacking
/// it (`present`, per kernel row), each lacking training row stands for the mean of the training rows having it, so its
/// weights move to them (gram::MoveImputedWeights: the same arrays from the data that exist); S gains a last column, the
/// weights of that mean, which is what a new subject lacking the source takes.
RowWeights SourceRowWeights(const RowWeights& w, const std::vector<int>& train, const std::vector<char>& present, std::size_t first, std::size_t count) {
  if (std::all_of(present.begin(), present.end(), [](char has) { return has != 0; })) return w;
  RowWeights out;
  out.S = w.S;
  gram::MoveImputedWeights(out.S, present, train);
  out.S.conservativeResize(Eigen::NoChange, w.S.cols() + 1);
  out.S.rightCols(1).setZero();
  double having = 0;
  for (const int r : train) having += present[static_cast<std::size_t>(r)] ? 1 : 0;
  for (const int r : train)
    if (present[static_cast<std::size_t>(r)]) out.S(r, w.S.cols()) = 1.0 / having;
  for (const auto& d : w.D) {
    Eigen::MatrixXd own = d.middleCols(static_cast<Eigen::Index>(first), static_cast<Eigen::Index>(count));
    gram::MoveImputedWeights(own, present, train);
    out.D.push_back(Eigen::MatrixXd::Zero(d.rows(), d.cols()));
    out.D.back().middleCols(static_cast<Eigen::Index>(first), static_cast<Eigen::Index>(count)) = own;
  }
  return out;
}

/// The same for one image source's images, on cohort rows (the images are read by cohort row).
weights::ModelImageRequest ImageRequest(const StudyContext& ctx, const ImageSourceView& view, const RowWeights& w) {
  const auto nRows = static_cast<Eigen::Index>(ctx.cohort.ids.size());
  weights::ModelImageRequest req;
  // Kernel rows -> cohort rows (the image list covers every subject of the table: the NaN rule saw them all),
  // intensity-scaled kernels are kernels of x_i / s_i.
  auto toCohort = [&](const Eigen::MatrixXd& A) {
    Eigen::MatrixXd B = Eigen::MatrixXd::Zero(nRows, A.cols());
    for (std::size_t i = 0; i < ctx.kernelRows.size(); ++i) {
      const auto r = static_cast<std::size_t>(ctx.kernelRows[i]);
      B.row(static_cast<Eigen::Index>(r)) = A.row(static_cast<Eigen::Index>(i));
      if (!view.intensityScale->empty()) B.row(static_cast<Eigen::Index>(r)) /= (*view.intensityScale)[r];
    }
    return B;
  };
  req.voxelWeights = toCohort(w.S);
  for (const auto& d : w.D) req.kernelWeights.push_back(toCohort(d.middleCols(static_cast<Eigen::Index>(view.first), static_cast<Eigen::Index>(view.count))));
  return req;
}

/// Image source v of one model: the voxels (index, then the arrays at each voxel), the (kernel, voxel) entries with
/// their weights and primal weights, and the voxels of intensity scaling.
void StoreImageArrays(const ImageSourceView& view, const weights::ModelImageLayout& layout, const weights::ModelImageArrays& a,
                      const std::vector<std::int64_t>& scaleVoxels, exporting::ModelImageSource& src) {
  const auto U = static_cast<Eigen::Index>(layout.voxels.size()), E = static_cast<Eigen::Index>(layout.entryKernel.size());
  src.voxels.resize(U, 1 + a.atVoxels.cols());
  for (Eigen::Index u = 0; u < U; ++u) src.voxels(u, 0) = static_cast<double>(layout.voxels[static_cast<std::size_t>(u)]);
  src.voxels.rightCols(a.atVoxels.cols()) = a.atVoxels;
  src.weights.resize(E, 3 + a.atEntries.cols());
  for (Eigen::Index e = 0; e < E; ++e) {
    src.weights(e, 0) = static_cast<double>(view.first + layout.entryKernel[static_cast<std::size_t>(e)]);
    src.weights(e, 1) = static_cast<double>(layout.entryVoxel[static_cast<std::size_t>(e)]);
    src.weights(e, 2) = layout.entryWeight[static_cast<std::size_t>(e)];
  }
  src.weights.rightCols(a.atEntries.cols()) = a.atEntries;
  src.scaleVoxels = scaleVoxels;
}

/// The harmonised source of a view, or -1.
int HarmonisedSourceIndex(const StudyContext& ctx, const ImageSourceView& view) {
  if (!ctx.foldFormedKernels) return -1;
  const auto& sources = ctx.foldFormedKernels->Sources();
  for (std::size_t s = 0; s < sources.size(); ++s)
    if (sources[s].name == view.name) return static_cast<int>(s);
  return -1;
}

EntryColumns HarmonisedColumns(const StudyContext& ctx, const ImageSourceView& view, const weights::ModelImageLayout& layout) {
  const auto& regions = view.regions->regions;
  EntryColumns out;
  for (std::size_t entry = 0; entry < layout.entryKernel.size(); ++entry) {
    const std::size_t k = view.first + layout.entryKernel[entry];
    const gram::KernelOrigin& origin = ctx.foldFormedKernels->Origins().at(k);
    const auto region = std::find_if(regions.begin(), regions.end(), [&](const auto& r) { return r.label == ctx.ks.set.info[k].label; });
    const std::int64_t voxel = layout.voxels[layout.entryVoxel[entry]];
    if (region == regions.end()) throw std::logic_error("model export: kernel " + ctx.ks.set.info[k].name + " has no region");
    const auto at = std::lower_bound(region->voxels.begin(), region->voxels.end(), voxel);
    const Eigen::Index c = origin.begin + static_cast<Eigen::Index>(at - region->voxels.begin());
    if (at == region->voxels.end() || *at != voxel || c >= origin.end)
      throw std::logic_error(fmt::format("model export: voxel {} of kernel {} is not among its harmonised columns", voxel, ctx.ks.set.info[k].name));
    out.voxel.push_back(static_cast<Eigen::Index>(layout.entryVoxel[entry]));
    out.column.push_back(c);
    out.scale.push_back(static_cast<double>(std::sqrt(static_cast<float>(layout.entryWeight[entry]))));  // as the columns were scaled
  }
  return out;
}

}  // namespace

exporting::ModelHarmonisation HarmonisationOf(const StudyContext& ctx, const gram::ComBatModel& fit, const std::vector<int>& rows, Eigen::Index U,
                                              const EntryColumns& columns) {
  const gram::Harmonisation& design = *ctx.harmonisation;
  const Eigen::Index q = fit.beta.rows();
  exporting::ModelHarmonisation h;
  h.siteColumn = ctx.study.harmonisation.siteColumn;
  for (const int site : fit.sites) h.sites.push_back(design.siteNames.at(static_cast<std::size_t>(site)));
  h.siteCounts.assign(fit.fitCount.begin(), fit.fitCount.end());
  h.empiricalBayes = design.options.empiricalBayes;
  h.fitOn = design.fitOn;
  const auto& preserve = ctx.study.harmonisation.preserve;
  h.covariateNumeric = preserve.columns;
  for (const auto& col : preserve.categorical) h.covariateCategorical.emplace_back(col, CategoricalLevels(ctx, col));
  if (preserve.imputeMedian)
    h.covariateFill = gram::ImputationFill(gram::Covariates{design.covariates, {}, design.categoryOf}, Indices(rows), "the model's training subjects", true);
  h.voxels.resize(U, 3 + q);
  h.gammaStar.resize(fit.gammaStar.rows(), U);
  h.delta2Star.resize(fit.delta2Star.rows(), U);
  for (std::size_t entry = 0; entry < columns.column.size(); ++entry) {
    const Eigen::Index u = columns.voxel[entry];
    const Eigen::Index c = columns.column[entry];
    const double scale = columns.scale[entry];
    h.voxels(u, 0) = fit.alpha[c] / scale;
    h.voxels(u, 1) = fit.sigma[c] / scale;
    h.voxels(u, 2) = fit.passThrough[static_cast<std::size_t>(c)] ? 1.0 : 0.0;
    h.voxels.row(u).tail(q) = fit.beta.col(c).transpose() / scale;
    h.gammaStar.col(u) = fit.gammaStar.col(c);
    h.delta2Star.col(u) = fit.delta2Star.col(c);
  }
  return h;
}

namespace {

/// Harmonised source `source` (view `v` of the models): each model's arrays are made from the training images as its own
/// ComBat fit harmonised them, not from the raw images, and the model keeps that fit for predict. Models with the same
/// training subjects (every learner's final model; every learner's model of one outer fold) share one fit and one pass
/// over the harmonised voxels.
void HarmonisedImageArrays(const StudyContext& ctx, const ImageSourceView& view, std::size_t source, const weights::ModelImageLayout& layout,
                           const std::vector<RowWeights>& rowWeights, std::vector<ModelEntry>& entries, std::size_t v) {
  const gram::FoldFormedKernels& store = *ctx.foldFormedKernels;
  const EntryColumns columnOf = HarmonisedColumns(ctx, view, layout);
  std::map<std::vector<int>, std::vector<std::size_t>> byRows;
  for (std::size_t q = 0; q < entries.size(); ++q) byRows[TrainingRows(*entries[q].fold)].push_back(q);
  const auto n = static_cast<Eigen::Index>(ctx.kernelRows.size()), K = static_cast<Eigen::Index>(ctx.KernelCount());
  const auto first = static_cast<Eigen::Index>(view.first), count = static_cast<Eigen::Index>(view.count);
  for (const auto& [rows, models] : byRows) {
    const ModelEntry& e = entries[models.front()];
    const std::string where = e.final ? "the final models' training subjects" : fmt::format("outer fold {}'s training subjects", e.fold->index);
    const gram::ComBatModel fit = store.FitFoldFor(source, rows, rows, where);
    std::vector<Eigen::MatrixXd> perKernel;  // per model: every S column on each kernel of the source, then each class's D
    std::vector<std::size_t> offset;
    for (const std::size_t q : models) {
      offset.push_back(perKernel.size());
      for (Eigen::Index j = 0; j < rowWeights[q].S.cols(); ++j) {
        perKernel.push_back(Eigen::MatrixXd::Zero(n, K));
        perKernel.back().middleCols(first, count) = rowWeights[q].S.col(j).replicate(1, count);
      }
      for (const auto& d : rowWeights[q].D) perKernel.push_back(d);
    }
    std::vector<const Eigen::MatrixXd*> pointers;
    for (const auto& m : perKernel) pointers.push_back(&m);
    const std::vector<Eigen::VectorXd> columns = store.ColumnWeights(fit, source, rows, pointers, where);
    const exporting::ModelHarmonisation harmonisation = HarmonisationOf(ctx, fit, rows, static_cast<Eigen::Index>(layout.voxels.size()), columnOf);
    for (std::size_t m = 0; m < models.size(); ++m) {
      const RowWeights& w = rowWeights[models[m]];
      exporting::ModelImageSource& src = entries[models[m]].model.imageSources.at(v);
      const Eigen::Index p = w.S.cols() - 1;
      for (std::size_t entry = 0; entry < columnOf.column.size(); ++entry) {
        const auto u = static_cast<Eigen::Index>(layout.entryVoxel[entry]);
        const Eigen::Index c = columnOf.column[entry];
        const double scale = columnOf.scale[entry];
        for (Eigen::Index j = 0; j <= p; ++j) src.voxels(u, 1 + j) = columns[offset[m] + static_cast<std::size_t>(j)][c] / scale;
        for (Eigen::Index cls = 0; cls < static_cast<Eigen::Index>(w.D.size()); ++cls)
          src.weights(static_cast<Eigen::Index>(entry), 3 + cls) = scale * columns[offset[m] + static_cast<std::size_t>(1 + p + cls)][c];
      }
      src.harmonisation = harmonisation;
    }
  }
}

/// Image arrays: per image source, every model's mean, covariate coefficient images and primal weights in one pass
/// over the images.
void AddImageArrays(const StudyContext& ctx, const std::vector<RowWeights>& rowWeights, std::vector<ModelEntry>& entries) {
  const auto& ks = ctx.ks;
  const auto views = ImageSourceViews(ctx);
  for (std::size_t v = 0; v < views.size(); ++v) {
    const auto& view = views[v];
    const std::vector<char> present = ctx.SourceRowsPresent(view.name);
    std::vector<weights::ModelImageRequest> requests;
    for (std::size_t q = 0; q < entries.size(); ++q)
      requests.push_back(ImageRequest(ctx, view, SourceRowWeights(rowWeights[q], TrainingRows(*entries[q].fold), present, view.first, view.count)));
    // The images that exist (a source some subjects lack: the kernel stage and its rule for non-finite voxels saw these).
    std::vector<int> withImage;
    for (std::size_t r = 0; r < view.images->size(); ++r)
      if (!(*view.images)[r].empty()) withImage.push_back(static_cast<int>(r));
    std::vector<std::string> images;
    for (const int r : withImage) images.push_back((*view.images)[static_cast<std::size_t>(r)]);
    if (withImage.size() < view.images->size())
      for (auto& req : requests) {
        req.voxelWeights = Eigen::MatrixXd(req.voxelWeights(Indices(withImage), Eigen::all));
        for (auto& k : req.kernelWeights) k = Eigen::MatrixXd(k(Indices(withImage), Eigen::all));
      }
    const std::vector<kernels::KernelInfo> info(ks.set.info.begin() + static_cast<std::ptrdiff_t>(view.first),
                                                ks.set.info.begin() + static_cast<std::ptrdiff_t>(view.first + view.count));
    weights::ModelImageLayout layout;
    auto arrays = weights::ModelImages(images, *view.regions, info, requests, view.policy, layout);
    if (withImage.size() < view.images->size())
      for (std::size_t q = 0; q < entries.size(); ++q) {  // the last column: a lacking subject's voxels
        auto& atVoxels = arrays[q].atVoxels;
        entries[q].model.imageSources.at(v).imputed = atVoxels.rightCols(1);
        atVoxels = Eigen::MatrixXd(atVoxels.leftCols(atVoxels.cols() - 1));
      }
    std::vector<std::int64_t> scaleVoxels;
    if (view.study.kernels.intensity.scaling == kernels::IntensityScaling::GlobalMean) scaleVoxels = layout.allVoxels;
    if (view.study.kernels.intensity.scaling == kernels::IntensityScaling::ReferenceRegions) scaleVoxels = ReferenceVoxels(view.study, *view.regions);
    for (std::size_t q = 0; q < entries.size(); ++q) StoreImageArrays(view, layout, arrays[q], scaleVoxels, entries[q].model.imageSources.at(v));
    if (const int harmonised = HarmonisedSourceIndex(ctx, view); harmonised >= 0)
      HarmonisedImageArrays(ctx, view, static_cast<std::size_t>(harmonised), layout, rowWeights, entries, v);
  }
}

/// Connectivity source `spec` (kernels [first, first + count) of the study) of every model: per connection used, the
/// training mean and covariate coefficients (S' X), per (kernel, connection) the primal weights (D' X), X the training
/// connections read again from the matrices.
void AddConnectivityArrays(const StudyContext& ctx, const config::SourceSpec& spec, const config::StudyConfig& sourceStudy, std::size_t first,
                           std::size_t count, const std::vector<RowWeights>& rowWeights, std::vector<ModelEntry>& entries, std::size_t index) {
  // The matrices of the subjects having the source (missing_source "impute": not all), in kernel-row order; a lacking
  // subject's row is zero, its weights moved onto the training subjects having the source (SourceRowWeights).
  const Cohort having = SourceCohort(sourceStudy, spec, ctx.cohort);
  const ConnectivityData data = ReadConnectivity(sourceStudy, spec.connectivity, having);
  const ConnectivityKernelPlan plan = PlanConnectivityKernels(data, spec.connectivity.kernels);
  std::map<std::string, Eigen::Index> matrixRowOf;
  for (std::size_t i = 0; i < having.ids.size(); ++i) matrixRowOf.emplace(having.ids[i], static_cast<Eigen::Index>(i));
  const std::vector<char> present = ctx.SourceRowsPresent(spec.name);
  Eigen::MatrixXd X = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(ctx.kernelRows.size()), data.edges.cols());
  for (std::size_t i = 0; i < ctx.kernelRows.size(); ++i)
    if (present[i]) X.row(static_cast<Eigen::Index>(i)) = data.edges.row(matrixRowOf.at(ctx.cohort.ids[static_cast<std::size_t>(ctx.kernelRows[i])]));
  // Kernel j of the study is the planned kernel of its name (kernels that were all zero were excluded).
  const std::string prefix = spec.name.empty() ? "" : spec.name + ":";
  std::vector<Eigen::Index> used;
  std::vector<std::pair<std::size_t, const std::vector<Eigen::Index>*>> kernels;  // study kernel, its connections
  for (std::size_t k = first; k < first + count; ++k) {
    const std::string name = ctx.ks.set.info[k].name.substr(prefix.size());
    const auto at = std::find(plan.names.begin(), plan.names.end(), name);
    if (at == plan.names.end()) throw std::logic_error("model export: connectivity kernel " + ctx.ks.set.info[k].name + " is not in the plan");
    kernels.emplace_back(k, &plan.edges[static_cast<std::size_t>(at - plan.names.begin())]);
    used.insert(used.end(), kernels.back().second->begin(), kernels.back().second->end());
  }
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  std::vector<Eigen::Index> rowOf(static_cast<std::size_t>(X.cols()), -1);
  for (std::size_t u = 0; u < used.size(); ++u) rowOf[static_cast<std::size_t>(used[u])] = static_cast<Eigen::Index>(u);
  const Eigen::MatrixXd Xu = X(Eigen::all, used);
  Eigen::Index E = 0;
  for (const auto& [k, edges] : kernels) E += static_cast<Eigen::Index>(edges->size());
  for (std::size_t q = 0; q < entries.size(); ++q) {
    const RowWeights w = SourceRowWeights(rowWeights[q], TrainingRows(*entries[q].fold), present, first, count);
    const Eigen::Index S = rowWeights[q].S.cols();  // the last column of an imputing source's S: a lacking subject's connections
    exporting::ModelConnectivitySource& src = entries[q].model.connectivitySources.at(index);
    src.nodes = data.nodes;
    src.edges.resize(Xu.cols(), 1 + S);
    for (std::size_t u = 0; u < used.size(); ++u) src.edges(static_cast<Eigen::Index>(u), 0) = static_cast<double>(used[u]);
    const Eigen::MatrixXd atEdges = Xu.transpose() * w.S;
    src.edges.rightCols(S) = atEdges.leftCols(S);
    if (w.S.cols() > S) src.imputed = atEdges.rightCols(1);
    const auto C = static_cast<Eigen::Index>(w.D.size());
    src.weights.resize(E, 3 + C);
    Eigen::Index e = 0;
    for (const auto& [k, edges] : kernels)
      for (const Eigen::Index edge : *edges) {
        src.weights(e, 0) = static_cast<double>(k);
        src.weights(e, 1) = static_cast<double>(rowOf[static_cast<std::size_t>(edge)]);
        src.weights(e, 2) = 1.0;
        for (Eigen::Index c = 0; c < C; ++c) src.weights(e, 3 + c) = X.col(edge).dot(w.D[static_cast<std::size_t>(c)].col(static_cast<Eigen::Index>(k)));
        ++e;
      }
  }
}

}  // namespace

void AddModelArrays(const StudyContext& ctx, std::vector<ModelEntry>& entries) {
  // The entries share their sources (DescribeModel): a study of kernel-space sources only has no arrays to make.
  if (entries.empty() || (entries.front().model.imageSources.empty() && entries.front().model.connectivitySources.empty())) return;
  std::vector<RowWeights> rowWeights;
  for (const auto& e : entries) rowWeights.push_back(ModelRowWeights(ctx, e));
  AddImageArrays(ctx, rowWeights, entries);
  const auto& study = ctx.study;
  if (study.kernels.source == config::KernelSource::Connectivity) {
    config::SourceSpec spec;
    spec.kind = config::KernelSource::Connectivity;
    spec.connectivity = study.kernels.connectivity;
    AddConnectivityArrays(ctx, spec, study, 0, ctx.KernelCount(), rowWeights, entries, 0);
  }
  std::size_t first = 0, index = 0;
  for (std::size_t s = 0; study.kernels.source == config::KernelSource::Sources && s < study.kernels.sources.size(); ++s) {
    const auto& spec = study.kernels.sources[s];
    if (spec.kind == config::KernelSource::Connectivity)
      AddConnectivityArrays(ctx, spec, SourceStudy(study, spec), first, ctx.ks.sourceKernelCounts[s], rowWeights, entries, index++);
    first += ctx.ks.sourceKernelCounts[s];
  }
}

}  // namespace neuromkl::pipeline::modelexport
