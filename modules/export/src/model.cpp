// model.json and the arrays of an exported model (docs/predict.md), and the outputs of `neuromkl predict`.
#include "neuromkl/export/model.hpp"

#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "json_format.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/files.hpp"
#include "neuromkl/core/hash.hpp"
#include "neuromkl/core/npy.hpp"

namespace neuromkl::exporting {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "neuromkl-model";
// 2: the card carries the checksum of its own content ("card_xxh3"), as each array file has one.
constexpr int kFormatVersion = 2;
constexpr const char* kCardChecksum = "card_xxh3";

/// The checksum of a card's content (without its own checksum entry), over its compact dump: the same for the card as
/// written and as read back (whatever its indentation), different once any value is edited.
std::string CardChecksum(Json j) {
  j.erase(kCardChecksum);
  return Hasher().Update(std::string_view("neuromkl-model-card-v1")).Update(j.dump()).Hex();
}

Json GridJson(const io::Geometry& g) {
  return {{"dims", g.dims}, {"spacing", g.spacing}, {"origin_lps", g.origin}, {"direction", g.direction}, {"ras_affine", g.RasAffine()}};
}

/// Writes an array file and returns its entry for model.json (file name, shape and checksum).
Json WriteArray(const std::string& dir, const std::string& file, const Eigen::MatrixXd& a) {
  WriteNpy(dir + "/" + file, a);
  return {{"file", file}, {"shape", {a.rows(), a.cols()}}, {"xxh3", HashFile(dir + "/" + file).Hex()}};
}

Json NumMap(const std::map<std::string, double>& m) {
  Json j = Json::object();
  for (const auto& [k, v] : m) j[k] = Num(v);
  return j;
}

/// Reading: every failure names the model file and what was wrong.
class Reader {
 public:
  explicit Reader(std::string dir) : dir_(std::move(dir)), card_(dir_ + "/model.json") {}
  const std::string& Card() const { return card_; }
  [[noreturn]] void Corrupt(const std::string& what) const { throw InputError("model:Corrupt", card_, what); }
  Eigen::MatrixXd Array(const Json& entry, Eigen::Index rows, Eigen::Index cols, const std::string& what) const {
    if (!entry.is_object() || !entry.contains("file")) Corrupt(what + ": expected an array entry {file, shape, xxh3}");
    const std::string file = dir_ + "/" + entry.at("file").get<std::string>();
    std::error_code ec;
    if (!fs::is_regular_file(file, ec)) throw InputError("model:Missing", file, what + ": the model's array file is missing");
    if (entry.contains("xxh3") && HashFile(file).Hex() != entry.at("xxh3").get<std::string>())
      throw InputError("model:Corrupt", file, what + ": the file's checksum differs from model.json (the file was changed or damaged)");
    Eigen::MatrixXd a = ReadNpy(file);
    if (a.rows() == 0 && a.cols() == 0 && (rows == 0 || cols == 0)) a.resize(rows < 0 ? 0 : rows, cols < 0 ? 0 : cols);
    if ((rows >= 0 && a.rows() != rows) || (cols >= 0 && a.cols() != cols))
      throw InputError("model:Corrupt", file,
                       fmt::format("{}: expected {} x {}, found {} x {}", what, rows < 0 ? std::string("any") : std::to_string(rows),
                                   cols < 0 ? std::string("any") : std::to_string(cols), a.rows(), a.cols()));
    return a;
  }

