#include "neuromkl/export/citation.hpp"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "neuromkl/core/strings.hpp"

namespace neuromkl::exporting {

namespace {

/// The references neuromkl cites, by key.
const std::map<std::string, std::string>& References() {
  static const std::map<std::string, std::string> refs = {
      {"enmkl",
       "Mourão-Miranda J., Hussain Z., Tsirlis K., Phillips C., Shawe-Taylor J. Elastic-net multiple kernel learning: combining multiple data "
       "sources for prediction."},
      {"mkelm", "Liu X., Wang L., Huang G.-B., Zhang J., Yin J. (2015). Multiple kernel extreme learning machine. Neurocomputing 149, 253-264."},
      {"dkelm", "Zhang C., Xia S., Liu B. Deformed kernel based extreme learning machine."},
      {"mkl_bp",
       "Qi J., Liang X., Xu R. (2018). A multiple kernel learning model based on p-norm. Computational Intelligence and Neuroscience "
       "2018, 1018789. doi:10.1155/2018/1018789."},
      {"bsadmm",
       "Su Y., Xu J., Qin H. (2021). Kernel extreme learning machine based on alternating direction multiplier method of binary splitting "
       "operator. Journal of Electronics & Information Technology 43(9), 2586-2593. doi:10.11999/JEIT200884."},
      {"kelm",
       "Huang G.-B., Zhou H., Ding X., Zhang R. (2012). Extreme learning machine for regression and multiclass classification. IEEE "
       "Transactions on Systems, Man, and Cybernetics, Part B 42(2), 513-529."},
      {"simplemkl", "Rakotomamonjy A., Bach F. R., Canu S., Grandvalet Y. (2008). SimpleMKL. Journal of Machine Learning Research 9, 2491-2521."},
      {"platt",
       "Platt J. C. (1999). Probabilistic outputs for support vector machines and comparisons to regularized likelihood methods. In Advances in "
       "Large Margin Classifiers, MIT Press, 61-74."},
      {"lin2007",
       "Lin H.-T., Lin C.-J., Weng R. C. (2007). A note on Platt's probabilistic outputs for support vector machines. Machine Learning 68(3), "
       "267-276."},
      {"beheshti2019",
       "Beheshti I., Nugent S., Potvin O., Duchesne S. (2019). Bias-adjustment in neuroimaging-based brain age frameworks: a robust scheme. "
       "NeuroImage: Clinical 24, 102063."},
      {"delange2020", "de Lange A.-M. G., Cole J. H. (2020). Commentary: Correction procedures in brain-age prediction. NeuroImage: Clinical 26, 102229."},
      {"libsvm",
       "Chang C.-C., Lin C.-J. (2011). LIBSVM: a library for support vector machines. ACM Transactions on Intelligent Systems and Technology "
       "2(3), 27:1-27:27."},
      {"wss",
       "Fan R.-E., Chen P.-H., Lin C.-J. (2005). Working set selection using second order information for training support vector machines. "
       "Journal of Machine Learning Research 6, 1889-1918."},
      {"pronto",
       "Schrouff J., Rosa M. J., Rondina J. M., Marquand A. F., Chu C., Ashburner J., Phillips C., Richiardi J., Mourão-Miranda J. (2013). "
       "PRoNTo: Pattern Recognition for Neuroimaging Toolbox. Neuroinformatics 11(3), 319-337. doi:10.1007/s12021-013-9178-1."},
      {"westfall1993", "Westfall P. H., Young S. S. (1993). Resampling-Based Multiple Testing. Wiley, New York."},
      {"nichols2002",
       "Nichols T. E., Holmes A. P. (2002). Nonparametric permutation tests for functional neuroimaging: a primer with examples. Human Brain "
       "Mapping 15(1), 1-25."},
      {"bh1995",
       "Benjamini Y., Hochberg Y. (1995). Controlling the false discovery rate: a practical and powerful approach to multiple testing. Journal "
       "of the Royal Statistical Society B 57(1), 289-300."},
      {"johnson2007",
       "Johnson W. E., Li C., Rabinovic A. (2007). Adjusting batch effects in microarray expression data using empirical Bayes methods. "
       "Biostatistics 8(1), 118-127."},
      {"fortin2017",
       "Fortin J.-P., Parker D., Tunç B., Watanabe T., Elliott M. A., Ruparel K., Roalf D. R., Satterthwaite T. D., Gur R. C., Gur R. E., "
       "Schultz R. T., Verma R., Shinohara R. T. (2017). Harmonization of multi-site diffusion tensor imaging data. NeuroImage 161, 149-170."},
      {"fortin2018",
       "Fortin J.-P., Cullen N., Sheline Y. I., Taylor W. D., Aselcioglu I., Cook P. A., Adams P., Cooper C., Fava M., McGrath P. J., "
       "McInnis M., Phillips M. L., Trivedi M. H., Weissman M. M., Shinohara R. T. (2018). Harmonization of cortical thickness measurements "
       "across scanners and sites. NeuroImage 167, 104-120."},
      {"aal",
       "Tzourio-Mazoyer N., Landeau B., Papathanassiou D., Crivello F., Etard O., Delcroix N., Mazoyer B., Joliot M. (2002). Automated "
       "anatomical labeling of activations in SPM using a macroscopic anatomical parcellation of the MNI MRI single-subject brain. "
       "NeuroImage 15(1), 273-289."},
  };
  return refs;
}

/// In-text citations, by key of References().
const std::map<std::string, std::string>& ShortCites() {
  static const std::map<std::string, std::string> cites = {
      {"enmkl", "Mourão-Miranda et al."}, {"mkelm", "Liu et al., 2015"}, {"dkelm", "Zhang, Xia & Liu"}, {"mkl_bp", "Qi, Liang & Xu, 2018"},
      {"bsadmm", "Su, Xu & Qin, 2021"}, {"kelm", "Huang et al., 2012"}, {"simplemkl", "Rakotomamonjy et al., 2008"},
      {"libsvm", "Chang & Lin, 2011"}, {"wss", "Fan, Chen & Lin, 2005"}, {"pronto", "Schrouff et al., 2013"},
      {"aal", "Tzourio-Mazoyer et al., 2002"}, {"platt", "Platt, 1999"}, {"lin2007", "Lin, Lin & Weng, 2007"},
      {"beheshti2019", "Beheshti et al., 2019"}, {"delange2020", "de Lange & Cole, 2020"}, {"westfall1993", "Westfall & Young, 1993"},
      {"nichols2002", "Nichols & Holmes, 2002"}, {"bh1995", "Benjamini & Hochberg, 1995"}, {"johnson2007", "Johnson, Li & Rabinovic, 2007"},
      {"fortin2017", "Fortin et al., 2017"}, {"fortin2018", "Fortin et al., 2018"}};
  return cites;
}

/// The references of a learner, in citation order (keys of References()).
std::vector<std::string> LearnerReferences(const std::string& name) {
  if (name == "svm") return {"libsvm", "wss"};
  if (name == "krr") return {};
  if (name == "enmkl_svm") return {"enmkl", "libsvm", "wss"};
  if (name == "enmkl_krr") return {"enmkl"};
  if (name == "simplemkl") return {"simplemkl", "libsvm", "wss"};
  if (name == "kelm") return {"kelm"};
  if (name == "mkelm") return {"mkelm", "kelm"};
  if (name == "mkl_bp") return {"mkl_bp", "libsvm", "wss"};
  if (name == "bsadmm_kelm") return {"bsadmm", "kelm"};
  if (name == "dkelm") return {"dkelm", "kelm"};
  return {};
}

/// What a learner is, in words.
std::string LearnerWords(const std::string& name) {
  static const std::map<std::string, std::string> words = {
      {"svm", "a support vector machine on the sum of the region kernels"},
      {"krr", "kernel ridge regression on the sum of the region kernels"},
      {"enmkl_svm", "elastic-net multiple kernel learning with an SVM (ENMKL-SVM)"},
      {"enmkl_krr", "elastic-net multiple kernel learning with kernel ridge regression (ENMKL-KRR)"},
      {"simplemkl", "SimpleMKL (l1-norm multiple kernel learning)"},
      {"kelm", "a kernel extreme learning machine on the summed kernel"},
      {"mkelm", "multiple kernel extreme learning machine (MK-ELM)"},
      {"mkl_bp", "L1 + Lp-norm multiple kernel learning (MKL-BP)"},
      {"bsadmm_kelm", "a kernel extreme learning machine trained by ADMM with binary splitting operators (BSADMM-KELM)"},
      {"dkelm", "a semi-supervised deformed-kernel extreme learning machine (DKELM)"},
  };
  const auto it = words.find(name);
  return it == words.end() ? name : it->second;
}

/// "c in {0.001, 0.01, ...}; mu = 0.5": searched parameters with their grid values, fixed ones with their value.
std::string GridText(const LearnerRecord& lr) {
  const auto& grid = lr.outcome.grid;
  if (grid.empty()) return "";
  std::vector<std::string> parts;
  for (const auto& [key, value] : grid.front()) {
    const bool searched = std::find(lr.searched.begin(), lr.searched.end(), key) != lr.searched.end();
    if (!searched) {
      parts.push_back(key + " = " + FormatDouble(value));
      continue;
    }
    std::set<double> values;
    for (const auto& point : grid)
      if (point.count(key)) values.insert(point.at(key));
    std::vector<std::string> texts;
    for (double v : values) texts.push_back(FormatDouble(v));
    parts.push_back(key + " in {" + Join(texts, ", ") + "}");
  }
  return Join(parts, "; ");
}

std::string SubjectsText(const RunRecord& r) {
  const std::size_t n = r.labelledSubjects.size();
  if (r.task == "classification") {
    std::map<std::string, int> perClass;
    for (std::size_t i = 0; i < r.targets.size(); ++i) ++perClass[r.targets[i] > 0 ? r.positiveClass : r.negativeClass];
    std::vector<std::string> parts;
    for (const std::string& c : {r.positiveClass, r.negativeClass})
      parts.push_back(fmt::format("{} {}", perClass.count(c) ? perClass.at(c) : 0, c));
    return fmt::format("n = {} subjects ({}; classification of column \"{}\", positive class {})", n, Join(parts, ", "), r.targetColumn,
                       r.positiveClass);
  }
  if (r.task == "multiclass") {
    std::vector<int> perClass(r.classNames.size(), 0);
    for (double t : r.targets) ++perClass.at(static_cast<std::size_t>(t));
    std::vector<std::string> parts;
    for (std::size_t c = 0; c < r.classNames.size(); ++c) parts.push_back(fmt::format("{} {}", perClass[c], r.classNames[c]));
    return fmt::format("n = {} subjects ({}; {}-class classification of column \"{}\")", n, Join(parts, ", "), r.classNames.size(), r.targetColumn);
  }
  double lo = 0, hi = 0, mean = 0;
  if (!r.targets.empty()) {
    lo = *std::min_element(r.targets.begin(), r.targets.end());
    hi = *std::max_element(r.targets.begin(), r.targets.end());
    for (double t : r.targets) mean += t;
    mean /= static_cast<double>(r.targets.size());
  }
  return fmt::format("n = {} subjects (regression of column \"{}\", range {} to {}, mean {:.4g})", n, r.targetColumn, FormatDouble(lo),
                     FormatDouble(hi), mean);
}

/// The software: neuromkl, the libraries it was built with, and PRoNTo, whose analysis it follows.
std::string SoftwareText(const RunRecord& r) {
  std::vector<std::string> libs;
  for (const auto& [lib, version] : r.versions)
    if (lib != "neuromkl") libs.push_back(lib + " " + version);
  return fmt::format("The analysis was run with neuromkl {} (built with {}), a C++ implementation of region-wise multiple kernel learning "
                     "following PRoNTo [{}]. ",
                     r.version, Join(libs, ", "), "Schrouff et al., 2013");
}

/// The subjects: who was studied, how many of the table were not used, how many served as unlabelled data.
std::string SubjectsParagraph(const RunRecord& r) {
  std::string md = "The study included " + SubjectsText(r) + ".";
  std::size_t unlabelled = 0, notUsed = 0;
  for (const auto& s : r.subjectTable) {
    if (s.used == "unlabelled") ++unlabelled;
    if (s.used == "no") ++notUsed;
  }
  if (notUsed > 0) md += fmt::format(" {} further subjects of the table were not used (see subjects.tsv).", notUsed);
  if (unlabelled > 0) md += fmt::format(" {} subjects without a target served as unlabelled data for the semi-supervised learners.", unlabelled);
  return md + "\n\n";
}

/// The kernels (atlas regions, sources or precomputed kernels), the covariates and the preprocessing within the folds.
std::string KernelsParagraph(const RunRecord& r, std::set<std::string>& cited) {
  std::string md;
  if (r.kernelSource == "images") {
    long voxels = 0;
    for (const auto& k : r.kernels) voxels += static_cast<long>(k.features);
    md += fmt::format("One linear kernel was built per region of the atlas {}{} ({} regions, {} voxels in total", r.atlas,
                      r.atlasSpace.empty() ? "" : " (space " + r.atlasSpace + ")", r.kernels.size(), voxels);
    if (!r.excludedKernels.empty()) {
      std::vector<std::string> names;
      for (const auto& k : r.excludedKernels) names.push_back(k.info.name);
      md += fmt::format("; {} regions excluded: {}", r.excludedKernels.size(), Join(names, ", "));
    }
    md += ")";
    if (r.builtinAtlas == "aal") {
      md += " [Tzourio-Mazoyer et al., 2002]";
      cited.insert("aal");
    }
    md += ". ";
    md += r.nanPolicy == "zero" ? "Non-finite voxel values were set to zero. " : "Voxels with a non-finite value in any subject were dropped. ";
    if (!r.intensityScaling.empty())
      md += "Each image was divided by its own mean intensity (" + r.intensityScaling + ") before the kernels were computed. ";
  } else if (!r.sourceNames.empty()) {
    std::vector<std::string> parts;
    for (std::size_t s = 0; s < r.sourceNames.size(); ++s)
      parts.push_back(fmt::format("{} ({}, {} kernels)", r.sourceNames[s], r.sourceKinds[s], r.sourceKernelCounts[s]));
    md += fmt::format("The study combined {} kernels from {} sources: {}. ", r.kernels.size(), r.sourceNames.size(), Join(parts, ", "));
  } else {
    md += fmt::format("The study used {} {} kernels", r.kernels.size(), r.kernelSource);
    if (!r.excludedKernels.empty()) md += fmt::format(" ({} further kernels excluded)", r.excludedKernels.size());
    md += ". ";
  }
  if (const auto& t = r.targetConfounds; !t.columns.empty())
    md += fmt::format("The target was adjusted for {} within each training fold (outer and inner): it was regressed on them (with an intercept) "
                      "by least squares on the training subjects{}, and the learners were fitted to, and evaluated on, the residuals, with the "
                      "training coefficients for the test subjects; the confounds explained R^2 = {:.3f} of the target in-sample. ",
                      Join(t.columns, ", "), t.fitOn == "all" ? std::string() : " with " + t.fitOn, t.r2);
  if (!r.covariateColumns.empty())
    md += fmt::format("Within each training fold (outer and inner), every kernel was residualised on the covariates {} (with an intercept; "
                      "coefficients fitted on the training subjects{}, applied to the test subjects) before further preprocessing; the target's "
                      "R^2 on the covariates was {:.3f}. ",
                      Join(r.covariateColumns, ", "), r.covariateFitOn == "all" ? std::string() : " with " + r.covariateFitOn, r.covariateTargetR2);
  if (!r.covariateMissing.empty()) {
    std::vector<std::string> parts;
    for (const auto& [column, count] : r.covariateMissing) parts.push_back(fmt::format("{}: {} missing", column, count));
    md += fmt::format("Missing covariate values ({}) were imputed within each training fold with the training subjects' median (the most "
                      "frequent level for categorical covariates) and applied to the fold's test subjects. ",
                      Join(parts, ", "));
  }
  for (const auto& t : r.tabularFolds) {
    const auto Steps = [](const RunRecord::TabularFolds& f) {
      std::vector<std::string> done;
      if (f.impute) done.push_back("imputed with the training median");
      if (f.harmonise) done.push_back("harmonised with ComBat");
      if (f.standardise) done.push_back("standardised");
      return Join(done, ", then ");
    };
    std::vector<std::string> parts;
    for (const auto& [column, count] : t.missing) parts.push_back(fmt::format("{}: {} missing", column, count));
    md += fmt::format("The columns of the tabular source{} were {}{} within each training fold (outer and inner), with the training subjects' "
                      "statistics applied to the fold's test subjects, before its kernels were formed. ",
                      t.source.empty() ? std::string() : " " + t.source,
                      Steps(t),
                      parts.empty() ? std::string() : " (" + Join(parts, ", ") + ")");
  }
  if (const auto& h = r.harmonisation; !h.siteColumn.empty()) {
    std::vector<std::string> of;
    for (std::size_t s = 0; s < h.sources.size(); ++s) of.push_back((h.sourceKinds[s] == "tabular" ? "the columns of " : "the voxels of ") + h.sources[s]);
    md += fmt::format("Site effects were removed with ComBat{} [Johnson, Li & Rabinovic, 2007; Fortin et al., 2017, 2018] from {} "
                      "within each training fold (outer and inner): the site ({} sites, column {}) effects were estimated on the training "
                      "subjects{}{}, applied to the test subjects, and the fold's kernels formed from the harmonised data. ",
                      h.empiricalBayes ? " with empirical Bayes" : "", Join(of, ", "), h.sites.size(), h.siteColumn,
                      h.fitOn == "all" ? std::string() : " with " + h.fitOn,
                      h.designColumns.empty() ? std::string() : ", preserving the effects of " + Join(h.designColumns, ", "));
    cited.insert({"johnson2007", "fortin2017", "fortin2018"});
  }
  std::vector<std::string> prep;
  if (r.centre) prep.push_back("centred");
  if (r.normalise) prep.push_back("normalised (cosine)");
  md += prep.empty() ? "The kernels were used without centring or normalisation.\n\n"
                     : "Within each training fold the kernels were " + Join(prep, " and ") +
                           " with the training subjects' statistics only, and the test subjects transformed with them.\n\n";
  return md;
}

/// The nested cross-validation and its inner criterion.
std::string CrossValidationText(const RunRecord& r) {
  return fmt::format("Performance was estimated by nested cross-validation: outer {}, inner {} (seed {}). Hyper-parameters were chosen in the "
                     "inner loop on each outer training set by {}; performance was pooled over the out-of-fold predictions. ",
                     r.outerScheme, r.innerScheme, r.cvSeed,
                     r.task == "classification" ? "the mean balanced accuracy over inner folds"
                     : r.task == "multiclass"   ? "the mean macro balanced accuracy over inner folds"
                                                : "the mean squared error over inner folds");
}

/// The learners with their references and grids, and their class weights (only when a learner has them).
std::string LearnersText(const RunRecord& r, std::set<std::string>& cited) {
  std::vector<std::string> learnerTexts;
  for (const auto& lr : r.learners) {
    std::vector<std::string> cites;
    for (const auto& key : LearnerReferences(lr.outcome.name)) {
      cited.insert(key);
      cites.push_back(ShortCites().at(key));
    }
    std::string text = LearnerWords(lr.outcome.name);
    if (!cites.empty()) text += " [" + Join(cites, "; ") + "]";
    text += fmt::format(" (`{}`", lr.outcome.label);
    const std::string grid = GridText(lr);
    if (!grid.empty()) text += "; " + grid;
    text += ")";
    learnerTexts.push_back(text);
  }
  std::string md = "Learners: " + Join(learnerTexts, "; ") + ".";
  std::vector<std::string> weighted;
  for (const auto& lr : r.learners)
    if (!lr.classWeight.empty()) weighted.push_back(fmt::format("`{}`: {}", lr.outcome.label, lr.classWeight));
  if (!weighted.empty())
    md += " Classes were weighted (per-class C or weighted least squares; \"balanced\" = n / (k n_c) from each training set's class counts): " +
          Join(weighted, "; ") + ".";
  return md;
}

/// What was done with the fitted models' outputs: probabilities (binary studies), bias correction, permutation tests.
std::string AfterFitText(const RunRecord& r, std::set<std::string>& cited) {
  std::string md;
  bool probabilities = false, corrected = false;
  for (const auto& lr : r.learners)
    for (const auto& f : lr.outcome.folds) {
      probabilities |= f.probability.size() > 0;
      corrected |= f.corrected.size() > 0;
    }
  if (probabilities) {
    cited.insert("platt");
    cited.insert("lin2007");
    md += fmt::format(" Probabilities were obtained by Platt scaling [{}] fitted with the Newton method of {} within each outer fold on the "
                      "inner cross-validation's out-of-fold decision values of the training subjects.",
                      ShortCites().at("platt"), ShortCites().at("lin2007"));
  }
  if (corrected) {
    cited.insert("beheshti2019");
    cited.insert("delange2020");
    md += fmt::format(" Predictions were bias-corrected [{}; {}]: within each outer fold, prediction = a target + b was fitted on the inner "
                      "cross-validation's out-of-fold predictions of the training subjects, and test predictions were corrected as (prediction - b) / a.",
                      ShortCites().at("beheshti2019"), ShortCites().at("delange2020"));
  }
  if (r.permutations > 0) {
    const std::string exch = r.learners.empty() ? "" : r.learners.front().permutations.exchangeability;
    md += fmt::format(" Significance was assessed with {} permutations of the targets ({}), rerunning the whole nested cross-validation for each; "
                      "p = (number of permutations scoring at least as well + 1) / ({} + 1).",
                      r.permutations, exch, r.permutations);
    const bool regions = std::any_of(r.learners.begin(), r.learners.end(), [](const LearnerRecord& lr) { return !lr.permutations.regions.uncorrected.empty(); });
    const bool sources = std::any_of(r.learners.begin(), r.learners.end(), [](const LearnerRecord& lr) { return !lr.permutations.sources.uncorrected.empty(); });
    if (regions) {
      for (const char* key : {"westfall1993", "nichols2002", "bh1995"}) cited.insert(key);
      md += fmt::format(" The same permutations tested each region's mean share of the model: family-wise error was controlled with the "
                        "maximum statistic over the regions ({}; {}) and the false discovery rate with the Benjamini-Hochberg procedure ({}).{}",
                        ShortCites().at("westfall1993"), ShortCites().at("nichols2002"), ShortCites().at("bh1995"),
                        sources ? " Each source's summed share was tested against its own permutation shares, with Holm's correction over the sources." : "");
    }
  }
  return md;
}

/// The references: each learner's, then every work cited, sorted.
std::string ReferencesSection(const RunRecord& r, const std::set<std::string>& cited) {
  std::string md = "## References\n\n";
  md += "Learners used in this run:\n\n";
  for (const auto& lr : r.learners) {
    md += fmt::format("- `{}` ({}):", lr.outcome.label, lr.outcome.name);
    const auto keys = LearnerReferences(lr.outcome.name);
    if (keys.empty()) md += " no method paper beyond the standard formulation (kernel ridge regression);";
    for (const auto& key : keys) md += " " + References().at(key);
    md += "\n";
  }
  md += "\nAll references:\n\n";
  std::vector<std::string> all;
  for (const auto& key : cited) all.push_back(References().at(key));
  std::sort(all.begin(), all.end());
  for (const auto& ref : all) md += "- " + ref + "\n";
  md += "\nneuromkl itself: see CITATION.cff in its source repository.\n";
  return md;
}

}  // namespace

std::string CitationMarkdown(const RunRecord& r) {
  std::set<std::string> cited = {"pronto"};
  std::string md = "# How to describe and cite this analysis\n\n";
  md += fmt::format("Generated by neuromkl {} from study `{}`. Edit it to fit your paper; every number comes from `results.json`.\n\n",
                    r.version, r.study);
  md += "## Methods\n\n";
  md += SoftwareText(r);
  md += SubjectsParagraph(r);
  md += KernelsParagraph(r, cited);
  md += CrossValidationText(r);
  md += LearnersText(r, cited);
  md += AfterFitText(r, cited);
  md += "\n\n";
  md += ReferencesSection(r, cited);
  return md;
}

}  // namespace neuromkl::exporting
