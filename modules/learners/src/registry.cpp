// The learner catalogue: names, tasks and parameter tables (bounds and defaults in one place,
// used by ResolveParams, the config loader, `neuromkl validate` and the schema test).
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/learners/learner.hpp"
#include "single_kernel.hpp"

namespace neuromkl::learners {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

ParamSpec C() { return {"c", 1.0, 0, kInf, true, true, false, "SVM box constraint C (> 0); larger = less regularisation"}; }
ParamSpec Lambda() {
  return {"lambda", 1.0, 0, kInf, true, true, false,
          "ridge lambda (> 0), alpha = (K + lambda I)^-1 (y - mean y); larger = more regularisation. PRoNTo calls this \"C\""};
}
ParamSpec CElm() {
  return {"c", 1.0, 0, kInf, true, true, false, "ELM regularisation C (> 0): alpha = (K + I/C)^-1 T; larger = less regularisation"};
}
ParamSpec Bias(double def) {
  return {"bias", def, 0, 1, false, false, true, "1 = fit an offset (targets centred; needed with centred kernels); 0 = the paper's form without one"};
}
ParamSpec Mu() { return {"mu", 0.5, 0, 1, false, false, false, "elastic-net mixing mu in [0, 1]: 1 = sparse l1-MKL, -> 0 = uniform sum"}; }
// MKL weights amplify inner-solver error: on 200 subjects x 116 kernels an SMO tolerance of 1e-5
// moved ENMKL's beta by 0.05 from an accurate solution, 1e-8 by < 1e-3 (see docs/learners.md).
ParamSpec SvmTol(double def) { return {"svm_tolerance", def, 0, 1, true, true, false, "SMO stopping tolerance on the maximal KKT violation"}; }
}  // namespace

