// Which regions carry the prediction: region tables of every learner, activation patterns, voxel and edge maps.
#include "neuromkl/pipeline/study_stages.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/pipeline/connectivity.hpp"
#include "neuromkl/weights/patterns.hpp"
#include "neuromkl/weights/stability.hpp"
#include "neuromkl/weights/weights.hpp"

namespace neuromkl::pipeline {

namespace {

/// The activation pattern of an outer fold's model (weights::FoldActivationPattern), over the fold's training and
/// unlabelled subjects.
weights::ActivationPattern OuterFoldPattern(const StudyContext& ctx, const cv::OuterFoldResult& fold) {
  std::vector<int> train = fold.train;
  train.insert(train.end(), fold.unlabelled.begin(), fold.unlabelled.end());
  return weights::FoldActivationPattern(*ctx.OpenFold(train, fold.test), ctx.KernelCount(), fold.model.beta, fold.model.coef);
}

/// The subject weights of every fold map (weights::VoxelMaps' input): per learner and successful fold one map (per
/// class for a multiclass model), then, with patterns, one pattern map per weight map of a binary or regression model.
struct FoldMapWeights {
  std::vector<Eigen::MatrixXd> subjectWeights;  ///< weight maps, then pattern maps
  std::size_t weightMaps = 0;                   ///< how many of subjectWeights are weight maps
  std::vector<std::size_t> learnerOf;           ///< learner of each weight map
  std::vector<std::vector<int>> trainOf;        ///< the training subjects of the fold of each map (weight maps, then patterns)
  std::vector<Eigen::Index> classOf;            ///< multiclass: class of each weight map
  bool WithPatterns() const { return subjectWeights.size() > weightMaps; }
};

FoldMapWeights CollectFoldMapWeights(const StudyContext& ctx, const std::vector<exporting::LearnerRecord>& learners,
                                     const std::vector<std::vector<weights::ActivationPattern>>& patterns) {
  FoldMapWeights w;
  std::vector<Eigen::MatrixXd> patternWeights;  // one per weight map, or none
  std::vector<std::vector<int>> patternTrain;
  for (std::size_t l = 0; l < learners.size(); ++l)
    for (const auto& fold : learners[l].outcome.folds) {
      if (!fold.error.empty()) continue;
      std::vector<int> train = fold.train;
      train.insert(train.end(), fold.unlabelled.begin(), fold.unlabelled.end());
      // Equal source weighting: the learner saw kernel r scaled by g_r, so its weight in the map is beta_r g_r.
      const Eigen::VectorXd scales = ctx.FoldScales(train, fold.test);
      if (fold.model.Multiclass()) {  // one map per class: its coefficients and (per-class) kernel weights
        for (Eigen::Index c = 0; c < fold.model.coefs.cols(); ++c) {
          const Eigen::VectorXd beta = fold.model.betas.cols() > c ? Eigen::VectorXd(fold.model.betas.col(c)) : fold.model.beta;
          w.subjectWeights.push_back(ctx.SubjectWeights({train, fold.test, fold.model.coefs.col(c), beta.cwiseProduct(scales)}));
          w.learnerOf.push_back(l);
          w.classOf.push_back(c);
          w.trainOf.push_back(train);
        }
        continue;
      }
      w.subjectWeights.push_back(ctx.SubjectWeights({train, fold.test, fold.model.coef, fold.model.beta.cwiseProduct(scales)}));
      if (l < patterns.size()) {
        const std::size_t k = static_cast<std::size_t>(std::count(w.learnerOf.begin(), w.learnerOf.end(), l));  // this learner's successful fold k
        patternWeights.push_back(ctx.SubjectWeights({train, fold.test, patterns[l].at(k).c, Eigen::VectorXd::Ones(scales.size())}));
        patternTrain.push_back(train);
      }
      w.learnerOf.push_back(l);
      w.trainOf.push_back(train);
    }
  if (!patternWeights.empty() && patternWeights.size() != w.subjectWeights.size())
    throw NumericalError("weights:Patterns", "activation patterns", "one pattern per fold map expected");  // a bug, not an input problem
  w.weightMaps = w.subjectWeights.size();
  w.subjectWeights.insert(w.subjectWeights.end(), std::make_move_iterator(patternWeights.begin()), std::make_move_iterator(patternWeights.end()));
  w.trainOf.insert(w.trainOf.end(), patternTrain.begin(), patternTrain.end());
  return w;
}

/// The store's index of the harmonised source `name`, or -1 when that source is not harmonised.
int HarmonisedSourceIndex(const StudyContext& ctx, const std::string& name) {
  if (!ctx.foldFormedKernels) return -1;
  const auto& sources = ctx.foldFormedKernels->Sources();
  for (std::size_t s = 0; s < sources.size(); ++s)
    if (sources[s].name == name) return static_cast<int>(s);
  return -1;
}

/// The maps of a harmonised image source (its kernels [first, first + count)): each fold's maps are the weighted sums
/// of that fold's harmonised training images (FoldFormedKernels::ColumnWeights), painted onto the source's grid (a
/// probabilistic region's voxel carries sqrt(p) once more, as its kernel's features do). They apply to images harmonised
/// (and intensity-scaled) as that fold harmonised them.
std::vector<std::vector<float>> HarmonisedVoxelMaps(const StudyContext& ctx, int source, const atlas::RegionIndex& regions, std::size_t first,
                                                    std::size_t count, const FoldMapWeights& w) {
  const auto V = static_cast<std::size_t>(regions.grid.VoxelCount());
  std::vector<std::vector<float>> maps(w.subjectWeights.size(), std::vector<float>(V, 0.0f));
  std::map<std::int64_t, const atlas::RegionVoxels*> byLabel;
  for (const auto& r : regions.regions) byLabel[r.label] = &r;
  const auto& origins = ctx.foldFormedKernels->Origins();
  // One ComBat fit and one pass over the training voxels per fold, for every map of that fold.
  std::map<std::vector<int>, std::vector<std::size_t>> mapsOfFold;
  for (std::size_t m = 0; m < w.subjectWeights.size(); ++m) mapsOfFold[w.trainOf[m]].push_back(m);
  for (const auto& [train, which] : mapsOfFold) {
    std::vector<const Eigen::MatrixXd*> weights;
    for (const std::size_t m : which) weights.push_back(&w.subjectWeights[m]);
    const auto columns = ctx.foldFormedKernels->ColumnWeights(static_cast<std::size_t>(source), train, weights,
                                                              fmt::format("the maps of a fold of {} training subjects", train.size()));
    for (std::size_t k = first; k < first + count; ++k) {
      const auto it = byLabel.find(ctx.ks.set.info[k].label);
      if (it == byLabel.end()) continue;
      const atlas::RegionVoxels& region = *it->second;
      const gram::KernelOrigin& o = origins[k];
      for (std::size_t j = 0; j < region.voxels.size(); ++j) {
        const double scale = region.weights.empty() ? 1.0 : std::sqrt(static_cast<double>(region.weights[j]));
        const auto v = static_cast<std::size_t>(region.voxels[j]);
        for (std::size_t q = 0; q < which.size(); ++q)
          maps[which[q]][v] += static_cast<float>(scale * columns[q][o.begin + static_cast<Eigen::Index>(j)]);
      }
    }
  }
  return maps;
}

/// Intensity-scaled kernels are kernels of x_i / s_i: the map sum_i D_i (x_i / s_i) reads the raw images.
void DivideByIntensityScale(std::vector<Eigen::MatrixXd>& subjectWeights, const std::vector<int>& kernelRows, const std::vector<double>& intensityScale) {
  if (intensityScale.empty()) return;
  for (auto& D : subjectWeights)
    for (std::size_t i = 0; i < kernelRows.size(); ++i) D.row(static_cast<Eigen::Index>(i)) /= intensityScale[static_cast<std::size_t>(kernelRows[i])];
}

/// The maps of one image grid (weight maps first, then pattern maps, as VoxelMaps computed them in one pass over the
/// images) -> per learner fold maps (unit norm if asked) and their mean; multiclass: one mean map per class instead.
class MapCollector {
 public:
  MapCollector(const FoldMapWeights& w, std::size_t learners, bool unitNorm, exporting::WeightMaps& maps)
      : w_(w), learners_(learners), unitNorm_(unitNorm), maps_(maps) {}