 private:
  std::string dir_, card_;
};

/// A harmonised source's ComBat estimates: the design in the card, the per-voxel arrays beside it.
Json HarmonisationJson(const std::string& dir, const std::string& stem, const ModelHarmonisation& h) {
  Json cat = Json::array();
  for (const auto& [col, levels] : h.covariateCategorical) cat.push_back({{"column", col}, {"levels", levels}});
  Json j = {{"method", "combat"},
            {"site_column", h.siteColumn},
            {"sites", h.sites},
            {"site_counts", h.siteCounts},
            {"empirical_bayes", h.empiricalBayes},
            {"fit_on", h.fitOn},
            {"covariates", {{"numeric", h.covariateNumeric}, {"categorical", cat}}},
            {"voxels", WriteArray(dir, stem + "combat_voxels.npy", h.voxels)},
            {"gamma_star", WriteArray(dir, stem + "combat_gamma.npy", h.gammaStar)},
            {"delta2_star", WriteArray(dir, stem + "combat_delta2.npy", h.delta2Star)},
            {"note", "per voxel of the source's voxels: alpha, sigma, pass-through flag, beta per preserved covariate column; gamma* and "
                     "delta*^2 per training site (rows in sites order); x* = sigma (z - gamma*) / delta* + alpha + c beta, "
                     "z = (x - alpha - c beta) / sigma"}};
  if (h.covariateFill.size() > 0) j["covariates"]["impute_fill"] = std::vector<double>(h.covariateFill.data(), h.covariateFill.data() + h.covariateFill.size());
  return j;
}

/// Every source's entry of the card, its arrays written beside it.
Json SourcesJson(const std::string& dir, const ExportedModel& m) {
  Json sources = Json::array();
  for (std::size_t s = 0; s < m.imageSources.size(); ++s) {
    const auto& src = m.imageSources[s];
    const std::string stem = fmt::format("images{}_", s);
    Eigen::MatrixXd scale(static_cast<Eigen::Index>(src.scaleVoxels.size()), 1);
    for (std::size_t v = 0; v < src.scaleVoxels.size(); ++v) scale(static_cast<Eigen::Index>(v), 0) = static_cast<double>(src.scaleVoxels[v]);
    sources.push_back({{"kind", "images"},
                       {"name", src.name},
                       {"image_column", src.imageColumn},
                       {"grid", GridJson(src.grid)},
                       {"space", src.space},
                       {"nan_policy", src.nanPolicy},
                       {"intensity_scaling", src.intensityScaling},
                       {"voxels", WriteArray(dir, stem + "voxels.npy", src.voxels)},
                       {"weights", WriteArray(dir, stem + "weights.npy", src.weights)},
                       {"scale_voxels", scale.rows() > 0 ? WriteArray(dir, stem + "scale_voxels.npy", scale) : Json(nullptr)},
                       {"note", "voxels: linear index, training mean, covariate coefficient images; weights: kernel, voxel row, p, "
                                "primal weight per class"}});
    if (src.harmonisation) sources.back()["harmonisation"] = HarmonisationJson(dir, stem, *src.harmonisation);
    if (src.imputed.size() > 0) sources.back()["imputed"] = WriteArray(dir, stem + "imputed.npy", Eigen::MatrixXd(src.imputed));
  }
  for (std::size_t s = 0; s < m.tabularSources.size(); ++s) {
    const auto& src = m.tabularSources[s];
    const std::string stem = fmt::format("tabular{}_", s);
    Eigen::MatrixXd stats(2, src.mean.size());
    stats.row(0) = src.mean.transpose();
    stats.row(1) = src.sd.transpose();
    Json kernels = Json::array();
    for (const auto& k : src.kernels)
      kernels.push_back({{"kernel", k.kernel}, {"columns", k.columns}, {"function", k.function}, {"value", k.value}, {"offset", k.offset}});
    sources.push_back({{"kind", "tabular"},
                       {"name", src.name},
                       {"id_column", src.idColumn},
                       {"standardise", src.standardise},
                       {"columns", src.columns},
                       {"kernels", kernels},
                       {"rows", WriteArray(dir, stem + "rows.npy", src.rows)},
                       {"column_stats", WriteArray(dir, stem + "column_stats.npy", stats)},
                       {"impute", src.fill.size() > 0 ? "median" : "none"}});
    if (src.fill.size() > 0) sources.back()["fill"] = WriteArray(dir, stem + "fill.npy", Eigen::MatrixXd(src.fill.transpose()));
    if (!src.trainingHas.empty()) sources.back()["training_has"] = std::vector<int>(src.trainingHas.begin(), src.trainingHas.end());
    if (src.harmonisation) sources.back()["harmonisation"] = HarmonisationJson(dir, stem, *src.harmonisation);
  }
  for (std::size_t s = 0; s < m.connectivitySources.size(); ++s) {
    const auto& src = m.connectivitySources[s];
    const std::string stem = fmt::format("connectivity{}_", s);
    sources.push_back({{"kind", "connectivity"},
                       {"name", src.name},
                       {"column", src.column},
                       {"nodes", src.nodes},
                       {"edges", WriteArray(dir, stem + "edges.npy", src.edges)},
                       {"weights", WriteArray(dir, stem + "weights.npy", src.weights)},
                       {"note", "edges: connection index (a < b, upper triangle row by row), training mean, covariate coefficients; weights: "
                                "kernel, edge row, 1, primal weight per class"}});
    if (src.imputed.size() > 0) sources.back()["imputed"] = WriteArray(dir, stem + "imputed.npy", Eigen::MatrixXd(src.imputed));
  }
  for (const auto& name : m.precomputedSources)
    sources.push_back({{"kind", "precomputed"},
                       {"name", name},
                       {"note", "prediction needs each new subject's kernel row against the training subjects and its self-similarity "
                                "(neuromkl predict --kernel-rows); the training block of each kernel is in precomputed_kernels"}});
  return sources;
}

}  // namespace