namespace {
std::vector<LearnerInfo> MakeCatalog() {
  std::vector<LearnerInfo> catalog = {
      {"svm", "C-SVC (SMO with LIBSVM's rules, Chang & Lin 2011) on the unweighted sum of the kernels", true, false, false,
       {C(), {"tolerance", 1e-3, 0, 1, true, true, false, "SMO stopping tolerance on the maximal KKT violation"},
        {"max_iterations", 1e7, 1, 1e12, false, false, true, "SMO iteration cap"}}, true, false},
      {"krr", "kernel ridge regression (with bias) on the unweighted sum of the kernels; classification on +-1 targets", true, true, false,
       {Lambda()}, true, false},
      {"enmkl_svm", "elastic-net MKL with an SVM (ENMKL, Mourão-Miranda et al., Algorithm 1)", true, false, true,
       {C(), Mu(), {"max_iterations", 500, 1, 1e9, false, false, true, "cap on beta updates"},
        {"tolerance", 1e-6, 0, 1, true, true, false, "stop when max |delta beta| (sum-normalised) is below this"},
        {"objective_tolerance", 1e-6, 0, 1, true, true, false, "... and the relative change of the SVM objective is below this"},
        SvmTol(1e-8)}, true, false},
      {"enmkl_krr", "elastic-net MKL with kernel ridge regression (ENMKL, Mourão-Miranda et al., Algorithm 2)", true, true, true,
       {Lambda(), Mu(), {"max_iterations", 500, 1, 1e9, false, false, true, "cap on beta updates"},
        {"tolerance", 1e-6, 0, 1, true, true, false, "stop when max |delta beta| (sum-normalised) is below this"},
        {"objective_tolerance", 1e-6, 0, 1, true, true, false, "... and the relative change of the KRR objective is below this"}}, true, false},
      {"simplemkl", "SimpleMKL (Rakotomamonjy et al. 2008; l1-MKL, reduced gradient): C-SVC for classification, epsilon-SVR for regression", true, true, true,
       {C(), {"gap_tolerance", 1e-4, 0, 1, true, true, false, "stop when the relative duality gap is below this"},
        {"max_iterations", 250, 1, 1e9, false, false, true, "cap on reduced-gradient steps"},
        {"epsilon", 0.01, 0, kInf, false, true, false, "epsilon-insensitive zone of the SVR (regression only)"},
        {"line_search_tolerance", 0.01, 0, 1, true, true, false, "line-search bracket (parabolic interpolation) relative to the largest step"},
        SvmTol(1e-8)}, true, false},
      {"kelm", "kernel extreme learning machine (Huang et al. 2012), alpha = (K + I/C)^-1 T, on the unweighted sum of the kernels; multiclass by one-hot outputs",
       true, true, false, {CElm(), Bias(1)}, true, false},
      {"mkelm", "multiple kernel ELM (MK-ELM, Liu et al. 2015): sparse (norm 1) or non-sparse lp (norm > 1) kernel weights", true, true, true,
       {CElm(), {"norm", 1, 1, kInf, false, true, false, "kernel-weight norm: 1 = sparse MK-ELM (sum gamma = 1), > 1 = lp MK-ELM (sum gamma^p = 1)"},
        {"tolerance", 1e-4, 0, 1, true, true, false,
         "norm 1: distance of the weights from the optimum (ENMKL's certified Newton step); "
         "norm > 1: stop when max |delta gamma| is below this (the rule of MK-ELM, Liu et al. 2015)"},
        {"max_iterations", 500, 1, 1e9, false, false, true, "cap on kernel-weight updates"}, Bias(1)},
       true, false},
      {"mkl_bp", "MKL with an L1 + Lp kernel-weight constraint (MKL-BP, Qi, Liang & Xu 2018; p = 2 is GMKL), C-SVC", true, false, true,
       {C(), {"p", 2, 1, kInf, true, true, false, "the Lp part of the constraint v sum u + (1 - v) sum u^p <= 1 (p = 2: GMKL)"},
        {"v", 0.5, 0, 1, false, false, false, "the L1 share v of the constraint: 1 = l1-MKL (sparse), 0 = lp-MKL"},
        {"gap_tolerance", 1e-7, 0, 1, true, true, false, "stop when the Frank-Wolfe duality gap relative to the objective is below this (v < 1)"},
        {"max_iterations", 500, 1, 1e9, false, false, true, "cap on kernel-weight steps"}, SvmTol(1e-8)},
       true, false},
      {"bsadmm_kelm", "hinge-loss kernel ELM QP solved by two-operator ADMM (BSADMM-KELM, Su, Xu & Qin 2021), on the unweighted sum of the kernels", true,
       false, false,
       {C(), Bias(0), {"rho", 0.1, 0, kInf, true, true, false, "ADMM penalty of the box constraint (adapted during the solve)"},
        {"sigma", 1e-6, 0, kInf, true, true, false, "proximal term of the v-update (keeps the KKT matrix definite)"},
        {"relaxation", 1.6, 0, 2, true, true, false, "over-relaxation a in (0, 2)"},
        {"eps_abs", 1e-7, 0, 1, true, true, false, "absolute tolerance on the primal and dual residuals"},
        {"eps_rel", 1e-7, 0, 1, true, true, false, "relative tolerance on the primal and dual residuals"},
        {"max_iterations", 20000, 1, 1e9, false, false, true, "ADMM iteration cap"},
        {"polish", 1, 0, 1, false, false, true, "1 = refine the ADMM solution on its active set (exact KKT solve)"}},
       true, false},
      {"dkelm", "semi-supervised deformed-kernel ELM (DKELM, Zhang, Xia & Liu): unlabelled subjects deform the summed kernel through a kNN-graph Laplacian",
       true, true, false,
       {CElm(), Bias(1), {"deformation", 1, 0, kInf, false, true, false, "gamma_I / gamma_A: M = deformation x L; 0 = plain KELM"},
        {"neighbours", 12, 1, 1e6, false, false, true, "k of the symmetric kNN graph over labelled and unlabelled training subjects"},
        {"heat_weights", 0, 0, 1, false, false, true,
         "0 = binary edge weights (the deformed-kernel ELM of Zhang, Xia and Liu); 1 = heat weights exp(-d^2 / 4t), t = mean kNN d^2 / 4"},
        {"landmarks", 0, 0, 1e9, false, false, true, "0 = exact deformed kernel; L > 0 = Nystroem features on L random landmarks (large n)"},
        {"seed", 0, 0, 9007199254740992.0, false, false, true, "seed of the landmark choice"}},
       true, true},
  };
  // Every learner of kernel weights reads its training kernels through the kernel stack alone, so it
  // can fit kernels given as columns (nested CV's folds, prepared in place).
  for (auto& l : catalog) l.kernelsInPlace = l.multipleKernels;
  return catalog;
}
}  // namespace