  /// Splits what VoxelMaps computed into weight maps and pattern maps.
  static std::pair<std::vector<std::vector<float>>, std::vector<std::vector<float>>> Split(std::vector<std::vector<float>> computed, std::size_t weightMaps) {
    std::vector<std::vector<float>> pattern(std::make_move_iterator(computed.begin() + static_cast<std::ptrdiff_t>(weightMaps)),
                                            std::make_move_iterator(computed.end()));
    computed.resize(weightMaps);
    return std::make_pair(std::move(computed), std::move(pattern));
  }

  void Collect(std::vector<std::vector<float>> computed, std::vector<std::vector<std::vector<float>>>& folds, std::vector<std::vector<float>>& means,
               std::vector<std::vector<std::vector<float>>>* classMeans, bool unitNorm = true) const {
    folds.resize(learners_);
    means.resize(learners_);
    std::vector<int> classFolds(learners_, 0);
    for (std::size_t k = 0; k < computed.size(); ++k) {
      auto& map = computed[k];
      if (unitNorm_ && unitNorm) {
        double norm = 0;
        for (float v : map) norm += static_cast<double>(v) * v;
        if (norm > 0)
          for (float& v : map) v = static_cast<float>(v / std::sqrt(norm));
      }
      if (!w_.classOf.empty()) {  // multiclass: summed per class, averaged below
        if (!classMeans) continue;
        auto& perClass = (*classMeans)[w_.learnerOf[k]];
        const auto c = static_cast<std::size_t>(w_.classOf[k]);
        if (perClass.size() <= c) perClass.resize(c + 1);
        if (perClass[c].empty()) perClass[c].assign(map.size(), 0.0f);
        for (std::size_t v = 0; v < map.size(); ++v) perClass[c][v] += map[v];
        if (c == 0) ++classFolds[w_.learnerOf[k]];
        continue;
      }
      folds[w_.learnerOf[k]].push_back(std::move(map));
    }
    if (classMeans) {
      for (std::size_t l = 0; l < classMeans->size(); ++l)
        for (auto& m : (*classMeans)[l])
          for (float& v : m) v = static_cast<float>(v / std::max(1, classFolds[l]));
      if (!w_.classOf.empty()) maps_.classFolds = *std::max_element(classFolds.begin(), classFolds.end());
    }
    for (std::size_t l = 0; l < learners_; ++l) {
      if (folds[l].empty()) continue;
      std::vector<double> mean(folds[l][0].size(), 0.0);
      for (const auto& m : folds[l])
        for (std::size_t v = 0; v < m.size(); ++v) mean[v] += m[v];
      means[l].resize(mean.size());
      for (std::size_t v = 0; v < mean.size(); ++v) means[l][v] = static_cast<float>(mean[v] / static_cast<double>(folds[l].size()));
    }
  }

