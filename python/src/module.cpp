// neuromkl._core: the C++ learners, per-fold kernel preprocessing and study runner for Python (images.cpp: the
// region-kernel transformer's pieces; models.cpp: exported models, Platt scaling, CV splits).
// Thin on purpose: the scikit-learn estimators (python/neuromkl/estimators.py) hold parameters and
// fitted arrays; this module converts arrays, releases the GIL around the computation and maps
// neuromkl::Error subclasses onto Python exceptions with the same messages.
#include <pybind11/eigen.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <spdlog/spdlog.h>

#include <Eigen/Core>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/config/study_config.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/progress.hpp"
#include "neuromkl/gram/combat.hpp"
#include "neuromkl/gram/preprocess.hpp"
#include "neuromkl/kernels/kernel_set.hpp"
#include "neuromkl/learners/learner.hpp"
#include "neuromkl/pipeline/study_run.hpp"

namespace py = pybind11;
using neuromkl::learners::KernelList;

namespace {

using Stack = py::array_t<double, py::array::c_style | py::array::forcecast>;
using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Python exception classes, created once at import (see PYBIND11_MODULE).
PyObject* gErrorBase = nullptr;
std::map<neuromkl::ErrorKind, PyObject*> gErrorClasses;

/// A stack of kernels (k x rows x cols, C order) as a list of column-major matrices.
KernelList ToKernelList(const Stack& stack, const char* what) {
  if (stack.ndim() != 3)
    throw neuromkl::InputError("python:KernelStackShape", what,
                               "expected a 3-D kernel stack (n_kernels x rows x columns), got an array with " + std::to_string(stack.ndim()) +
                                   " dimension(s)");
  const auto k = stack.shape(0), rows = stack.shape(1), cols = stack.shape(2);
  KernelList out;
  out.reserve(static_cast<std::size_t>(k));
  const double* data = stack.data();
  for (py::ssize_t j = 0; j < k; ++j)
    out.emplace_back(Eigen::Map<const RowMatrix>(data + j * rows * cols, rows, cols));
  return out;
}

Eigen::MatrixXd ToMatrix(const Stack& a, const char* what) {
  if (a.ndim() != 2)
    throw neuromkl::InputError("python:Shape", what, "expected a 2-D array, got " + std::to_string(a.ndim()) + " dimension(s)");
  return Eigen::Map<const RowMatrix>(a.data(), a.shape(0), a.shape(1));
}

py::array_t<double> ToStack(const KernelList& list, Eigen::Index rows, Eigen::Index cols) {
  py::array_t<double> out({static_cast<py::ssize_t>(list.size()), static_cast<py::ssize_t>(rows), static_cast<py::ssize_t>(cols)});
  auto* data = out.mutable_data();
  for (std::size_t j = 0; j < list.size(); ++j)
    Eigen::Map<RowMatrix>(data + static_cast<Eigen::Index>(j) * rows * cols, rows, cols) = list[j];
  return out;
}

neuromkl::learners::Task ParseTask(const std::string& task) {
  if (task == "classification") return neuromkl::learners::Task::Classification;
  if (task == "regression") return neuromkl::learners::Task::Regression;
  if (task == "multiclass") return neuromkl::learners::Task::Multiclass;
  throw neuromkl::InvalidParameter("python:Task", "task", "unknown task \"" + task + "\"; expected classification, regression or multiclass");
}

/// Preprocesses every kernel of a fold with the training statistics only: centring, then cosine
/// normalisation, from the fold vectors and with the arithmetic of nested CV (gram::BlockFoldVectors
/// gives the vectors nested CV computes from the full kernel), so fits match the CLI's to the last bit.
/// `test` may have no rows (fit time).
void PrepareFold(KernelList& train, KernelList& test, const Eigen::MatrixXd& testDiag, bool centre, bool normalise) {
  for (std::size_t j = 0; j < train.size(); ++j) {
    const Eigen::VectorXd diag = testDiag.rows() > 0 ? Eigen::VectorXd(testDiag.row(static_cast<Eigen::Index>(j)).transpose()) : Eigen::VectorXd();
    const auto v = neuromkl::gram::BlockFoldVectors(train[j], test[j], diag, centre, normalise);
    neuromkl::gram::PrepareBlocksInPlace(train[j], test[j], v);
  }
}

void CheckDiag(const Eigen::MatrixXd& diag, std::size_t kernels, Eigen::Index m, bool normalise) {
  if (diag.rows() == 0) {
    if (normalise)
      throw neuromkl::InputError("python:TestDiagMissing", "decision",
                                 "normalise=True needs the test samples' self-similarities k(x, x): pass test_diag (n_kernels x n_test) "
                                 "or fit with normalise=False");
    return;
  }
  if (diag.rows() != static_cast<Eigen::Index>(kernels) || diag.cols() != m)
    throw neuromkl::InputError("python:TestDiagShape", "decision",
                               "test_diag is " + std::to_string(diag.rows()) + "x" + std::to_string(diag.cols()) + ", expected " +
                                   std::to_string(kernels) + "x" + std::to_string(m) + " (= kernels x test samples)");
}

/// Fits a catalogue learner on a kernel stack; returns the fitted state as plain arrays.
neuromkl::learners::MulticlassWeights ParseMulticlassWeights(const std::string& weights) {
  if (weights == "shared") return neuromkl::learners::MulticlassWeights::Shared;
  if (weights == "per_class") return neuromkl::learners::MulticlassWeights::PerClass;
  throw neuromkl::InvalidParameter("python:MulticlassWeights", "multiclass_weights",
                                   "multiclass_weights must be \"shared\" or \"per_class\", got \"" + weights + "\"");
}

py::dict Fit(const std::string& learner, const std::map<std::string, double>& params, const Stack& trainStack, const Stack& yArray,
             const std::string& task, int classes, bool centre, bool normalise, const std::string& multiclassWeights) {
  if (trainStack.ndim() != 3) ToKernelList(trainStack, "fit");  // throws the shape error
  neuromkl::learners::Targets targets;
  targets.task = ParseTask(task);
  targets.classes = classes;
  if (yArray.ndim() != 1) throw neuromkl::InputError("python:TargetShape", "fit", "expected 1-D targets");
  targets.y = Eigen::Map<const Eigen::VectorXd>(yArray.data(), yArray.shape(0));
  neuromkl::learners::Model model;
  double coreSeconds = 0;
  {
    // Without the GIL from here: the arrays stay alive (they are arguments), their buffers are read only.
    // The copy into Eigen matrices takes the place of the pipeline's per-fold SliceFold copy.
    py::gil_scoped_release release;
    const auto start = std::chrono::steady_clock::now();
    KernelList train = ToKernelList(trainStack, "fit");
    // The checks the CLI makes of precomputed kernels: square, finite, symmetric, positive semi-definite.
    for (std::size_t j = 0; j < train.size(); ++j) neuromkl::kernels::CheckKernel(train[j], "kernel " + std::to_string(j), train[j].rows(), "fit");
    const auto learnerObject = neuromkl::learners::MakeLearner(learner, params, ParseMulticlassWeights(multiclassWeights));
    KernelList none;
    for (const auto& K : train) none.emplace_back(0, K.cols());
    PrepareFold(train, none, Eigen::MatrixXd(), centre, normalise);
    model = learnerObject->Fit(train, targets);
    coreSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  py::dict out;
  out["beta"] = model.beta;
  out["coef"] = model.coef;
  out["alpha"] = model.alpha;
  out["bias"] = model.bias;
  out["coefs"] = model.coefs;
  out["biases"] = model.biases;
  out["betas"] = model.betas;
  out["status"] = std::string(neuromkl::learners::ToString(model.info.status));
  out["iterations"] = model.info.iterations;
  out["inner_solves"] = model.info.innerSolves;
  out["inner_iterations"] = model.info.innerIterations;
  out["objective"] = model.info.objective;
  out["gap"] = model.info.gap;
  out["seconds"] = model.info.seconds;
  out["core_seconds"] = coreSeconds;  // preprocessing + fit in C++, without the GIL
  return out;
}

/// Decision values (binary/regression: m) or class scores (multiclass: m x classes) of a fitted
/// model for test-vs-train kernels, preprocessed with the training kernels' statistics.
py::array_t<double> Decision(const Eigen::VectorXd& beta, const Eigen::VectorXd& coef, double bias, const Eigen::MatrixXd& coefs,
                             const Eigen::VectorXd& biases, const Eigen::MatrixXd& betas, const Stack& trainStack, const Stack& testStack, const Stack& testDiag, bool centre,
                             bool normalise) {
  for (const Stack* a : {&trainStack, &testStack})
    if (a->ndim() != 3) ToKernelList(*a, "decision");  // throws the shape error
  if (testStack.shape(0) != trainStack.shape(0))
    throw neuromkl::InputError("learners:KernelCount", "decision",
                               "got " + std::to_string(testStack.shape(0)) + " test kernels, the model was trained on " +
                                   std::to_string(trainStack.shape(0)));
  const Eigen::MatrixXd diag = testDiag.size() == 0 ? Eigen::MatrixXd() : ToMatrix(testDiag, "test_diag");
  const Eigen::Index m = testStack.shape(1);
  CheckDiag(diag, static_cast<std::size_t>(trainStack.shape(0)), m, normalise);
  neuromkl::learners::Model model;
  model.beta = beta;
  model.coef = coef;
  model.bias = bias;
  model.coefs = coefs;
  model.biases = biases;
  model.betas = betas;
  Eigen::MatrixXd scores;
  {
    py::gil_scoped_release release;  // the arrays are arguments: alive and unchanged while we read them
    KernelList train = ToKernelList(trainStack, "decision");
    KernelList test = ToKernelList(testStack, "decision");
    const Eigen::Index cols = model.Multiclass() ? model.coefs.rows() : model.coef.size();
    for (std::size_t j = 0; j < test.size(); ++j)
      if (test[j].cols() != cols || train[j].rows() != cols || train[j].cols() != cols)
        throw neuromkl::InputError("learners:TestShape", "decision",
                                   "test kernel " + std::to_string(j) + " is " + std::to_string(test[j].rows()) + "x" + std::to_string(test[j].cols()) +
                                       ", expected " + std::to_string(m) + "x" + std::to_string(cols) + " (= test subjects x training subjects)");
    PrepareFold(train, test, diag, centre, normalise);
    scores = model.Scores(test);
  }
  py::array_t<double> out;
  if (model.Multiclass()) {
    out = py::array_t<double>({static_cast<py::ssize_t>(scores.rows()), static_cast<py::ssize_t>(scores.cols())});
    Eigen::Map<RowMatrix>(out.mutable_data(), scores.rows(), scores.cols()) = scores;
  } else {
    out = py::array_t<double>(static_cast<py::ssize_t>(scores.rows()));
    Eigen::Map<Eigen::VectorXd>(out.mutable_data(), scores.rows()) = scores.col(0);
  }
  return out;
}

/// A fold's centring and cosine normalisation with training statistics (as nested CV prepares a fold), for inspection and tests.
py::tuple PreprocessFold(const Stack& trainStack, const Stack& testStack, const Stack& testDiag, bool centre, bool normalise) {
  KernelList train = ToKernelList(trainStack, "preprocess");
  KernelList test = ToKernelList(testStack, "preprocess");
  if (test.size() != train.size()) throw neuromkl::InputError("python:KernelCount", "preprocess", "train and test stacks hold different numbers of kernels");
  const Eigen::MatrixXd diag = testDiag.size() == 0 ? Eigen::MatrixXd() : ToMatrix(testDiag, "test_diag");
  const Eigen::Index n = trainStack.shape(1), m = testStack.shape(1);
  CheckDiag(diag, train.size(), m, normalise);
  {
    py::gil_scoped_release release;
    PrepareFold(train, test, diag, centre, normalise);
  }
  return py::make_tuple(ToStack(train, n, n), ToStack(test, m, n));
}

py::list Catalog() {
  py::list out;
  for (const auto& l : neuromkl::learners::LearnerCatalog()) {
    py::dict d;
    d["name"] = l.name;
    d["description"] = l.description;
    d["classification"] = l.classification;
    d["regression"] = l.regression;
    d["multiple_kernels"] = l.multipleKernels;
    d["multiclass"] = l.multiclass;
    d["semi_supervised"] = l.semiSupervised;
    py::list params;
    for (const auto& p : l.params) {
      py::dict q;
      q["name"] = p.name;
      q["default"] = p.defaultValue;
      q["low"] = p.lo;
      q["high"] = p.hi;
      q["low_open"] = p.loOpen;
      q["high_open"] = p.hiOpen;
      q["integer"] = p.integer;
      q["doc"] = p.doc;
      params.append(q);
    }
    d["params"] = params;
    out.append(d);
  }
  return out;
}

/// Runs a study like `neuromkl run`: from a file, or from JSON text with a base folder.
py::dict RunStudy(const std::string& pathOrText, bool isText, const std::string& baseDir, const std::string& outDir, int threads, bool force,
                  bool verbose) {
  neuromkl::pipeline::RunOutcome outcome;
  {
    py::gil_scoped_release release;
    neuromkl::SetProgressEnabled(verbose);  // as `neuromkl run -q` unless verbose
    spdlog::set_level(verbose ? spdlog::level::info : spdlog::level::warn);
    neuromkl::config::StudyConfig study =
        isText ? neuromkl::config::ParseStudyConfig(pathOrText, baseDir, "<dict>") : neuromkl::config::LoadStudyConfig(pathOrText);
    if (threads >= 0) {  // the thread count given here is the study's /threads, checked as one from the file would be
      study.threads = threads;
      neuromkl::config::CheckStudyConfig(study);
    }
    neuromkl::pipeline::RunOptions options;
    options.outDir = outDir;
    options.force = force;
    outcome = neuromkl::pipeline::RunStudy(study, options);
  }
  py::dict out;
  out["output_dir"] = outcome.outputDir;
  out["summary"] = outcome.summary;
  out["permutation_blocks_reused"] = outcome.permutationBlocksReused;
  return out;
}

/// ComBat fitted on (x_fit, sites_fit, cov_fit) and applied to (x_apply, sites_apply, cov_apply): gram::FitComBat and
/// gram::ApplyComBat, as each fold of a harmonised study runs them. Returns the harmonised rows and the estimates.
py::tuple Combat(const Stack& xFit, const std::vector<int>& sitesFit, const Stack& covFit, const Stack& xApply, const std::vector<int>& sitesApply,
                 const Stack& covApply, bool empiricalBayes, double tolerance) {
  const Eigen::MatrixXd fit = ToMatrix(xFit, "x_fit"), cFit = ToMatrix(covFit, "cov_fit"), cApply = ToMatrix(covApply, "cov_apply");
  Eigen::MatrixXd apply = ToMatrix(xApply, "x_apply");
  neuromkl::gram::ComBatModel model;
  {
    py::gil_scoped_release release;
    neuromkl::gram::ComBatOptions options;
    options.empiricalBayes = empiricalBayes;
    options.tolerance = tolerance;
    model = neuromkl::gram::FitComBat(fit, sitesFit, cFit, options, "combat");
    neuromkl::gram::ApplyComBat(model, apply, sitesApply, cApply, "combat");
  }
  py::dict estimates;
  estimates["alpha"] = model.alpha;
  estimates["beta"] = model.beta;
  estimates["sigma"] = model.sigma;
  estimates["gamma_hat"] = model.gammaHat;
  estimates["delta2_hat"] = model.delta2Hat;
  estimates["gamma_star"] = model.gammaStar;
  estimates["delta2_star"] = model.delta2Star;
  estimates["sites"] = model.sites;
  estimates["iterations"] = model.iterations;
  return py::make_tuple(apply, estimates);
}

PyObject* MakeErrorClass(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  const std::string full = std::string("neuromkl._core.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(full.c_str(), doc, bases, nullptr);
  if (!cls) throw py::error_already_set();
  m.add_object(name, py::handle(cls));
  return cls;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "neuromkl C++ core: learners, per-fold kernel preprocessing, study runner";

  gErrorBase = MakeErrorClass(m, "NeuromklError", PyExc_RuntimeError,
                              "Base of every neuromkl error; attributes `code` (stable id) and `where` (stage, file or JSON pointer).");
  const auto sub = [&](const char* name, PyObject* second, const char* doc) {
    PyObject* bases = second ? PyTuple_Pack(2, gErrorBase, second) : PyTuple_Pack(1, gErrorBase);
    PyObject* cls = MakeErrorClass(m, name, bases, doc);
    Py_DECREF(bases);
    return cls;
  };
  using neuromkl::ErrorKind;
  gErrorClasses[ErrorKind::Config] = sub("ConfigError", PyExc_ValueError, "Bad study/batch configuration (exit code 2 in the CLI).");
  gErrorClasses[ErrorKind::InvalidParameter] = sub("InvalidParameter", PyExc_ValueError, "A parameter out of range or unknown.");
  gErrorClasses[ErrorKind::Input] = sub("InputError", PyExc_ValueError, "Bad input data: shapes, labels, non-finite values.");
  gErrorClasses[ErrorKind::Geometry] = sub("GeometryMismatch", PyExc_ValueError, "Images and atlas on different grids.");
  gErrorClasses[ErrorKind::Numerical] = sub("NumericalError", nullptr, "A numerical failure (non-finite result, kernel not PSD).");
  gErrorClasses[ErrorKind::Io] = sub("IoError", PyExc_OSError, "A file could not be read or written.");

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const neuromkl::Error& e) {
      PyObject* cls = gErrorClasses.count(e.kind()) ? gErrorClasses[e.kind()] : gErrorBase;
      py::object instance = py::reinterpret_borrow<py::object>(cls)(e.what());
      instance.attr("code") = e.code();
      instance.attr("where") = e.where();
      PyErr_SetObject(cls, instance.ptr());
    }
  });