const std::vector<LearnerInfo>& LearnerCatalog() {
  static const std::vector<LearnerInfo> catalog = MakeCatalog();
  return catalog;
}

std::vector<double> DefaultGrid(std::string_view param) {
  if (param == "c" || param == "lambda") return {1e-3, 1e-2, 1e-1, 1, 10, 100, 1000};
  if (param == "mu") return {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0};
  return {};
}

const LearnerInfo* FindLearner(std::string_view name) {
  for (const auto& l : LearnerCatalog())
    if (l.name == name) return &l;
  return nullptr;
}

std::string CheckParam(const ParamSpec& spec, double value) {
  const bool lowOk = spec.loOpen ? value > spec.lo : value >= spec.lo;
  const bool highOk = spec.hiOpen ? value < spec.hi : value <= spec.hi;
  if (!std::isfinite(value) || !lowOk || !highOk) {
    const std::string range = fmt::format("{}{}, {}{}", spec.loOpen ? "(" : "[", FormatDouble(spec.lo),
                                          std::isinf(spec.hi) ? "inf" : FormatDouble(spec.hi), spec.hiOpen ? ")" : "]");
    return fmt::format("expected a value in {}, found {}", range, FormatDouble(value));
  }
  if (spec.integer && value != std::floor(value)) return fmt::format("expected a whole number, found {}", FormatDouble(value));
  return "";
}

ParamMap ResolveParams(std::string_view learner, const ParamMap& given) {
  const LearnerInfo* info = FindLearner(learner);
  if (!info) {
    std::vector<std::string> names;
    for (const auto& l : LearnerCatalog()) names.push_back(l.name);
    throw InvalidParameter("learners:UnknownLearner", "learner", fmt::format("unknown learner \"{}\"; expected one of {}{}", learner, Join(names, ", "), DidYouMean(learner, names)));
  }
  std::vector<std::string> known;
  for (const auto& p : info->params) known.push_back(p.name);
  for (const auto& [key, value] : given) {
    const ParamSpec* spec = nullptr;
    for (const auto& p : info->params)
      if (p.name == key) spec = &p;
    if (!spec)
      throw InvalidParameter("learners:UnknownParam", std::string(learner) + "." + key,
                             fmt::format("unknown parameter \"{}\" for learner {}; known: {}{}", key, learner, Join(known, ", "), DidYouMean(key, known)));
    if (auto msg = CheckParam(*spec, value); !msg.empty()) throw InvalidParameter("learners:ParamRange", std::string(learner) + "." + key, msg);
  }
  ParamMap resolved;
  for (const auto& p : info->params) resolved[p.name] = given.count(p.name) ? given.at(p.name) : p.defaultValue;
  return resolved;
}

std::unique_ptr<Learner> MakeLearner(std::string_view learner, const ParamMap& params, MulticlassWeights weights) {
  const ParamMap p = ResolveParams(learner, params);
  auto make = [&]() -> std::unique_ptr<Learner> {
    if (learner == "svm") return MakeSvm(p);
    if (learner == "krr") return MakeKrr(p);
    if (learner == "enmkl_svm") return MakeEnmklSvm(p);
    if (learner == "enmkl_krr") return MakeEnmklKrr(p);
    if (learner == "kelm") return MakeKelm(p);
    if (learner == "mkelm") return MakeMkelm(p);
    if (learner == "mkl_bp") return MakeMklBp(p);
    if (learner == "bsadmm_kelm") return MakeBsadmmKelm(p);
    if (learner == "dkelm") return MakeDkelm(p);
    return MakeSimpleMkl(p);  // the catalogue has no other name
  };
  return WithMulticlass(make(), learner, weights);
}

}  // namespace neuromkl::learners