void WriteModel(const std::string& dir, const ExportedModel& m) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError("model:Mkdir", dir, "cannot create the model folder: " + ec.message());
  const int C = m.Classes();
  Json j = {{"format", kFormat},
            {"format_version", kFormatVersion},
            {"description", "neuromkl model card: what was trained, on what, how, and how well it is expected to predict (docs/predict.md)"},
            {"study", m.study},
            {"model", m.which},
            {"learner", {{"label", m.learner}, {"name", m.learnerName}, {"parameters", m.params}, {"fit_status", m.fitStatus}}},
            {"task", m.task},
            {"target", {{"column", m.targetColumn}}},
            {"id_column", m.idColumn},
            {"neuromkl_version", m.version},
            {"seed", m.seed},
            {"preprocessing", {{"centre", m.centre}, {"normalise", m.normalise}}},
            {"bias", Json::array()},
            {"kernels", Json::array()},
            {"training", {{"subjects", m.trainingIds}, {"summary", NumMap(m.trainingSummary)}}},
            {"expected_performance",
             {{"note", "nested cross-validation estimates of this study (pooled over out-of-fold predictions; sd over outer folds)"},
              {"pooled", NumMap(m.expected)},
              {"fold_sd", NumMap(m.expectedSd)}}},
            {"info", m.info},
            {"calibration", nullptr},
            {"bias_correction", nullptr},
            {"arrays", Json::object()}};
  if (m.fold >= 0) j["outer_fold"] = {{"fold", m.fold}, {"repeat", m.repeat}};
  if (m.task == "classification") j["target"]["classes"] = {{"positive", m.positiveClass}, {"negative", m.negativeClass}};
  if (m.task == "multiclass") j["target"]["classes"] = m.classNames;
  for (Eigen::Index c = 0; c < C; ++c) j["bias"].push_back(m.bias[c]);
  for (std::size_t k = 0; k < m.kernelNames.size(); ++k) {
    Json b = Json::array();
    for (Eigen::Index c = 0; c < C; ++c) b.push_back(m.beta(static_cast<Eigen::Index>(k), c));
    j["kernels"].push_back({{"name", m.kernelNames[k]}, {"source", m.kernelSources[k]}, {"kind", m.kernelKinds[k]}, {"beta", b},
                            {"zero_norm_floor", m.floors[static_cast<Eigen::Index>(k)]}});
  }
  if (m.calibration) j["calibration"] = {{"method", "platt"}, {"A", m.calibration->first}, {"B", m.calibration->second}};
  if (m.biasCorrection) j["bias_correction"] = {{"method", "linear"}, {"slope", m.biasCorrection->first}, {"intercept", m.biasCorrection->second}};
  if (const auto& t = m.targetConfounds) {
    Json cat = Json::array();
    for (const auto& [col, levels] : t->categorical) cat.push_back({{"column", col}, {"levels", levels}});
    j["target_confounds"] = {{"numeric", t->numeric},
                             {"categorical", cat},
                             {"coefficients", std::vector<double>(t->coefficients.data(), t->coefficients.data() + t->coefficients.size())},
                             {"note", "the model predicts the target minus c b, c = (1, numeric columns, dummies of the categorical columns' "
                                      "levels after the first), b fitted on the training subjects; predict adjusts known targets the same way"}};
    if (t->fill.size() > 0) j["target_confounds"]["impute_fill"] = std::vector<double>(t->fill.data(), t->fill.data() + t->fill.size());
  }
  j["arrays"]["coef"] = WriteArray(dir, "coef.npy", m.coef);
  if (m.design.cols() > 0) {
    Eigen::MatrixXd cov(m.design.rows(), m.design.cols() + 1);
    for (Eigen::Index i = 0; i < m.design.rows(); ++i) cov(i, 0) = m.fitRows.empty() ? 1.0 : static_cast<double>(m.fitRows[static_cast<std::size_t>(i)]);
    cov.rightCols(m.design.cols()) = m.design;
    Json cat = Json::array();
    for (const auto& [col, levels] : m.covariateCategorical) cat.push_back({{"column", col}, {"levels", levels}});
    j["covariates"] = {{"numeric", m.covariateNumeric}, {"categorical", cat}, {"fit_on", m.covariateFitOn},
                       {"note", "training design rows (fit flag, intercept, columns) in arrays.covariates; new subjects are residualised with "
                                "the coefficients fitted on the fit rows"}};
    if (m.covariateFill.size() > 0) {
      Json fill = Json::array();
      for (Eigen::Index c = 0; c < m.covariateFill.size(); ++c) fill.push_back(m.covariateFill[c]);
      j["covariates"]["impute"] = {{"method", "median"},
                                   {"fill", fill},
                                   {"note", "per design column (intercept first), the value of a new subject's missing covariate: the training "
                                            "subjects' median, or the dummies of their most frequent level; the training rows are stored imputed"}};
    }
    j["arrays"]["covariates"] = WriteArray(dir, "covariates.npy", cov);
  }
  j["sources"] = SourcesJson(dir, m);
  j["precomputed_kernels"] = Json::array();
  for (std::size_t k = 0; k < m.precomputedKernels.size(); ++k)
    j["precomputed_kernels"].push_back({{"kernel", m.precomputedKernels[k].kernel},
                                        {"train", WriteArray(dir, fmt::format("precomputed{}_train.npy", k), m.precomputedKernels[k].train)}});
  if (!m.trainingImageHashes.empty()) j["training"]["image_xxh3"] = m.trainingImageHashes;
  j[kCardChecksum] = CardChecksum(j);
  WriteTextFile(dir + "/model.json", j.dump(2) + "\n");
}