  m.def("fit", &Fit, py::arg("learner"), py::arg("params"), py::arg("kernels"), py::arg("y"), py::arg("task"), py::arg("classes") = 0,
        py::arg("centre") = true, py::arg("normalise") = true, py::arg("multiclass_weights") = "shared",
        "Fits a catalogue learner on n_kernels x n x n training kernels (preprocessed per fold as the pipeline does); "
        "returns beta, coef, alpha, bias, coefs, biases and the fit info.");
  m.def("decision", &Decision, py::arg("beta"), py::arg("coef"), py::arg("bias"), py::arg("coefs"), py::arg("biases"), py::arg("betas"), py::arg("train_kernels"),
        py::arg("test_kernels"), py::arg("test_diag"), py::arg("centre"), py::arg("normalise"),
        "Decision values (or multiclass scores) for n_kernels x m x n test-vs-train kernels.");
  m.def("preprocess_fold", &PreprocessFold, py::arg("train_kernels"), py::arg("test_kernels"), py::arg("test_diag"), py::arg("centre") = true,
        py::arg("normalise") = true, "centring and cosine normalisation with training statistics, as nested CV prepares a fold: returns (train, test) stacks.");
  m.def("combat", &Combat, py::arg("x_fit"), py::arg("sites_fit"), py::arg("cov_fit"), py::arg("x_apply"), py::arg("sites_apply"), py::arg("cov_apply"),
        py::arg("empirical_bayes") = true, py::arg("tolerance") = 1e-10,
        "ComBat (gram::FitComBat on the fit rows, gram::ApplyComBat on the apply rows): returns (harmonised apply rows, estimates).");
  m.def("learner_catalog", &Catalog, "Every learner with its tasks and parameter table (names, defaults, bounds).");
  m.def("run_study", &RunStudy, py::arg("path_or_text"), py::arg("is_text"), py::arg("base_dir"), py::arg("out_dir"), py::arg("threads"),
        py::arg("force"), py::arg("verbose"), "Runs a study through pipeline::RunStudy; returns the output folder and summary.");
  m.def("version", &neuromkl::pipeline::NeuromklVersion);
  m.def(
      "data_dir",
      []() {
        const auto found = neuromkl::atlas::FindDataDir();
        return py::make_tuple(found.dir, found.how);
      },
      "Where the built-in atlases are read from: (folder, how it was found).");
  neuromkl::python::BindImages(m);
  neuromkl::python::BindModels(m);
  m.def("versions", &neuromkl::pipeline::Versions);
}