 private:
  const FoldMapWeights& w_;
  std::size_t learners_;
  bool unitNorm_;
  exporting::WeightMaps& maps_;
};

/// Per learner, the stability of its fold maps (all outer folds of all repeats).
std::vector<weights::MapStability> FoldMapStabilities(const std::vector<std::vector<std::vector<float>>>& folds) {
  std::vector<weights::MapStability> out;
  for (const auto& learnerFolds : folds) out.push_back(weights::FoldMapStability(learnerFolds));
  return out;
}

/// kernels.sources: each image source's kernels (a block of columns) mapped onto its own grid and images
/// (multiclass: one mean map per class); a source some subjects lack from the images of those having it.
void AddImageSourceMaps(const StudyContext& ctx, const FoldMapWeights& w, const MapCollector& collector, std::size_t learners,
                        exporting::WeightMaps& maps) {
  for (const auto& source : ctx.ks.imageSources) {
    const auto first = static_cast<Eigen::Index>(source.firstKernel), count = static_cast<Eigen::Index>(source.kernelCount);
    if (const int harmonised = HarmonisedSourceIndex(ctx, source.name); harmonised >= 0) {
      auto& out = maps.sources.emplace_back();
      out.name = source.name;
      out.regions = &source.regions;
      out.classMean.resize(learners);
      auto [computed, pattern] =
          MapCollector::Split(HarmonisedVoxelMaps(ctx, harmonised, source.regions, source.firstKernel, source.kernelCount, w), w.weightMaps);
      collector.Collect(std::move(computed), out.folds, out.mean, w.classOf.empty() ? nullptr : &out.classMean);
      out.stability = FoldMapStabilities(out.folds);
      if (w.WithPatterns()) collector.Collect(std::move(pattern), out.patternFolds, out.patternMean, nullptr, false);
      continue;
    }
    std::vector<Eigen::MatrixXd> sourceWeights;
    for (const auto& D : w.subjectWeights) sourceWeights.push_back(D.middleCols(first, count));
    const std::vector<kernels::KernelInfo> info(ctx.ks.set.info.begin() + first, ctx.ks.set.info.begin() + first + count);
    // Which kernel rows have an image of this source (missing_source "impute": not all).
    const std::vector<char> present = ctx.SourceRowsPresent(source.name);
    std::vector<int> rows;  // kernel rows with an image
    for (std::size_t i = 0; i < present.size(); ++i)
      if (present[i]) rows.push_back(static_cast<int>(i));
    if (rows.size() < ctx.kernelRows.size())
      for (std::size_t m = 0; m < sourceWeights.size(); ++m) gram::MoveImputedWeights(sourceWeights[m], present, w.trainOf[m]);
    DivideByIntensityScale(sourceWeights, ctx.kernelRows, source.intensityScale);  // the source's own intensity scaling
    std::vector<std::string> images;
    for (const int i : rows) images.push_back(source.images[static_cast<std::size_t>(ctx.kernelRows[static_cast<std::size_t>(i)])]);
    if (rows.size() < ctx.kernelRows.size())
      for (auto& D : sourceWeights) D = Eigen::MatrixXd(D(Eigen::Map<const Eigen::VectorXi>(rows.data(), static_cast<Eigen::Index>(rows.size())), Eigen::all));
    auto& out = maps.sources.emplace_back();
    out.name = source.name;
    out.regions = &source.regions;
    out.classMean.resize(learners);
    auto [computed, pattern] = MapCollector::Split(weights::VoxelMaps(images, source.regions, info, sourceWeights, source.nanPolicy), w.weightMaps);
    collector.Collect(std::move(computed), out.folds, out.mean, w.classOf.empty() ? nullptr : &out.classMean);
    out.stability = FoldMapStabilities(out.folds);
    if (w.WithPatterns()) collector.Collect(std::move(pattern), out.patternFolds, out.patternMean, nullptr, false);
  }
}

/// Connectivity sources: the edge weights of the fold models (the matrices are read again, as the images are for
/// voxel maps), per learner and fold, and their mean. Weights only: a connection shared by two kernels would count
/// twice in a pattern.
void AddEdgeMaps(const StudyContext& ctx, const FoldMapWeights& w, std::size_t learners, exporting::WeightMaps& maps) {
  const auto& study = ctx.study;
  const auto& ks = ctx.ks;
  std::size_t first = 0;
  for (std::size_t s = 0; s < study.kernels.sources.size() && w.classOf.empty(); first += ks.sourceKernelCounts[s], ++s) {
    const auto& spec = study.kernels.sources[s];
    if (spec.kind != config::KernelSource::Connectivity) continue;
    // The matrices of the subjects having the source (missing_source "impute": not all of them), in kernel-row order;
    // a lacking subject's row is zero, its weight moved onto the training subjects having the source.
    const config::StudyConfig sourceStudy = SourceStudy(study, spec);
    const Cohort having = SourceCohort(sourceStudy, spec, ctx.cohort);
    const ConnectivityData data = ReadConnectivity(sourceStudy, spec.connectivity, having);
    const ConnectivityKernelPlan plan = PlanConnectivityKernels(data, spec.connectivity.kernels);
    std::map<std::string, Eigen::Index> rowOf;
    for (std::size_t i = 0; i < having.ids.size(); ++i) rowOf.emplace(having.ids[i], static_cast<Eigen::Index>(i));
    const std::vector<char> present = ctx.SourceRowsPresent(spec.name);
    ConnectivityData inKernelOrder = data;
    inKernelOrder.edges = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(ctx.kernelRows.size()), data.edges.cols());
    for (std::size_t i = 0; i < ctx.kernelRows.size(); ++i)
      if (present[i]) inKernelOrder.edges.row(static_cast<Eigen::Index>(i)) = data.edges.row(rowOf.at(ctx.cohort.ids[static_cast<std::size_t>(ctx.kernelRows[i])]));
    // Kernel j of the set is the planned kernel of the same name (kernels that were all zero were excluded).
    std::vector<Eigen::Index> planOf;
    for (std::size_t j = first; j < first + ks.sourceKernelCounts[s]; ++j) {
      const std::string name = ks.set.info[j].name.substr(spec.name.size() + 1);
      planOf.push_back(std::find(plan.names.begin(), plan.names.end(), name) - plan.names.begin());
    }
    auto& out = maps.edges.emplace_back();
    out.name = spec.name;
    out.nodes = data.nodes;
    out.networks = data.networks;
    out.folds.resize(learners);
    out.mean.resize(learners);
    for (std::size_t k = 0; k < w.weightMaps; ++k) {
      Eigen::MatrixXd D = Eigen::MatrixXd::Zero(w.subjectWeights[k].rows(), static_cast<Eigen::Index>(plan.names.size()));
      for (std::size_t j = 0; j < planOf.size(); ++j) D.col(planOf[j]) = w.subjectWeights[k].col(static_cast<Eigen::Index>(first + j));
      gram::MoveImputedWeights(D, present, w.trainOf[k]);
      out.folds[w.learnerOf[k]].push_back(WeightEdges(inKernelOrder, plan, D));
    }
    for (std::size_t l = 0; l < learners; ++l) {
      if (out.folds[l].empty()) continue;
      Eigen::MatrixXd mean = Eigen::MatrixXd::Zero(out.folds[l][0].rows(), out.folds[l][0].cols());
      for (const auto& W : out.folds[l]) mean += W;
      out.mean[l] = mean / static_cast<double>(out.folds[l].size());
    }
  }
}

/// Fold maps of every learner's successful folds, computed in one pass over the images; with
/// `patterns` (binary and regression studies: [learner][successful fold]) the activation pattern maps too.
exporting::WeightMaps ComputeWeightMaps(const StudyContext& ctx, const std::vector<exporting::LearnerRecord>& learners,
                                        const std::vector<std::vector<weights::ActivationPattern>>& patterns) {
  exporting::WeightMaps maps;
  maps.folds.resize(learners.size());
  maps.mean.resize(learners.size());
  maps.classMean.resize(learners.size());
  FoldMapWeights w = CollectFoldMapWeights(ctx, learners, patterns);
  const MapCollector collector(w, learners.size(), ctx.study.output.weightMapUnitNorm, maps);
  if (ctx.ks.regions) {
    // Harmonised images: the maps of each fold's harmonised images (intensity scaling included in them); otherwise
    // weights of the raw images, intensity scaling undone.
    const bool harmonised = ctx.foldFormedKernels && !ctx.foldFormedKernels->Sources().empty();
    if (!harmonised) DivideByIntensityScale(w.subjectWeights, ctx.kernelRows, ctx.ks.set.intensityScale);
    std::vector<std::string> images;
    for (auto r : ctx.kernelRows) images.push_back(ctx.cohort.images[static_cast<std::size_t>(r)]);
    auto [computed, pattern] = MapCollector::Split(
        harmonised ? HarmonisedVoxelMaps(ctx, 0, *ctx.ks.regions, 0, ctx.KernelCount(), w)
                   : weights::VoxelMaps(images, *ctx.ks.regions, ctx.ks.set.info, w.subjectWeights, ctx.study.kernels.nanPolicy),
        w.weightMaps);
    collector.Collect(std::move(computed), maps.folds, maps.mean, &maps.classMean);
    maps.stability = FoldMapStabilities(maps.folds);
    if (w.WithPatterns()) collector.Collect(std::move(pattern), maps.patternFolds, maps.patternMean, nullptr, false);
  }
  AddImageSourceMaps(ctx, w, collector, learners.size(), maps);
  AddEdgeMaps(ctx, w, learners.size(), maps);
  return maps;
}

/// Each image region's sign consistency over the learner's fold maps (weights::RegionSignConsistency), on the study's
/// atlas or each image source's; NaN for kernels without voxel maps.
std::vector<double> RegionSignConsistencies(const StudyContext& ctx, const exporting::WeightMaps& maps, std::size_t learner) {
  std::vector<double> perKernel(ctx.KernelCount(), std::nan(""));
  if (ctx.ks.regions && learner < maps.stability.size())
    weights::RegionSignConsistency(maps.stability[learner], *ctx.ks.regions, ctx.ks.set.info, 0, ctx.KernelCount(), perKernel);
  for (std::size_t s = 0; s < ctx.ks.imageSources.size() && s < maps.sources.size(); ++s) {
    const auto& source = ctx.ks.imageSources[s];
    if (learner < maps.sources[s].stability.size())
      weights::RegionSignConsistency(maps.sources[s].stability[learner], source.regions, ctx.ks.set.info, source.firstKernel, source.kernelCount, perKernel);
  }
  return perKernel;
}

/// Each test subject's decision value split over the kernels (learners::Model::DecisionParts) with the fold's test
/// blocks as the learner's decision read them; a split that does not add up to the decision value is a warning.
Eigen::MatrixXd FoldAttributions(const StudyContext& ctx, const cv::OuterFoldResult& fold, const std::string& learner, std::vector<std::string>& warnings) {
  std::vector<int> train = fold.train;
  train.insert(train.end(), fold.unlabelled.begin(), fold.unlabelled.end());
  const auto view = ctx.OpenFold(train, fold.test);
  gram::WeightedKernels kernels;
  // In place reads the study's kernels without copies; residualised folds mix rows and are copied (as the CV did).
  const bool residualised = ctx.nestedOptions.preprocessing.covariates != nullptr;
  view->Weighted(residualised ? gram::TrainingForm::Copies : gram::TrainingForm::InPlace, kernels);
  Eigen::MatrixXd buffer;
  Eigen::MatrixXd parts = fold.model.DecisionParts(kernels.Test(buffer));
  // Decision adds the same products in the same order: only rounding separates the sum from the decision value.
  const Eigen::VectorXd sum = (parts.rowwise().sum().array() + fold.model.bias).matrix();
  const double scale = std::max(1.0, fold.decision.cwiseAbs().maxCoeff());
  if (const double gap = (sum - fold.decision).cwiseAbs().maxCoeff(); !(gap <= 1e-9 * scale))
    warnings.push_back(fmt::format("{}: outer fold {}: the attributions add up to the decision values only within {:.3g} (expected 1e-9 relative)", learner,
                                   fold.index, gap / scale));
  return parts;
}

}  // namespace