namespace {

/// The card's format, a version this build reads, and (from format 2) its own checksum.
void CheckCard(const Reader& rd, const Json& j) {
  if (!j.is_object() || j.value("format", std::string()) != kFormat) rd.Corrupt(fmt::format("not a neuromkl model card (\"format\" is not \"{}\")", kFormat));
  const int version = j.at("format_version").get<int>();
  if (version > kFormatVersion) rd.Corrupt(fmt::format("format_version {} is newer than this neuromkl reads ({})", version, kFormatVersion));
  // Cards of format 1 carry no checksum of their own (their arrays do).
  if (version >= 2 && (!j.contains(kCardChecksum) || j.at(kCardChecksum) != CardChecksum(j)))
    rd.Corrupt(fmt::format("the card's content does not match its checksum \"{}\": model.json was edited or damaged after neuromkl wrote "
                           "it (a changed bias, weight or parameter would change every prediction); export the model again",
                           kCardChecksum));
}

/// What the model is: its study and learner, task and target, preprocessing, training subjects and expected performance.
void ReadDescription(const Reader& rd, const Json& j, ExportedModel& m) {
  m.study = j.at("study").get<std::string>();
  m.which = j.at("model").get<std::string>();
  const Json& learner = j.at("learner");
  m.learner = learner.at("label").get<std::string>();
  m.learnerName = learner.at("name").get<std::string>();
  m.params = learner.at("parameters").get<std::map<std::string, double>>();
  m.fitStatus = learner.value("fit_status", std::string());
  m.task = j.at("task").get<std::string>();
  if (m.task != "classification" && m.task != "regression" && m.task != "multiclass") rd.Corrupt("unknown task \"" + m.task + "\"");
  m.targetColumn = j.at("target").at("column").get<std::string>();
  if (m.task == "classification") {
    m.positiveClass = j.at("target").at("classes").at("positive").get<std::string>();
    m.negativeClass = j.at("target").at("classes").at("negative").get<std::string>();
  }
  if (m.task == "multiclass") m.classNames = j.at("target").at("classes").get<std::vector<std::string>>();
  m.idColumn = j.at("id_column").get<std::string>();
  m.version = j.value("neuromkl_version", std::string());
  m.seed = j.value("seed", std::uint64_t{0});
  m.centre = j.at("preprocessing").at("centre").get<bool>();
  m.normalise = j.at("preprocessing").at("normalise").get<bool>();
  if (j.contains("outer_fold")) {
    m.fold = j.at("outer_fold").at("fold").get<int>();
    m.repeat = j.at("outer_fold").at("repeat").get<int>();
  }
  m.info = j.value("info", std::map<std::string, std::string>{});
  m.trainingIds = j.at("training").at("subjects").get<std::vector<std::string>>();
  m.trainingImageHashes = j.at("training").value("image_xxh3", std::vector<std::string>());
  if (!m.trainingImageHashes.empty() && m.trainingImageHashes.size() != m.trainingIds.size())
    rd.Corrupt(fmt::format("training.image_xxh3 has {} entries for {} training subjects", m.trainingImageHashes.size(), m.trainingIds.size()));
  for (const auto& [k, v] : j.at("expected_performance").at("pooled").items())
    if (v.is_number()) m.expected[k] = v.get<double>();
}

/// The decision function's biases (one per class) and kernel weights (kernels x classes), each kernel's name, source,
/// kind and zero-norm floor; the calibration and the bias correction.
void ReadWeights(const Reader& rd, const Json& j, ExportedModel& m) {
  const std::vector<double> bias = j.at("bias").get<std::vector<double>>();
  const auto C = static_cast<Eigen::Index>(bias.size());
  if (C < 1 || (m.task == "multiclass" ? C != static_cast<Eigen::Index>(m.classNames.size()) : C != 1))
    rd.Corrupt(fmt::format("\"bias\" has {} values; expected {}", C, m.task == "multiclass" ? m.classNames.size() : 1));
  m.bias = Eigen::Map<const Eigen::VectorXd>(bias.data(), C);
  const Json& kernels = j.at("kernels");
  const auto K = static_cast<Eigen::Index>(kernels.size());
  if (K == 0) rd.Corrupt("\"kernels\" is empty");
  m.beta.resize(K, C);
  m.floors.resize(K);
  for (Eigen::Index k = 0; k < K; ++k) {
    const Json& e = kernels.at(static_cast<std::size_t>(k));
    m.kernelNames.push_back(e.at("name").get<std::string>());
    m.kernelSources.push_back(e.at("source").get<std::string>());
    m.kernelKinds.push_back(e.at("kind").get<std::string>());
    const auto b = e.at("beta").get<std::vector<double>>();
    if (static_cast<Eigen::Index>(b.size()) != C) rd.Corrupt(fmt::format("kernels[{}].beta has {} values, expected {}", k, b.size(), C));
    for (Eigen::Index c = 0; c < C; ++c) m.beta(k, c) = b[static_cast<std::size_t>(c)];
    m.floors[k] = e.at("zero_norm_floor").get<double>();
  }
  if (!j.at("calibration").is_null()) m.calibration = std::make_pair(j.at("calibration").at("A").get<double>(), j.at("calibration").at("B").get<double>());
  if (!j.at("bias_correction").is_null())
    m.biasCorrection = std::make_pair(j.at("bias_correction").at("slope").get<double>(), j.at("bias_correction").at("intercept").get<double>());
  if (m.biasCorrection && !(std::abs(m.biasCorrection->first) > 0)) rd.Corrupt("bias_correction.slope must be non-zero");
  if (j.contains("target_confounds")) {
    const Json& tc = j.at("target_confounds");
    ModelTargetConfounds t;
    t.numeric = tc.at("numeric").get<std::vector<std::string>>();
    for (const auto& c : tc.at("categorical")) t.categorical.emplace_back(c.at("column").get<std::string>(), c.at("levels").get<std::vector<std::string>>());
    std::size_t p = 1 + t.numeric.size();
    for (const auto& [col, levels] : t.categorical) {
      if (levels.size() < 2) rd.Corrupt(fmt::format("target_confounds: categorical column \"{}\" has {} levels (at least 2 expected)", col, levels.size()));
      p += levels.size() - 1;
    }
    const auto b = tc.at("coefficients").get<std::vector<double>>();
    if (b.size() != p) rd.Corrupt(fmt::format("target_confounds.coefficients has {} values for {} design columns", b.size(), p));
    t.coefficients = Eigen::Map<const Eigen::VectorXd>(b.data(), static_cast<Eigen::Index>(p));
    if (tc.contains("impute_fill")) {
      const auto fill = tc.at("impute_fill").get<std::vector<double>>();
      if (fill.size() != p) rd.Corrupt(fmt::format("target_confounds.impute_fill has {} values for {} design columns", fill.size(), p));
      t.fill = Eigen::Map<const Eigen::RowVectorXd>(fill.data(), static_cast<Eigen::Index>(p));
    }
    m.targetConfounds = std::move(t);
  }
}

/// The training subjects' coefficients (one column per class) and, with covariates, their design and fit rows.
void ReadTrainingArrays(const Reader& rd, const Json& j, ExportedModel& m) {
  const auto l = static_cast<Eigen::Index>(m.trainingIds.size());
  const Json& arrays = j.at("arrays");
  m.coef = rd.Array(arrays.at("coef"), l, m.bias.size(), "coef");
  if (!j.contains("covariates")) return;
  const Json& cov = j.at("covariates");
  m.covariateNumeric = cov.at("numeric").get<std::vector<std::string>>();
  for (const auto& c : cov.at("categorical")) m.covariateCategorical.emplace_back(c.at("column").get<std::string>(), c.at("levels").get<std::vector<std::string>>());
  m.covariateFitOn = cov.value("fit_on", std::string("all"));
  Eigen::Index p = 1 + static_cast<Eigen::Index>(m.covariateNumeric.size());
  for (const auto& [col, levels] : m.covariateCategorical) p += static_cast<Eigen::Index>(levels.size()) - 1;
  const Eigen::MatrixXd a = rd.Array(arrays.at("covariates"), l, p + 1, "covariates");
  m.design = a.rightCols(p);
  if (cov.contains("impute")) {
    const auto fill = cov.at("impute").at("fill").get<std::vector<double>>();
    if (static_cast<Eigen::Index>(fill.size()) != p)
      rd.Corrupt(fmt::format("covariates.impute.fill has {} values for {} design columns", fill.size(), p));
    m.covariateFill = Eigen::Map<const Eigen::RowVectorXd>(fill.data(), p);
  }
  for (Eigen::Index i = 0; i < l; ++i) m.fitRows.push_back(a(i, 0) != 0.0 ? 1 : 0);
}

/// The primal arrays of an image or connectivity source: every row of `at` names an index below `bound` (a voxel of the
/// grid, a connection of the nodes), every weight row a kernel (of the `K`) and a row of `at` that exist.
void CheckPrimalRows(const Reader& rd, const std::string& source, const Eigen::MatrixXd& at, double bound, const char* noun, const char* outside,
                     const Eigen::MatrixXd& weights, Eigen::Index K) {
  for (Eigen::Index u = 0; u < at.rows(); ++u)
    if (!(at(u, 0) >= 0 && at(u, 0) < bound)) rd.Corrupt(fmt::format("source {}: {} row {} {}", source, noun, u, outside));
  for (Eigen::Index e = 0; e < weights.rows(); ++e)
    if (!(weights(e, 0) >= 0 && weights(e, 0) < static_cast<double>(K) && weights(e, 1) >= 0 && weights(e, 1) < static_cast<double>(at.rows())))
      rd.Corrupt(fmt::format("source {}: weight row {} names a kernel or {} that does not exist", source, e, noun));
}

/// A harmonised source's ComBat estimates over its U voxels, their shapes checked against the card.
ModelHarmonisation ReadHarmonisation(const Reader& rd, const Json& j, Eigen::Index U, const std::string& source) {
  ModelHarmonisation h;
  h.siteColumn = j.at("site_column").get<std::string>();
  h.sites = j.at("sites").get<std::vector<std::string>>();
  h.siteCounts = j.at("site_counts").get<std::vector<std::int64_t>>();
  h.empiricalBayes = j.at("empirical_bayes").get<bool>();
  h.fitOn = j.value("fit_on", std::string("all"));
  const Json& cov = j.at("covariates");
  h.covariateNumeric = cov.at("numeric").get<std::vector<std::string>>();
  for (const auto& c : cov.at("categorical")) h.covariateCategorical.emplace_back(c.at("column").get<std::string>(), c.at("levels").get<std::vector<std::string>>());
  auto q = static_cast<Eigen::Index>(h.covariateNumeric.size());
  for (const auto& [col, levels] : h.covariateCategorical) q += static_cast<Eigen::Index>(levels.size()) - 1;
  if (cov.contains("impute_fill")) {
    const auto fill = cov.at("impute_fill").get<std::vector<double>>();
    if (static_cast<Eigen::Index>(fill.size()) != q) rd.Corrupt(fmt::format("source {}: harmonisation impute_fill has {} values for {} columns", source, fill.size(), q));
    h.covariateFill = Eigen::Map<const Eigen::RowVectorXd>(fill.data(), q);
  }
  const auto B = static_cast<Eigen::Index>(h.sites.size());
  if (B == 0 || static_cast<Eigen::Index>(h.siteCounts.size()) != B) rd.Corrupt(fmt::format("source {}: harmonisation sites and site_counts disagree", source));
  h.voxels = rd.Array(j.at("voxels"), U, 3 + q, "source " + source + " ComBat voxels");
  h.gammaStar = rd.Array(j.at("gamma_star"), B, U, "source " + source + " ComBat gamma*");
  h.delta2Star = rd.Array(j.at("delta2_star"), B, U, "source " + source + " ComBat delta*^2");
  for (Eigen::Index u = 0; u < U; ++u)
    if (h.voxels(u, 2) == 0 && !(h.voxels(u, 1) > 0)) rd.Corrupt(fmt::format("source {}: ComBat voxel row {} has sigma {}, expected > 0", source, u, h.voxels(u, 1)));
  return h;
}

/// An image source: its grid and rules, and its voxels and weights, every row checked to name a voxel of the grid and
/// a kernel and voxel that exist. `p`: covariate columns; `C`: classes; `K`: kernels.
ModelImageSource ReadImageSource(const Reader& rd, const Json& s, Eigen::Index p, Eigen::Index C, Eigen::Index K) {
  ModelImageSource src;
  src.name = s.at("name").get<std::string>();
  src.imageColumn = s.at("image_column").get<std::string>();
  const Json& g = s.at("grid");
  src.grid.dims = g.at("dims").get<std::array<std::int64_t, 3>>();
  src.grid.spacing = g.at("spacing").get<std::array<double, 3>>();
  src.grid.origin = g.at("origin_lps").get<std::array<double, 3>>();
  src.grid.direction = g.at("direction").get<std::array<double, 9>>();
  src.space = s.value("space", std::string());
  src.nanPolicy = s.at("nan_policy").get<std::string>();
  src.intensityScaling = s.at("intensity_scaling").get<std::string>();
  src.voxels = rd.Array(s.at("voxels"), -1, 2 + p, "source " + src.name + " voxels");
  src.weights = rd.Array(s.at("weights"), -1, 3 + C, "source " + src.name + " weights");
  const Eigen::MatrixXd scale =
      s.at("scale_voxels").is_null() ? Eigen::MatrixXd(0, 1) : rd.Array(s.at("scale_voxels"), -1, 1, "source " + src.name + " scale voxels");
  if (src.intensityScaling != "none" && scale.rows() == 0) rd.Corrupt("source " + src.name + ": intensity scaling without its voxels");
  for (Eigen::Index v = 0; v < scale.rows(); ++v) src.scaleVoxels.push_back(static_cast<std::int64_t>(scale(v, 0)));
  if (s.contains("harmonisation")) src.harmonisation = ReadHarmonisation(rd, s.at("harmonisation"), src.voxels.rows(), src.name);
  if (s.contains("imputed")) src.imputed = rd.Array(s.at("imputed"), src.voxels.rows(), 1, "source " + src.name + " imputed voxels").col(0);
  if (!src.imputed.allFinite()) rd.Corrupt("source " + src.name + ": its imputed voxels are not all finite");
  CheckPrimalRows(rd, src.name, src.voxels, static_cast<double>(src.grid.VoxelCount()), "voxel", "lies outside the grid", src.weights, K);
  return src;
}

/// A connectivity source: its nodes, its connections' arrays and primal weights, every row checked to name a connection,
/// kernel and row that exist.
ModelConnectivitySource ReadConnectivitySource(const Reader& rd, const Json& s, Eigen::Index p, Eigen::Index C, Eigen::Index K) {
  ModelConnectivitySource src;
  src.name = s.at("name").get<std::string>();
  src.column = s.at("column").get<std::string>();
  src.nodes = s.at("nodes").get<std::vector<std::string>>();
  src.edges = rd.Array(s.at("edges"), -1, 2 + p, "source " + src.name + " edges");
  src.weights = rd.Array(s.at("weights"), -1, 3 + C, "source " + src.name + " weights");
  if (s.contains("imputed")) src.imputed = rd.Array(s.at("imputed"), src.edges.rows(), 1, "source " + src.name + " imputed edges").col(0);
  if (!src.imputed.allFinite()) rd.Corrupt("source " + src.name + ": its imputed connections are not all finite");
  const double N = static_cast<double>(src.nodes.size());
  CheckPrimalRows(rd, src.name, src.edges, N * (N - 1) / 2, "edge", "names no connection", src.weights, K);
  return src;
}

/// A tabular source: the training subjects' rows (`l`), the column statistics and its kernels (of the `K`).
ModelTabularSource ReadTabularSource(const Reader& rd, const Json& s, Eigen::Index l, Eigen::Index K) {
  ModelTabularSource src;
  src.name = s.at("name").get<std::string>();
  src.idColumn = s.at("id_column").get<std::string>();
  src.standardise = s.at("standardise").get<bool>();
  src.columns = s.at("columns").get<std::vector<std::string>>();
  const auto cols = static_cast<Eigen::Index>(src.columns.size());
  src.rows = rd.Array(s.at("rows"), l, cols, "source " + src.name + " rows");
  const Eigen::MatrixXd stats = rd.Array(s.at("column_stats"), 2, cols, "source " + src.name + " column statistics");
  src.mean = stats.row(0).transpose();
  src.sd = stats.row(1).transpose();
  // (A model without these keys does not impute: a new subject's missing value is an error.)
  if (s.value("impute", std::string("none")) == "median") src.fill = rd.Array(s.at("fill"), 1, cols, "source " + src.name + " fill").row(0).transpose();
  if (s.contains("harmonisation")) src.harmonisation = ReadHarmonisation(rd, s.at("harmonisation"), cols, src.name);
  if (s.contains("training_has")) {
    const auto has = s.at("training_has").get<std::vector<int>>();
    if (static_cast<Eigen::Index>(has.size()) != l || std::none_of(has.begin(), has.end(), [](int h) { return h == 1; }) ||
        std::any_of(has.begin(), has.end(), [](int h) { return h != 0 && h != 1; }))
      rd.Corrupt(fmt::format("source {}: training_has must hold 0 or 1 for each of the {} training subjects, some 1", src.name, l));
    src.trainingHas.assign(has.begin(), has.end());
  }
  for (const auto& k : s.at("kernels")) {
    ModelTabularKernel tk;
    tk.kernel = k.at("kernel").get<std::size_t>();
    if (tk.kernel >= static_cast<std::size_t>(K)) rd.Corrupt(fmt::format("source {}: kernel {} does not exist", src.name, tk.kernel));
    tk.columns = k.at("columns").get<std::vector<std::string>>();
    tk.function = k.at("function").get<std::string>();
    if (tk.function != "linear" && tk.function != "polynomial" && tk.function != "gaussian")
      rd.Corrupt(fmt::format("source {}: kernel {} has function \"{}\", expected linear, polynomial or gaussian", src.name, tk.kernel, tk.function));
    tk.value = k.at("value").get<double>();
    tk.offset = k.at("offset").get<double>();
    src.kernels.push_back(std::move(tk));
  }
  return src;
}

/// Every source of the kernels, by kind.
void ReadSources(const Reader& rd, const Json& j, ExportedModel& m) {
  const Eigen::Index p = m.design.cols(), C = m.bias.size(), K = m.beta.rows();
  const auto l = static_cast<Eigen::Index>(m.trainingIds.size());
  for (const auto& s : j.at("sources")) {
    const std::string kind = s.at("kind").get<std::string>();
    if (kind == "images") m.imageSources.push_back(ReadImageSource(rd, s, p, C, K));
    else if (kind == "tabular") m.tabularSources.push_back(ReadTabularSource(rd, s, l, K));
    else if (kind == "connectivity") m.connectivitySources.push_back(ReadConnectivitySource(rd, s, p, C, K));
    else if (kind == "precomputed") m.precomputedSources.push_back(s.at("name").get<std::string>());
    else rd.Corrupt("unknown source kind \"" + kind + "\"");
  }
  if (j.contains("precomputed_kernels"))
    for (const auto& k : j.at("precomputed_kernels")) {
      ModelPrecomputedKernel pk;
      pk.kernel = k.at("kernel").get<std::size_t>();
      if (pk.kernel >= static_cast<std::size_t>(K)) rd.Corrupt(fmt::format("precomputed kernel {} does not exist", pk.kernel));
      pk.train = rd.Array(k.at("train"), l, l, "precomputed kernel " + m.kernelNames[pk.kernel] + " training block");
      m.precomputedKernels.push_back(std::move(pk));
    }
}

}  // namespace

