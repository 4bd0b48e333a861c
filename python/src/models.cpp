// neuromkl._core, models: exported models scored by `neuromkl predict`'s own code (neuromkl.load_model in
// python/neuromkl/model.py), Platt scaling as the nested CV fits it, and the CV splits of a study.
#include <pybind11/eigen.h>
#include <pybind11/stl.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bindings.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/cv/splits.hpp"
#include "neuromkl/export/model.hpp"
#include "neuromkl/metrics/calibration.hpp"
#include "neuromkl/pipeline/predict.hpp"

namespace neuromkl::python {

namespace {

using exporting::ExportedModel;

py::object Optional(const std::optional<std::pair<double, double>>& v) { return v ? py::object(py::make_tuple(v->first, v->second)) : py::none(); }

py::list ImageSources(const ExportedModel& m) {
  py::list out;
  for (const auto& s : m.imageSources) {
    py::dict d;
    d["name"] = s.name;
    d["image_column"] = s.imageColumn;
    d["shape"] = s.grid.dims;
    const auto a = s.grid.RasAffine();
    d["affine"] = py::array_t<double>({4, 4}, a.data());
    d["space"] = s.space;
    d["nan_policy"] = s.nanPolicy;
    d["intensity_scaling"] = s.intensityScaling;
    out.append(d);
  }
  return out;
}

/// What the new subjects are made of, from Python: ids, image paths or in-memory volumes per source, table cells,
/// and kernel rows for precomputed kernels.
pipeline::NewSubjects Subjects(const std::vector<std::string>& ids, const std::map<std::string, std::vector<std::string>>& images,
                               const std::map<std::string, std::vector<py::tuple>>& volumes, const std::map<std::string, std::vector<std::string>>& cells,
                               const std::map<std::string, py::tuple>& kernelRows) {
  pipeline::NewSubjects s;
  s.where = "python";
  s.ids = ids;
  s.images = images;
  s.cells = cells;
  for (const auto& [source, list] : volumes) {
    auto& held = s.volumes[source];
    auto& names = s.images[source];
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string where = fmt::format("image {} of subject {}", i, i < ids.size() ? ids[i] : "?");
      held.push_back(VolumeFromArray(list[i][0].cast<VoxelArray>(), list[i][1].cast<Affine>(), where));
      if (names.size() <= i) names.push_back(where);
    }
  }
  for (const auto& [name, rows] : kernelRows) {
    gram::FoldKernel fk;
    fk.train = rows[0].cast<Eigen::MatrixXd>();
    fk.testTrain = rows[1].cast<Eigen::MatrixXd>();
    fk.testDiag = rows[2].cast<Eigen::VectorXd>();
    s.kernels[name] = std::move(fk);
  }
  return s;
}

/// Class scores (subjects x C) of one model with `neuromkl predict`'s arithmetic (pipeline::ModelScores), and its warnings.
py::tuple Scores(const ExportedModel& model, const pipeline::NewSubjects& subjects) {
  std::vector<std::string> warnings;
  Eigen::MatrixXd scores;
  {
    py::gil_scoped_release release;
    scores = pipeline::ModelScores({model}, subjects, warnings).at(0);
  }
  return py::make_tuple(scores, warnings);
}

pipeline::NewSubjects::UnseenLevels ParseUnseenLevels(const std::string& value) {
  if (value == "refuse") return pipeline::NewSubjects::UnseenLevels::Refuse;
  if (value == "reference") return pipeline::NewSubjects::UnseenLevels::Reference;
  if (value == "estimate") return pipeline::NewSubjects::UnseenLevels::Estimate;
  throw InvalidParameter("python:UnseenLevels", "unseen_levels", "unknown value \"" + value + "\"; expected refuse, reference or estimate");
}

/// The new subjects' handling of unseen levels and new sites, from the Python keywords (as predict's options).
void SetNewSubjectOptions(pipeline::NewSubjects& subjects, const std::string& unseenLevels, const std::string& newSites, int newSiteMin,
                          const std::string& newSiteReference) {
  subjects.unseenLevels = ParseUnseenLevels(unseenLevels);
  if (newSites != "estimate" && newSites != "refuse")
    throw InvalidParameter("python:NewSites", "new_sites", "unknown value \"" + newSites + "\"; expected estimate or refuse");
  subjects.newSites = newSites == "refuse" ? pipeline::NewSubjects::NewSites::Refuse : pipeline::NewSubjects::NewSites::Estimate;
  if (newSiteMin < 2) throw InvalidParameter("python:NewSiteMin", "new_site_min", "expected 2 or more, found " + std::to_string(newSiteMin));
  subjects.newSiteMinimum = newSiteMin;
  if (!newSiteReference.empty()) {
    const auto eq = newSiteReference.find('=');
    if (eq == std::string::npos || eq == 0)
      throw InvalidParameter("python:NewSiteReference", "new_site_reference", "expected \"column=value\", found \"" + newSiteReference + "\"");
    subjects.newSiteReference = {newSiteReference.substr(0, eq), newSiteReference.substr(eq + 1)};
  }
}

learners::Task ParseTask(const std::string& task) {
  if (task == "classification") return learners::Task::Classification;
  if (task == "regression") return learners::Task::Regression;
  if (task == "multiclass") return learners::Task::Multiclass;
  throw InvalidParameter("python:Task", "task", "unknown task \"" + task + "\"; expected classification, regression or multiclass");
}

cv::Scheme ParseScheme(const std::string& scheme) {
  if (scheme == "stratified_kfold") return cv::Scheme::StratifiedKFold;
  if (scheme == "kfold") return cv::Scheme::KFold;
  if (scheme == "leave_one_out") return cv::Scheme::LeaveOneOut;
  throw InvalidParameter("python:Scheme", "scheme", "unknown scheme \"" + scheme + "\"; expected stratified_kfold, kfold or leave_one_out");
}

}  // namespace