FoldKernelWeights KernelWeightsOfFold(const StudyContext& ctx, const cv::OuterFoldResult& fold, bool multipleKernels, bool perClass,
                                      const Eigen::VectorXd* modelQuadratics) {
  FoldKernelWeights out;
  const gram::Preprocessing& preprocessing = ctx.nestedOptions.preprocessing;
  std::vector<int> train = fold.train;
  train.insert(train.end(), fold.unlabelled.begin(), fold.unlabelled.end());
  const auto classes = static_cast<Eigen::Index>(ctx.cohort.classNames.size());
  if (multipleKernels) {
    // Shared weights, or the mean of the per-class weights. With equal source weighting the learner saw
    // kernel r scaled by g_r: its share of the combined kernel is beta_r g_r (normalised to sum 1).
    Eigen::VectorXd scales;
    if (!preprocessing.kernelGroups.empty()) scales = ctx.FoldScales(train, fold.test);
    const auto share = [&](const Eigen::VectorXd& beta) -> Eigen::VectorXd {
      if (scales.size() == 0) return beta;
      const Eigen::VectorXd w = beta.cwiseProduct(scales);
      return w.sum() > 0 ? Eigen::VectorXd(w / w.sum()) : w;
    };
    out.shared = share(fold.model.beta);
    if (perClass)
      for (Eigen::Index c = 0; c < classes; ++c)
        out.perClass.push_back(share(fold.model.betas.cols() > c ? Eigen::VectorXd(fold.model.betas.col(c)) : fold.model.beta));
    return out;
  }
  const auto R = static_cast<Eigen::Index>(ctx.KernelCount());
  if (ctx.study.target.task == learners::Task::Multiclass) {
    // Per class ||w_rc|| = beta_r sqrt(coef_c' K_r coef_c); the shared share stacks the classes' parts:
    // ||w_r|| = sqrt(sum_c ||w_rc||^2) (the block the shared-weight MKL learners weigh, docs/learners.md).
    const auto view = ctx.OpenFold(train, fold.test);
    const Eigen::VectorXd scales = view->Scales();
    Eigen::MatrixXd norms(R, classes);
    std::vector<std::size_t> every(static_cast<std::size_t>(R));
    std::iota(every.begin(), every.end(), std::size_t{0});
    const auto KC = view->Products(every, fold.model.coefs, scales);
    for (Eigen::Index r = 0; r < R; ++r)
      for (Eigen::Index c = 0; c < classes; ++c)
        norms(r, c) = weights::ModelNorm(fold.model.coefs.col(c).dot(KC[static_cast<std::size_t>(r)].col(c)), fold.model.beta[r]);
    out.shared = norms.rowwise().norm();
    if (perClass)
      for (Eigen::Index c = 0; c < classes; ++c) out.perClass.push_back(norms.col(c));
    return out;
  }
  // The region's share of the model, ||w_r||, from the fold's kernels as the learner saw them: the
  // quadratics coef' K~_r coef its activation pattern computed, else read from the kernels in place.
  out.shared.resize(R);
  if (modelQuadratics) {
    for (Eigen::Index j = 0; j < R; ++j) out.shared[j] = weights::ModelNorm((*modelQuadratics)[j], fold.model.beta[j]);
    return out;
  }
  const auto view = ctx.OpenFold(train, fold.test);
  std::vector<std::size_t> every(static_cast<std::size_t>(R));
  std::iota(every.begin(), every.end(), std::size_t{0});
  const auto parts = view->Products(every, fold.model.coef, view->Scales());
  for (std::size_t r = 0; r < every.size(); ++r) {
    const auto j = static_cast<Eigen::Index>(r);
    out.shared[j] = weights::ModelNorm(fold.model.coef.dot(parts[r].col(0)), fold.model.beta[j]);
  }
  return out;
}