ExportedModel ReadModel(const std::string& dir) {
  Reader rd(dir);
  const auto text = TryReadText(rd.Card());
  if (!text) throw InputError("model:Missing", rd.Card(), "no model.json here: give a model folder written by `neuromkl run` (results/<study>/model/<Learner>)");
  Json j;
  try {
    j = Json::parse(*text);
  } catch (const std::exception& e) {
    rd.Corrupt(std::string("not valid JSON: ") + e.what());
  }
  ExportedModel m;
  try {
    CheckCard(rd, j);
    ReadDescription(rd, j, m);
    ReadWeights(rd, j, m);
    ReadTrainingArrays(rd, j, m);
    ReadSources(rd, j, m);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // a missing key or a value of the wrong type
    rd.Corrupt(std::string("missing or malformed entry: ") + e.what());
  }
  return m;
}

void WriteModelIndex(const std::string& modelDir, const std::vector<std::pair<std::string, std::string>>& learnerFolders, const std::string& study) {
  Json j = {{"format", "neuromkl-model-index"}, {"format_version", kFormatVersion}, {"study", study}, {"learners", Json::array()},
            {"note", "one folder per learner: the final model (refitted on every labelled subject) and folds/<k>/ the outer folds' models"}};
  for (const auto& [label, folder] : learnerFolders) j["learners"].push_back({{"label", label}, {"folder", folder}});
  WriteTextFile(modelDir + "/model.json", j.dump(2) + "\n");
}

