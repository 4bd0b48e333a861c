// `neuromkl predict`: the image sources' part of the scores (docs/predict.md), with the ComBat of harmonised sources
// (docs/harmonisation.md) and the estimation of the effects of sites the models were not trained on.
#include <algorithm>
#include <cmath>
#include <exception>
#include <iterator>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/core/table.hpp"
#include "neuromkl/gram/combat.hpp"
#include "neuromkl/io/matrix_file.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/pipeline/connectivity.hpp"
#include "predict_parts.hpp"

namespace neuromkl::pipeline::predicting {

namespace {

/// The models' image sources, each named once, in the order the models give them.
std::vector<std::string> ImageSourceNames(const std::vector<exporting::ExportedModel>& models) {
  std::vector<std::string> sourceNames;
  for (const auto& m : models)
    for (const auto& src : m.imageSources)
      if (std::find(sourceNames.begin(), sourceNames.end(), src.name) == sourceNames.end()) sourceNames.push_back(src.name);
  return sourceNames;
}

GeometryMismatch OffModelGrid(const std::string& path, const std::string& id, const io::Geometry& expected, const io::Geometry& found,
                              const std::string& difference) {
  return GeometryMismatch("predict:GridMismatch", path,
                          fmt::format("subject {}: the image is not on the model's grid (expected {}, found {}): {}; resample it to the "
                                      "training images' grid (the same space and affine) first",
                                      id, expected.Describe(), found.Describe(), difference));
}

/// The headers of source `name`, in table order, against every model's grid: a wrong grid is reported for the first
/// such subject, before any decoding.
void CheckImageGrids(const std::vector<exporting::ExportedModel>& models, const NewSubjects& subjects, const std::string& name,
                     const std::vector<std::string>& paths, const std::vector<io::Volume>* inMemory) {
  for (const auto& m : models)
    for (const auto& src : m.imageSources) {
      if (src.name != name) continue;
      for (std::size_t i = 0; i < paths.size(); ++i) {
        if (!inMemory && paths[i].empty()) continue;  // no image: the model imputes the source (NewSubjects::lacking)
        if (const io::Geometry g = inMemory ? (*inMemory)[i].geometry : io::ReadGeometry(paths[i]); !g.DifferenceFrom(src.grid).empty())
          throw OffModelGrid(paths[i], subjects.ids[i], src.grid, g, g.DifferenceFrom(src.grid));
      }
    }
}

/// The divisor of one image under the source's intensity scaling (1 without): its mean over the scaling voxels.
double IntensityScale(const exporting::ModelImageSource& src, const io::Volume& volume, const std::string& path, const std::string& id) {
  double scale = 1.0;
  if (src.intensityScaling != "none") {
    double sum = 0;
    std::int64_t count = 0;
    for (auto v : src.scaleVoxels)
      if (const float x = volume.data[static_cast<std::size_t>(v)]; std::isfinite(x)) sum += x, ++count;
    scale = count > 0 ? sum / static_cast<double>(count) : 0.0;
    if (!(scale > 0) || !std::isfinite(scale))
      throw InputError("predict:IntensityScale", path, fmt::format("subject {}: intensity scaling needs a positive mean, found {}", id, scale));
  }
  return scale;
}

/// Subject i's voxels of the source as the training voxels were prepared: scaled, harmonised (with `h`), the covariates'
/// part removed (row i of `design`), centred on the training mean. A non-finite voxel under drop_voxel is counted in
/// `nonFinite` and set to 0.
Eigen::VectorXd CentredVoxels(const exporting::ModelImageSource& src, const io::Volume& volume, double scale, const Eigen::MatrixXd& design,
                              Eigen::Index i, std::int64_t& nonFinite, const SubjectHarmonisation* h) {
  const bool zero = src.nanPolicy == "zero";
  const Eigen::Index U = src.voxels.rows(), p = src.voxels.cols() - 2;
  Eigen::VectorXd xc(U);
  for (Eigen::Index u = 0; u < U; ++u) {
    const float raw = volume.data[static_cast<std::size_t>(src.voxels(u, 0))];
    if (!std::isfinite(raw) && !zero) {  // no contribution: as if the voxel equalled the training mean
      xc[u] = 0.0;
      ++nonFinite;
      continue;
    }
    double x = (std::isfinite(raw) ? static_cast<double>(raw) : 0.0) / scale;
    if (h) x = Harmonised(*h, u, i, x);
    for (Eigen::Index j = 0; j < p; ++j) x -= design(i, j) * src.voxels(u, 2 + j);
    xc[u] = x - src.voxels(u, 1);
  }
  return xc;
}

/// Subject i's values `valueOf(u)` over a source's rows (`layout`: index, training mean, covariate coefficients: a
/// source's voxels or edges) as the training values were prepared: the covariates' part removed (row i of `design`),
/// centred on the training mean.
template <typename ValueOf>
Eigen::VectorXd PreparedValues(const Eigen::MatrixXd& layout, const Eigen::MatrixXd& design, Eigen::Index i, const ValueOf& valueOf) {
  const Eigen::Index U = layout.rows(), p = layout.cols() - 2;
  Eigen::VectorXd xc(U);
  for (Eigen::Index u = 0; u < U; ++u) {
    double x = valueOf(u);
    for (Eigen::Index j = 0; j < p; ++j) x -= design(i, j) * layout(u, 2 + j);
    xc[u] = x - layout(u, 1);
  }
  return xc;
}

/// Subject i's voxels of the source when it has none (the model imputes it: NewSubjects::lacking): the mean of the
/// training subjects having the source, prepared as an image is (already scaled).
Eigen::VectorXd ImputedVoxels(const exporting::ModelImageSource& src, const std::string& id, const Eigen::MatrixXd& design, Eigen::Index i) {
  if (src.imputed.size() == 0)
    throw InputError("predict:MissingImage", id, fmt::format("subject {} has no image of source {}, which this model does not impute", id, src.name));
  return PreparedValues(src.voxels, design, i, [&](Eigen::Index u) { return src.imputed[u]; });
}

/// The source's kernels' part of row i of the scores: per kernel, the voxels' products with the primal weights,
/// divided by the subject's norm in that kernel when the model normalises (zero below the kernel's floor).
void AddVoxelScores(const exporting::ExportedModel& m, const Eigen::MatrixXd& weights, const Eigen::VectorXd& xc, Eigen::MatrixXd& scores,
                    Eigen::Index i, Eigen::MatrixXd* parts) {
  const Eigen::Index K = m.beta.rows(), C = m.beta.cols();
  Eigen::VectorXd norm2 = Eigen::VectorXd::Zero(K);
  Eigen::MatrixXd dot = Eigen::MatrixXd::Zero(K, C);
  for (Eigen::Index e = 0; e < weights.rows(); ++e) {
    const auto k = static_cast<Eigen::Index>(weights(e, 0));
    const double x = xc[static_cast<Eigen::Index>(weights(e, 1))];
    norm2[k] += weights(e, 2) * x * x;
    for (Eigen::Index c = 0; c < C; ++c) dot(k, c) += weights(e, 3 + c) * x;
  }
  std::vector<char> inSource(static_cast<std::size_t>(K), 0);
  for (Eigen::Index e = 0; e < weights.rows(); ++e) inSource[static_cast<std::size_t>(weights(e, 0))] = 1;
  for (Eigen::Index k = 0; k < K; ++k) {
    if (!inSource[static_cast<std::size_t>(k)]) continue;
    double s = 1.0;
    if (m.normalise) s = norm2[k] > m.floors[k] && norm2[k] > 0 ? 1.0 / std::sqrt(norm2[k]) : 0.0;
    scores.row(i) += s * dot.row(k);
    if (parts && parts->size() > 0) (*parts)(i, k) += s * dot(k, 0);
  }
}

/// The new subjects' images of one source, read when a new site's effects need them (once for every model).
class SourceImages {
 public:
  SourceImages(const std::vector<std::string>& paths, const std::vector<io::Volume>* inMemory) : paths_(paths), inMemory_(inMemory) {}
  const io::Volume& Of(std::size_t i) {
    if (inMemory_) return (*inMemory_)[i];
    auto it = read_.find(i);
    if (it == read_.end()) it = read_.emplace(i, io::ReadVolume(paths_[i])).first;
    return it->second;
  }
  const std::string& Path(std::size_t i) const { return paths_[i]; }