std::vector<double> MeanKernelShares(const StudyContext& ctx, const cv::LearnerOutcome& outcome) {
  const bool mkl = learners::FindLearner(outcome.name)->multipleKernels;
  std::vector<Eigen::VectorXd> foldWeights;
  for (const auto& fold : outcome.folds)
    if (fold.error.empty()) foldWeights.push_back(KernelWeightsOfFold(ctx, fold, mkl, false).shared);
  std::vector<double> shares;
  if (foldWeights.empty()) return shares;
  shares.resize(ctx.KernelCount());
  for (const auto& row : weights::RegionTable(foldWeights)) shares[row.kernel] = row.meanPercent;
  return shares;
}

RegionWeightsResult RunRegionWeights(const StudyContext& ctx, const std::vector<exporting::LearnerRecord>& learners) {
  RegionWeightsResult result;
  const bool multiclass = ctx.study.target.task == learners::Task::Multiclass;
  const bool perClass = multiclass && ctx.study.target.multiclassWeights == learners::MulticlassWeights::PerClass;
  const auto classes = static_cast<Eigen::Index>(ctx.cohort.classNames.size());
  const bool anyConnectivity = std::any_of(ctx.study.kernels.sources.begin(), ctx.study.kernels.sources.end(),
                                           [](const config::SourceSpec& s) { return s.kind == config::KernelSource::Connectivity; });
  // Activation patterns (binary and regression): per learner and successful fold, from the fold's training subjects.
  std::vector<std::vector<weights::ActivationPattern>> patterns;
  if (!multiclass) {
    patterns.resize(learners.size());
    result.patternTables.resize(learners.size());
    for (std::size_t l = 0; l < learners.size(); ++l) {
      std::vector<Eigen::VectorXd> norms;
      for (const auto& fold : learners[l].outcome.folds)
        if (fold.error.empty()) {
          patterns[l].push_back(OuterFoldPattern(ctx, fold));
          norms.push_back(patterns[l].back().norms);
        }
      result.patternTables[l] = weights::RegionTable(norms);
    }
  }
  if (ctx.study.output.weightMaps && (ctx.ks.regions.has_value() || !ctx.ks.imageSources.empty() || anyConnectivity)) {
    result.maps = ComputeWeightMaps(ctx, learners, patterns);  // multiclass: one mean map per class
    if (multiclass && anyConnectivity)
      result.warnings.push_back("multiclass study with a connectivity source: edge weights are not written for multiclass models yet (region tables rank every kernel)");
  }
  const gram::Preprocessing& preprocessing = ctx.nestedOptions.preprocessing;  // covariates included
  for (std::size_t l = 0; l < learners.size(); ++l) {
    const auto& lr = learners[l];
    const bool mkl = learners::FindLearner(lr.outcome.name)->multipleKernels;
    std::vector<Eigen::VectorXd> foldWeights;
    std::size_t successful = 0;  // this learner's successful folds so far (patterns[l] holds one per successful fold)
    std::vector<std::vector<Eigen::VectorXd>> classWeights(perClass ? static_cast<std::size_t>(classes) : 0);
    for (const auto& fold : lr.outcome.folds) {
      if (!fold.error.empty()) continue;
      const std::size_t k = successful++;
      const bool withPattern = l < patterns.size() && k < patterns[l].size();
      FoldKernelWeights w = KernelWeightsOfFold(ctx, fold, mkl, perClass, withPattern ? &patterns[l][k].modelQuadratics : nullptr);
      foldWeights.push_back(std::move(w.shared));
      for (std::size_t c = 0; c < classWeights.size(); ++c) classWeights[c].push_back(std::move(w.perClass[c]));
    }
    result.tables.push_back(weights::RegionTable(foldWeights));
    auto& attributions = result.attributions.emplace_back(lr.outcome.folds.size());
    if (!multiclass)
      for (std::size_t f = 0; f < lr.outcome.folds.size(); ++f)
        if (lr.outcome.folds[f].error.empty()) attributions[f] = FoldAttributions(ctx, lr.outcome.folds[f], lr.outcome.label, result.warnings);
    const std::vector<double> signConsistency = RegionSignConsistencies(ctx, result.maps, l);
    for (auto& row : result.tables.back()) row.signConsistency = signConsistency[row.kernel];
    result.classTables.emplace_back();
    for (const auto& w : classWeights) result.classTables.back().push_back(weights::RegionTable(w));
    const std::string scaled = preprocessing.kernelGroups.empty() ? "" : " times the fold's source scale g (source_weighting \"equal\"), renormalised";
    result.sources.push_back(mkl && perClass ? "mean of the per-class kernel weights (beta) per outer fold" + scaled + "; per class: regions_<learner>_class-<class>.tsv"
                             : mkl ? "kernel weights (beta) per outer fold" + scaled
                             : multiclass ? "share of the model per outer fold: ||w_r|| = sqrt(sum over classes of coef_c' K_r coef_c) with the fold's "
                                            "preprocessed training kernel, as a percentage of the fold's sum"
                                 : "share of the model per outer fold: ||w_r|| = sqrt(coef' K_r coef) with the fold's preprocessed training kernel "
                                   "(the norm of the region's part of the weight vector), as a percentage of the fold's sum");
  }
  return result;
}

}  // namespace neuromkl::pipeline