void BindModels(py::module_& m) {
  py::class_<ExportedModel>(m, "ExportedModel", "An exported model (model/<Learner>/ or a fold's folder), as `neuromkl predict` reads it.")
      .def_readonly("study", &ExportedModel::study)
      .def_readonly("learner", &ExportedModel::learner)
      .def_readonly("learner_name", &ExportedModel::learnerName)
      .def_readonly("task", &ExportedModel::task)
      .def_readonly("which", &ExportedModel::which)
      .def_readonly("fold", &ExportedModel::fold)
      .def_readonly("params", &ExportedModel::params)
      .def_readonly("target_column", &ExportedModel::targetColumn)
      .def_readonly("positive_class", &ExportedModel::positiveClass)
      .def_readonly("negative_class", &ExportedModel::negativeClass)
      .def_readonly("class_names", &ExportedModel::classNames)
      .def_readonly("id_column", &ExportedModel::idColumn)
      .def_readonly("version", &ExportedModel::version)
      .def_readonly("fit_status", &ExportedModel::fitStatus)
      .def_readonly("info", &ExportedModel::info)
      .def_readonly("expected", &ExportedModel::expected)
      .def_readonly("centre", &ExportedModel::centre)
      .def_readonly("normalise", &ExportedModel::normalise)
      .def_readonly("kernel_names", &ExportedModel::kernelNames)
      .def_readonly("kernel_sources", &ExportedModel::kernelSources)
      .def_readonly("kernel_kinds", &ExportedModel::kernelKinds)
      .def_readonly("beta", &ExportedModel::beta)
      .def_readonly("bias", &ExportedModel::bias)
      .def_readonly("coef", &ExportedModel::coef)
      .def_readonly("training_ids", &ExportedModel::trainingIds)
      .def_readonly("covariate_columns", &ExportedModel::covariateNumeric)
      .def_property_readonly("categorical_covariates",
                             [](const ExportedModel& e) {
                               py::dict d;
                               for (const auto& [col, levels] : e.covariateCategorical) d[py::str(col)] = levels;
                               return d;
                             })
      .def_property_readonly("connectivity_columns",
                             [](const ExportedModel& e) {
                               std::vector<std::string> cols;
                               for (const auto& s : e.connectivitySources) cols.push_back(s.column);
                               return cols;
                             })
      .def_property_readonly("harmonisation_columns",
                             [](const ExportedModel& e) {
                               std::vector<std::string> cols;
                               auto add = [&](const std::optional<exporting::ModelHarmonisation>& h) {
                                 if (!h) return;
                                 const std::vector<std::string> read = h->TableColumns();
                                 cols.insert(cols.end(), read.begin(), read.end());
                               };
                               for (const auto& s : e.imageSources) add(s.harmonisation);
                               for (const auto& s : e.tabularSources) add(s.harmonisation);
                               return cols;
                             })
      .def_property_readonly("feature_columns",
                             [](const ExportedModel& e) {
                               std::vector<std::string> cols;
                               for (const auto& s : e.tabularSources) cols.insert(cols.end(), s.columns.begin(), s.columns.end());
                               return cols;
                             })
      .def_readonly("precomputed_sources", &ExportedModel::precomputedSources)
      .def_property_readonly("image_sources", &ImageSources)
      .def_property_readonly("calibration", [](const ExportedModel& e) { return Optional(e.calibration); })
      .def_property_readonly("bias_correction", [](const ExportedModel& e) { return Optional(e.biasCorrection); })
      .def_property_readonly("target_confounds", [](const ExportedModel& e) -> py::object {
        if (!e.targetConfounds) return py::none();
        const auto& t = *e.targetConfounds;
        py::list categorical;
        for (const auto& [column, levels] : t.categorical) categorical.append(py::make_tuple(column, levels));
        return py::dict(py::arg("numeric") = t.numeric, py::arg("categorical") = categorical,
                        py::arg("coefficients") = std::vector<double>(t.coefficients.data(), t.coefficients.data() + t.coefficients.size()));
      });

  m.def("read_model", &exporting::ReadModel, py::arg("dir"), "Reads one model folder (exporting::ReadModel: checksums and shapes checked).");
  m.def("model_folders", &exporting::ModelFolders, py::arg("dir"), "The model folders of model/ (its index) or the folder itself.");
  m.def(
      "model_scores",
      [](const ExportedModel& model, const std::vector<std::string>& ids, const std::map<std::string, std::vector<std::string>>& images,
         const std::map<std::string, std::vector<py::tuple>>& volumes, const std::map<std::string, std::vector<std::string>>& cells,
         const std::map<std::string, py::tuple>& kernelRows, const std::string& unseenLevels, const std::string& newSites, int newSiteMin,
         const std::string& newSiteReference) {
        pipeline::NewSubjects subjects = Subjects(ids, images, volumes, cells, kernelRows);
        SetNewSubjectOptions(subjects, unseenLevels, newSites, newSiteMin, newSiteReference);
        return Scores(model, subjects);
      },
      py::arg("model"), py::arg("ids"), py::arg("images"), py::arg("volumes"), py::arg("cells"), py::arg("kernels"), py::arg("unseen_levels") = "refuse",
      py::arg("new_sites") = "estimate", py::arg("new_site_min") = 10, py::arg("new_site_reference") = "",
      "Class scores (subjects x C) and warnings of new subjects, with the arithmetic of `neuromkl predict` (pipeline::ModelScores).");
  m.def(
      "model_scores_of_input",
      [](const ExportedModel& model, const std::string& input, const std::string& unseenLevels, const std::string& newSites, int newSiteMin,
         const std::string& newSiteReference) {
        pipeline::NewSubjects subjects = pipeline::ReadNewSubjects(input, model);
        SetNewSubjectOptions(subjects, unseenLevels, newSites, newSiteMin, newSiteReference);
        py::tuple scores = Scores(model, subjects);
        return py::make_tuple(scores[0], scores[1], subjects.ids);
      },
      py::arg("model"), py::arg("input"), py::arg("unseen_levels") = "refuse", py::arg("new_sites") = "estimate", py::arg("new_site_min") = 10,
      py::arg("new_site_reference") = "", "Scores of the subjects of a table or study file, read as `neuromkl predict` reads them; (scores, warnings, ids).");

  m.def(
      "fit_platt",
      [](const Eigen::VectorXd& decision, const Eigen::VectorXd& labels) {
        const metrics::PlattScaling p = metrics::FitPlatt(decision, labels);
        return py::make_tuple(p.a, p.b, p.samples, p.iterations, p.converged);
      },
      py::arg("decision"), py::arg("labels"), "metrics::FitPlatt on +-1 labels: (A, B, samples, iterations, converged).");
  m.def(
      "platt_probabilities",
      [](double a, double b, int samples, const Eigen::VectorXd& decision) {
        metrics::PlattScaling p;
        p.a = a, p.b = b, p.samples = samples;
        return metrics::PlattProbabilities(p, decision);
      },
      py::arg("a"), py::arg("b"), py::arg("samples"), py::arg("decision"), "P(positive | f) = 1 / (1 + exp(A f + B)), computed without overflow.");
  m.def(
      "make_folds",
      [](const std::string& scheme, int k, const std::string& task, const Eigen::VectorXd& y, std::uint64_t seed) {
        cv::SplitSpec spec;
        spec.scheme = ParseScheme(scheme);
        spec.k = k;
        std::vector<std::pair<std::vector<int>, std::vector<int>>> out;
        for (const auto& f : cv::MakeFolds(spec, ParseTask(task), y, {}, {}, seed, "probability_cv")) out.emplace_back(f.train, f.test);
        return out;
      },
      py::arg("scheme"), py::arg("k"), py::arg("task"), py::arg("y"), py::arg("seed"),
      "cv::MakeFolds: (train, test) index lists, the splits a study makes with this scheme and seed.");
  m.def("derive_seed", &cv::DeriveSeed, py::arg("seed"), py::arg("stream"), "cv::DeriveSeed: the seed of an independent stream.");
}

}  // namespace neuromkl::python