 private:
  const std::vector<std::string>& paths_;
  const std::vector<io::Volume>* inMemory_;
  std::map<std::size_t, io::Volume> read_;
};

/// The new subjects `fitting` of a site the model was not trained on, as the rows its effects are estimated from: their
/// images scaled as the source's, over the model's voxels (a non-finite voxel counts as the preserved value, z = 0).
Eigen::MatrixXd NewSiteVoxels(const SubjectHarmonisation& h, const std::vector<std::size_t>& fitting, const exporting::ModelImageSource& src,
                              const NewSubjects& s, SourceImages& images) {
  const Eigen::Index U = src.voxels.rows();
  const bool zero = src.nanPolicy == "zero";
  Eigen::MatrixXd X(static_cast<Eigen::Index>(fitting.size()), U);
  for (std::size_t j = 0; j < fitting.size(); ++j) {
    const auto r = static_cast<Eigen::Index>(j), i = static_cast<Eigen::Index>(fitting[j]);
    const io::Volume& volume = images.Of(fitting[j]);
    const double scale = IntensityScale(src, volume, images.Path(fitting[j]), s.ids[fitting[j]]);
    for (Eigen::Index u = 0; u < U; ++u) {
      const float raw = volume.data[static_cast<std::size_t>(src.voxels(u, 0))];
      X(r, u) = std::isfinite(raw) ? static_cast<double>(raw) / scale
                : zero             ? 0.0
                                   : h.covariates.row(i).dot(h.fit.beta.col(u)) + h.fit.alpha[u];
    }
  }
  return X;
}

/// What the scores of one image source apply to each subject's image, per model: its harmonisation (or null), and the
/// groups of unseen covariate levels with their mean prepared voxels.
struct SourcePreparation {
  std::vector<std::unique_ptr<SubjectHarmonisation>> harmonisation;
  const std::vector<LevelGroups>* groups = nullptr;
  std::vector<std::vector<Eigen::VectorXd>> levelMeans;
};

/// Subject i's image of source `name` scored under every model that has the source.
void ScoreImage(const std::vector<exporting::ExportedModel>& models, const std::string& name, const std::string& id, const std::string& path,
                const io::Volume& volume, Eigen::Index i, const std::vector<Eigen::MatrixXd>& designs, const SourcePreparation& prepared,
                std::vector<Eigen::MatrixXd>& scores, std::vector<Eigen::MatrixXd>* parts, std::vector<std::string>& warnings) {
  for (std::size_t q = 0; q < models.size(); ++q) {
    const auto& m = models[q];
    for (const auto& src : m.imageSources) {
      if (src.name != name) continue;
      std::int64_t nonFinite = 0;
      Eigen::VectorXd xc;
      if (path.empty()) {  // no image: the model imputes the source
        xc = ImputedVoxels(src, id, designs[q], i);
      } else {
        if (const auto diff = volume.geometry.DifferenceFrom(src.grid); !diff.empty()) throw OffModelGrid(path, id, src.grid, volume.geometry, diff);
        const double scale = IntensityScale(src, volume, path, id);
        xc = CentredVoxels(src, volume, scale, designs[q], i, nonFinite, prepared.harmonisation[q].get());
      }
      if (const int g = prepared.levelMeans[q].empty() ? -1 : (*prepared.groups)[q].of[static_cast<std::size_t>(i)]; g >= 0) {
        xc -= prepared.levelMeans[q][static_cast<std::size_t>(g)];
        for (Eigen::Index u = 0; nonFinite > 0 && src.nanPolicy != "zero" && u < xc.size(); ++u)  // such voxels still contribute nothing
          if (!std::isfinite(volume.data[static_cast<std::size_t>(src.voxels(u, 0))])) xc[u] = 0.0;
      }
      if (nonFinite > 0) {
        warnings.push_back(fmt::format("subject {}: {} voxels of the model are NaN or infinite in {} (learner {}); they were treated as the training "
                                       "mean (no contribution)",
                                       id, nonFinite, path, m.learner));
      }
      AddVoxelScores(m, src.weights, xc, scores[q], i, parts ? &(*parts)[q] : nullptr);
    }
  }
}

/// The two nodes of each of the source's connections (its `edges` rows), decoded once for every subject.
std::vector<std::pair<int, int>> ConnectionEnds(const exporting::ModelConnectivitySource& src) {
  const auto N = static_cast<int>(src.nodes.size());
  std::vector<std::pair<int, int>> all;  // in EdgeIndex order
  for (int a = 0; a < N; ++a)
    for (int b = a + 1; b < N; ++b) all.emplace_back(a, b);
  std::vector<std::pair<int, int>> ends;
  for (Eigen::Index u = 0; u < src.edges.rows(); ++u) ends.push_back(all[static_cast<std::size_t>(src.edges(u, 0))]);
  return ends;
}

/// Subject i's connections when it has no matrix (the model imputes the source): the mean of the training subjects having
/// one, prepared as CentredConnections prepares a matrix.
Eigen::VectorXd ImputedConnections(const exporting::ModelConnectivitySource& src, const std::string& id, const Eigen::MatrixXd& design, Eigen::Index i) {
  if (src.imputed.size() == 0)
    throw InputError("predict:MissingConnectivity", id,
                     fmt::format("subject {} has no connectivity matrix in column \"{}\", which this model does not impute", id, src.column));
  return PreparedValues(src.edges, design, i, [&](Eigen::Index u) { return src.imputed[u]; });
}

/// Subject i's connections of a connectivity source as the training connections were prepared: the covariates' part
/// removed (row i of `design`), centred on the training mean. `ends`: ConnectionEnds(src).
Eigen::VectorXd CentredConnections(const exporting::ModelConnectivitySource& src, const Eigen::MatrixXd& M, const std::vector<std::pair<int, int>>& ends,
                                   const Eigen::MatrixXd& design, Eigen::Index i) {
  return PreparedValues(src.edges, design, i, [&](Eigen::Index u) {
    const auto [a, b] = ends[static_cast<std::size_t>(u)];
    return M(a, b);
  });
}

}  // namespace

void AddOnce(const std::vector<std::string>& notes, std::vector<std::string>& warnings) {
  for (const auto& note : notes)
    if (std::find(warnings.begin(), warnings.end(), note) == warnings.end()) warnings.push_back(note);
}

void AddImageScores(const std::vector<exporting::ExportedModel>& models, const NewSubjects& subjects, const std::vector<Eigen::MatrixXd>& designs,
                    const std::vector<LevelGroups>& groups, std::vector<Eigen::MatrixXd>& scores, std::vector<Eigen::MatrixXd>* parts,
                    std::vector<std::string>& warnings) {
  const auto n = static_cast<Eigen::Index>(subjects.ids.size());
  // Each image read once, scored under every model. Each subject's warnings apart, then in table order: the same output
  // whatever the threads.
  std::vector<std::vector<std::string>> subjectWarnings(static_cast<std::size_t>(n));
  for (const auto& name : ImageSourceNames(models)) {
    const auto& paths = subjects.images.at(name);
    const auto held = subjects.volumes.find(name);
    const std::vector<io::Volume>* inMemory = held == subjects.volumes.end() ? nullptr : &held->second;
    if (inMemory && inMemory->size() != paths.size())
      throw InputError("predict:ImageCount", subjects.where, fmt::format("{} images for {} subjects", inMemory->size(), paths.size()));
    CheckImageGrids(models, subjects, name, paths, inMemory);
    SourcePreparation prepared;
    prepared.harmonisation.resize(models.size());
    prepared.groups = &groups;
    prepared.levelMeans.resize(models.size());
    {
      SourceImages images(paths, inMemory);
      std::vector<std::string> notes;
      for (std::size_t q = 0; q < models.size(); ++q)
        for (const auto& src : models[q].imageSources)
          if (src.name == name && src.harmonisation)
            prepared.harmonisation[q] = PrepareHarmonisation(
                *src.harmonisation, name.empty() ? "images" : name, subjects,
                [&](const std::vector<std::size_t>& fitting, const SubjectHarmonisation& h) { return NewSiteVoxels(h, fitting, src, subjects, images); },
                notes);
      AddOnce(notes, warnings);
      // Covariate levels the models were not trained with: each group's mean prepared voxels, from its subjects' images.
      for (std::size_t q = 0; q < models.size(); ++q)
        for (const auto& src : models[q].imageSources)
          if (src.name == name && groups[q].Any())
            prepared.levelMeans[q] = LevelMeans(groups[q], [&](std::size_t i) {
              if (!inMemory && paths[i].empty()) return ImputedVoxels(src, subjects.ids[i], designs[q], static_cast<Eigen::Index>(i));
              const io::Volume& volume = images.Of(i);
              std::int64_t nonFinite = 0;
              return CentredVoxels(src, volume, IntensityScale(src, volume, paths[i], subjects.ids[i]), designs[q], static_cast<Eigen::Index>(i), nonFinite,
                                   prepared.harmonisation[q].get());
            });
    }
    tbb::parallel_for(Eigen::Index{0}, n, [&](Eigen::Index i) {
      const std::string& path = paths[static_cast<std::size_t>(i)];
      const io::Volume vol = inMemory || path.empty() ? io::Volume{} : io::ReadVolume(path);
      const io::Volume& volume = inMemory ? (*inMemory)[static_cast<std::size_t>(i)] : vol;
      ScoreImage(models, name, subjects.ids[static_cast<std::size_t>(i)], path, volume, i, designs, prepared, scores, parts,
                 subjectWarnings[static_cast<std::size_t>(i)]);
    });
  }
  for (auto& w : subjectWarnings) warnings.insert(warnings.end(), std::make_move_iterator(w.begin()), std::make_move_iterator(w.end()));
}

void AddConnectivityScores(const std::vector<exporting::ExportedModel>& models, const NewSubjects& subjects, const std::vector<Eigen::MatrixXd>& designs,
                           const std::vector<LevelGroups>& groups, std::vector<Eigen::MatrixXd>& scores, std::vector<Eigen::MatrixXd>* parts) {
  const auto n = static_cast<Eigen::Index>(subjects.ids.size());
  std::vector<std::string> columns;  // each matrix column once
  for (const auto& m : models)
    for (const auto& src : m.connectivitySources)
      if (std::find(columns.begin(), columns.end(), src.column) == columns.end()) columns.push_back(src.column);
  for (const auto& column : columns) {
    const auto& files = subjects.cells.at(column);
    auto matrix = [&](std::size_t r) {
      const std::string where = "subject " + subjects.ids[r] + " (" + files[r] + ")";
      Eigen::MatrixXd M = io::ReadMatrixFile(files[r]);
      CheckConnectivityMatrix(M, where);
      return M;
    };
    std::vector<std::vector<std::pair<int, int>>> ends(models.size());  // each model's source of this column
    for (std::size_t q = 0; q < models.size(); ++q)
      for (const auto& src : models[q].connectivitySources)
        if (src.column == column) ends[q] = ConnectionEnds(src);
    auto prepare = [&](const exporting::ModelConnectivitySource& src, const Eigen::MatrixXd& M, std::size_t q, std::size_t r) {
      const auto N = static_cast<Eigen::Index>(src.nodes.size());
      if (M.rows() != N)
        throw InputError("predict:ConnectivitySize", "subject " + subjects.ids[r] + " (" + files[r] + ")",
                         fmt::format("has {} nodes, but the model's connectivity source {} has {} ({} ...): every subject needs the training "
                                     "subjects' nodes, in the same order",
                                     M.rows(), src.name.empty() ? "" : "\"" + src.name + "\"", N, src.nodes.front()));
      return CentredConnections(src, M, ends[q], designs[q], static_cast<Eigen::Index>(r));
    };
    // Covariate levels the models were not trained with: each group's mean prepared connections.
    std::vector<std::vector<Eigen::VectorXd>> levelMeans(models.size());
    for (std::size_t q = 0; q < models.size(); ++q)
      for (const auto& src : models[q].connectivitySources)
        if (src.column == column && groups[q].Any())
          levelMeans[q] = LevelMeans(groups[q], [&](std::size_t r) {
            return files[r].empty() ? ImputedConnections(src, subjects.ids[r], designs[q], static_cast<Eigen::Index>(r)) : prepare(src, matrix(r), q, r);
          });
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
    // Each subject's matrix read once and scored under every model; the first problem in table order is reported.
    tbb::parallel_for(Eigen::Index{0}, n, [&](Eigen::Index i) {
      const auto r = static_cast<std::size_t>(i);
      try {
        const bool lacking = files[r].empty();  // the model imputes the source (NewSubjects::lacking)
        const Eigen::MatrixXd M = lacking ? Eigen::MatrixXd() : matrix(r);
        for (std::size_t q = 0; q < models.size(); ++q)
          for (const auto& src : models[q].connectivitySources) {
            if (src.column != column) continue;
            Eigen::VectorXd xc = lacking ? ImputedConnections(src, subjects.ids[r], designs[q], i) : prepare(src, M, q, r);
            if (const int g = levelMeans[q].empty() ? -1 : groups[q].of[r]; g >= 0) xc -= levelMeans[q][static_cast<std::size_t>(g)];
            AddVoxelScores(models[q], src.weights, xc, scores[q], i, parts ? &(*parts)[q] : nullptr);
          }
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
    for (const auto& error : errors)
      if (error) std::rethrow_exception(error);
  }
}

}  // namespace neuromkl::pipeline::predicting