std::vector<std::string> ModelFolders(const std::string& dir) {
  const std::string card = dir + "/model.json";
  const auto text = TryReadText(card);
  if (!text) throw InputError("model:Missing", card, "no model.json in this folder: give a model folder written by `neuromkl run` (results/<study>/model)");
  Json j;
  try {
    j = Json::parse(*text);
  } catch (const std::exception& e) {
    throw InputError("model:Corrupt", card, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw InputError("model:Corrupt", card, "not a neuromkl model card (expected a JSON object)");
  if (j.value("format", std::string()) == "neuromkl-model-index") {
    std::vector<std::string> out;
    try {
      for (const auto& e : j.at("learners")) out.push_back(dir + "/" + e.at("folder").get<std::string>());
    } catch (const std::exception& e) {
      throw InputError("model:Corrupt", card, std::string("malformed learner list: ") + e.what());
    }
    if (out.empty()) throw InputError("model:Corrupt", card, "the model index lists no learner");
    return out;
  }
  return {dir};
}

void WriteTsv(const std::string& path, const PredictionRows& rows) {
  std::ostringstream tsv;
  for (std::size_t c = 0; c < rows.header.size(); ++c) tsv << (c ? "\t" : "") << rows.header[c];
  tsv << "\n";
  for (const auto& r : rows.rows) {
    for (std::size_t c = 0; c < r.size(); ++c) tsv << (c ? "\t" : "") << r[c];
    tsv << "\n";
  }
  WriteTextFile(path, tsv.str());
}

void WritePredictionOutputs(const std::string& dir, const PredictionRows& rows, const std::map<std::string, std::string>& summaryText,
                            const std::map<std::string, std::map<std::string, double>>& performance, const std::vector<std::string>& warnings) {
  WriteTsv(dir + "/predictions.tsv", rows);
  Json j = Json::object();
  for (const auto& [k, v] : summaryText) j[k] = v;
  j["performance"] = Json::object();
  for (const auto& [learner, metrics] : performance) j["performance"][learner] = NumMap(metrics);
  j["warnings"] = warnings;
  WriteTextFile(dir + "/summary.json", j.dump(2) + "\n");
}

}  // namespace neuromkl::exporting
