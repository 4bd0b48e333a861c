// `neuromkl simulate`: ground truth for tests and the input of benchmarks.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/npy.hpp"
#include "neuromkl/core/random.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/cv/splits.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/pipeline/study_run.hpp"

namespace neuromkl::pipeline {

namespace fs = std::filesystem;

std::string Simulate(const SimulateOptions& o) {
  if (o.subjects < 4) throw InputError("simulate:TooFew", "--subjects", fmt::format("expected at least 4 subjects, got {}", o.subjects));
  // 10 keeps a 10 x 11 x 10 grid (20 mm voxels); beyond it most AAL regions have no voxel left.
  if (o.downsample < 1 || o.downsample > 10)
    throw InputError("simulate:Downsample", "--downsample", fmt::format("expected an integer in 1..10, got {}", o.downsample));
  if (!std::isfinite(o.noise) || o.noise < 0)
    throw InputError("simulate:Noise", "--noise", fmt::format("expected a finite noise SD >= 0, got {}", o.noise));
  if (!std::isfinite(o.effect)) throw InputError("simulate:Effect", "--effect", fmt::format("expected a finite effect size, got {}", o.effect));
  for (const char* existing : {"participants.tsv", "study.json", "truth.json"}) {
    std::error_code ec;
    if (fs::exists(fs::path(o.outDir) / existing, ec))
      throw InputError("simulate:Exists", o.outDir,
                       fmt::format("already holds a cohort ({} exists): simulate does not overwrite it; remove the folder or choose "
                                   "another --out", existing));
  }
  if (!(o.nanFraction >= 0 && o.nanFraction < 1)) throw InputError("simulate:NanFraction", "--nan-fraction", "expected a value in [0, 1)");
  const auto files = atlas::BuiltinAtlas("aal");
  const atlas::Atlas aal = atlas::LoadAtlas(files->image, files->table);

  // The output grid: the AAL 2 mm grid, or every k-th voxel of it (a different, coarser grid).
  io::Geometry grid = aal.geometry;
  const int k = o.downsample;
  for (int d = 0; d < 3; ++d) {
    grid.dims[static_cast<std::size_t>(d)] = (aal.geometry.dims[static_cast<std::size_t>(d)] + k - 1) / k;
    grid.spacing[static_cast<std::size_t>(d)] *= k;
  }
  const std::vector<std::int32_t> labels = k == 1 ? aal.labels : atlas::ResampleLabels(aal.geometry, aal.labels, grid);

  std::map<std::string, std::int32_t> codeOf;
  std::map<std::int32_t, std::size_t> slotOf;
  for (std::size_t r = 0; r < aal.regions.size(); ++r) {
    codeOf[aal.regions[r].name] = static_cast<std::int32_t>(aal.regions[r].label);
    slotOf[static_cast<std::int32_t>(aal.regions[r].label)] = r;
  }
  auto regionSet = [&](const std::vector<std::string>& regionNames, const char* option) {
    std::set<std::int32_t> out;
    for (const auto& name : regionNames) {
      auto it = codeOf.find(name);
      if (it == codeOf.end()) {
        std::vector<std::string> names;
        for (const auto& [n, _] : codeOf) names.push_back(n);
        throw InputError("simulate:UnknownRegion", option, "unknown AAL region \"" + name + "\"" + DidYouMean(name, names));
      }
      out.insert(it->second);
    }
    return out;
  };
  const bool multiclass = o.classes > 2;
  if (o.task == learners::Task::Regression && multiclass)
    throw InputError("simulate:ClassesNeedClassification", "--classes", "--classes > 2 needs --task classification");
  std::set<std::int32_t> signal;
  std::vector<std::set<std::int32_t>> classSignal;
  std::vector<std::vector<std::string>> classRegions = o.classSignal;
  std::vector<std::string> classNames;
  if (multiclass) {
    const std::vector<std::string> defaults = {"Hippocampus_L", "Precuneus_R", "Frontal_Mid_L", "Amygdala_L", "Cuneus_L", "Insula_R"};
    if (classRegions.empty() && o.classes <= static_cast<int>(defaults.size()))
      for (int c = 0; c < o.classes; ++c) classRegions.push_back({defaults[static_cast<std::size_t>(c)]});
    if (static_cast<int>(classRegions.size()) != o.classes)
      throw InputError("simulate:SignalGroups", "--signal",
                       fmt::format("--classes {} needs {} signal groups separated by ';' (one per class), found {}", o.classes, o.classes, classRegions.size()));
    for (int c = 0; c < o.classes; ++c) {
      classNames.emplace_back(1, static_cast<char>('A' + c));
      classSignal.push_back(regionSet(classRegions[static_cast<std::size_t>(c)], "--signal"));
    }
  } else {
    signal = regionSet(o.signalRegions, "--signal");
  }
  const std::set<std::int32_t> suppressor =
      o.suppressorRegion.empty() ? std::set<std::int32_t>{} : regionSet({o.suppressorRegion}, "--suppressor");
  if (!(o.suppressorNoise >= 0) || !std::isfinite(o.suppressorNoise))
    throw InputError("simulate:SuppressorNoise", "--suppressor-noise", fmt::format("expected a finite SD >= 0, got {}", o.suppressorNoise));
  const std::set<std::int32_t> ageSignal = regionSet(o.ageRegions, "--age-regions");
  const std::set<std::int32_t> signalB = regionSet(o.signalRegionsB, "--signal-b");
  if (!(o.ageTargetCorrelation >= -1 && o.ageTargetCorrelation <= 1))
    throw InputError("simulate:AgeCorrelation", "--age-target-correlation", "expected a value in [-1, 1]");

  if (o.connectivityNodes < 0 || o.connectivityNodes == 1 || o.connectivityNodes > 1000)
    throw InputError("simulate:Connectivity", "--connectivity", fmt::format("expected 0 (none) or 2..1000 nodes, got {}", o.connectivityNodes));
  const auto nodeName = [](int a) { return fmt::format("node{:02d}", a + 1); };
  std::set<int> connectivitySignal;
  for (const auto& name : o.connectivitySignal) {
    int found = -1;
    for (int a = 0; a < o.connectivityNodes; ++a)
      if (nodeName(a) == name) found = a;
    if (found < 0)
      throw InputError("simulate:UnknownNode", "--connectivity-signal",
                       fmt::format("unknown node \"{}\" (nodes are node01 .. {} with --connectivity {})", name,
                                   o.connectivityNodes > 0 ? nodeName(o.connectivityNodes - 1) : std::string("none"), o.connectivityNodes));
    connectivitySignal.insert(found);
  }

  const int nLabelled = o.subjects, nTotal = o.subjects + o.unlabelled;
  // The project's own generator (not std:: distributions): the same cohort with any standard library.
  Rng rng(cv::DeriveSeed(o.seed, 0));
  std::vector<double> target(static_cast<std::size_t>(nTotal));
  if (!std::isnan(o.positiveFraction) && (o.task != learners::Task::Classification || multiclass))
    throw InputError("simulate:PositiveFraction", "--positive-fraction", "applies to binary classification only (--task classification, --classes 2)");
  if (!std::isnan(o.positiveFraction) && !(o.positiveFraction > 0 && o.positiveFraction < 1))
    throw InputError("simulate:PositiveFraction", "--positive-fraction", fmt::format("expected a share in (0, 1), found {}", o.positiveFraction));
  const int positives = std::isnan(o.positiveFraction) ? -1 : std::max(1, std::min(o.subjects - 1, static_cast<int>(std::lround(o.positiveFraction * o.subjects))));
  for (int s = 0; s < nTotal; ++s)
    target[static_cast<std::size_t>(s)] = multiclass ? static_cast<double>(s % o.classes)
                                          : o.task == learners::Task::Classification ? (positives >= 0 && s < nLabelled ? (s < positives ? 1.0 : 0.0) : s % 2 == 0 ? 1.0 : 0.0)
                                                                                     : rng.Normal();
  std::vector<double> labelled(target.begin(), target.begin() + nLabelled);
  rng.Shuffle(labelled);
  std::copy(labelled.begin(), labelled.end(), target.begin());

  // Age and the clinical score come from their own streams, so the images and targets are those of the
  // same cohort without them. Age = 70 + 8 (rho z + sqrt(1 - rho^2) e), z the standardised target.
  const bool withAge = !o.ageRegions.empty(), withClinical = !std::isnan(o.clinicalEffect);
  std::vector<double> age(static_cast<std::size_t>(nTotal), 70.0), clinical(static_cast<std::size_t>(nTotal), 0.0);
  auto standardised = [&](double t) { return o.task == learners::Task::Classification ? 2.0 * t - 1.0 : t; };
  if (withAge || withClinical) {
    Rng extra(cv::DeriveSeed(o.seed, 0xA6EC11ULL));
    const double rho = o.ageTargetCorrelation;
    for (int s = 0; s < nTotal; ++s) {
      const double z = standardised(target[static_cast<std::size_t>(s)]);
      age[static_cast<std::size_t>(s)] = 70.0 + 8.0 * (rho * z + std::sqrt(1.0 - rho * rho) * extra.Normal());
      clinical[static_cast<std::size_t>(s)] = (withClinical ? o.clinicalEffect : 0.0) * z + extra.Normal();
    }
  }

  fs::create_directories(o.outDir + "/images");
  if (o.secondModality) fs::create_directories(o.outDir + "/images_b");
  const std::string ext = o.compress ? ".nii.gz" : ".nii";
  std::vector<std::string> ids(static_cast<std::size_t>(nTotal));
  for (int s = 0; s < nTotal; ++s) ids[static_cast<std::size_t>(s)] = fmt::format("sub-{:04d}", s + 1);
  tbb::parallel_for(0, nTotal, [&](int s) {
    // Each subject has its own stream, so the images do not depend on the thread count.
    Rng gen(cv::DeriveSeed(o.seed, 1 + static_cast<std::uint64_t>(s)));
    const double t = target[static_cast<std::size_t>(s)];
    // Class effect centred on 0 (+-effect/2) or a continuous effect, in noise-SD units.
    const double shift = o.task == learners::Task::Classification ? (t - 0.5) * o.effect : t * o.effect;
    // The suppressor's shared noise: its own stream, so the cohort without it is unchanged.
    const double shared = suppressor.empty() ? 0.0 : o.suppressorNoise * Rng(cv::DeriveSeed(o.seed, 0x5A000000ULL + static_cast<std::uint64_t>(s))).Normal();
    io::Volume v;
    v.geometry = grid;
    v.data.assign(labels.size(), 0.0f);
    for (std::size_t i = 0; i < labels.size(); ++i) {
      const std::int32_t lab = labels[i];
      if (lab == 0) continue;
      // A region-specific baseline (non-zero means make centring matter), noise, and the effect.
      double value = 2.0 + 0.01 * static_cast<double>(slotOf[lab]) + o.noise * gen.Normal();
      if (signal.count(lab)) value += shift;
      if (multiclass && s < nLabelled && classSignal[static_cast<std::size_t>(t)].count(lab)) value += o.effect;  // class t's own regions
      if (withAge && ageSignal.count(lab)) value += o.ageEffect * (age[static_cast<std::size_t>(s)] - 70.0) / 8.0;
      if (!suppressor.empty() && (suppressor.count(lab) || signal.count(lab))) value += shared;
      if (o.nanFraction > 0 && gen.Uniform() < o.nanFraction) value = std::nan("");
      v.data[i] = static_cast<float>(value);
    }
    io::WriteVolume(o.outDir + "/images/" + ids[static_cast<std::size_t>(s)] + ext, v);
    if (o.secondModality) {  // another tracer or contrast: its own baseline, noise stream and signal regions
      Rng genB(cv::DeriveSeed(o.seed, 0xB0000000ULL + static_cast<std::uint64_t>(s)));
      for (std::size_t i = 0; i < labels.size(); ++i) {
        const std::int32_t lab = labels[i];
        if (lab == 0) continue;
        double value = 1.0 + 0.02 * static_cast<double>(slotOf[lab]) + o.noise * genB.Normal();
        if (signalB.count(lab)) value += shift;
        v.data[i] = static_cast<float>(value);
      }
      io::WriteVolume(o.outDir + "/images_b/" + ids[static_cast<std::size_t>(s)] + ext, v);
    }
  });

  if (o.connectivityNodes > 0) {
    // Connectivity: a fixed pattern (the same for everyone) + noise, symmetric, unit diagonal; the target
    // effect shifts every connection of the signal nodes. Its own stream per subject.
    const int N = o.connectivityNodes;
    fs::create_directories(o.outDir + "/connectomes");
    tbb::parallel_for(0, nTotal, [&](int s) {
      Rng gen(cv::DeriveSeed(o.seed, 0xC0000000ULL + static_cast<std::uint64_t>(s)));
      const double t = target[static_cast<std::size_t>(s)];
      const double shift = o.task == learners::Task::Classification ? (t - 0.5) * o.effect : t * o.effect;
      Eigen::MatrixXd M = Eigen::MatrixXd::Identity(N, N);
      for (int a = 0; a < N; ++a)
        for (int b = a + 1; b < N; ++b) {
          double v = 0.3 * std::sin(1.7 * a + 0.9 * b) + o.noise * gen.Normal();
          if (connectivitySignal.count(a) || connectivitySignal.count(b)) v += shift;
          M(a, b) = M(b, a) = v;
        }
      WriteNpy(o.outDir + "/connectomes/" + ids[static_cast<std::size_t>(s)] + ".npy", M);
    });
    std::ofstream nodes(o.outDir + "/nodes.tsv");
    nodes << "name\tnetwork\n";
    for (int a = 0; a < N; ++a) nodes << nodeName(a) << "\tnet" << static_cast<char>('A' + a % 4) << "\n";
    nodes.close();
    if (!nodes) throw IoError("simulate:Write", o.outDir + "/nodes.tsv", "cannot write the file (disk full?)");
  }

  const std::string targetName = o.task == learners::Task::Classification ? "group" : "score";
  {
    std::ofstream p(o.outDir + "/participants.tsv");
    p << "subject\timage\t" << targetName << (o.secondModality ? "\timage_b" : "") << (withAge ? "\tage" : "") << (withClinical ? "\tclinical" : "")
      << (o.connectivityNodes > 0 ? "\tconnectome" : "") << "\n";
    for (int s = 0; s < nTotal; ++s) {
      std::string value = s >= nLabelled ? "n/a"
                          : multiclass ? classNames[static_cast<std::size_t>(target[static_cast<std::size_t>(s)])]
                          : o.task == learners::Task::Classification ? (target[static_cast<std::size_t>(s)] > 0.5 ? "patient" : "control")
                                                                     : FormatDouble(target[static_cast<std::size_t>(s)]);
      p << ids[static_cast<std::size_t>(s)] << "\timages/" << ids[static_cast<std::size_t>(s)] << ext << "\t" << value;
      if (o.secondModality) p << "\timages_b/" << ids[static_cast<std::size_t>(s)] << ext;
      if (withAge) p << "\t" << fmt::format("{:.2f}", age[static_cast<std::size_t>(s)]);
      if (withClinical) p << "\t" << fmt::format("{:.4f}", clinical[static_cast<std::size_t>(s)]);
      if (o.connectivityNodes > 0) p << "\tconnectomes/" << ids[static_cast<std::size_t>(s)] << ".npy";
      p << "\n";
    }
    p.close();
    if (!p) throw IoError("simulate:Write", o.outDir + "/participants.tsv", "cannot write the file (disk full?)");
  }
  if (multiclass) {
    std::vector<std::string> groups, all;
    for (int c = 0; c < o.classes; ++c) {
      std::vector<std::string> quoted;
      for (const auto& r : classRegions[static_cast<std::size_t>(c)]) quoted.push_back("\"" + r + "\"");
      groups.push_back(fmt::format("\"{}\": [{}]", classNames[static_cast<std::size_t>(c)], Join(quoted, ", ")));
      all.insert(all.end(), quoted.begin(), quoted.end());
    }
    std::ofstream t(o.outDir + "/truth.json");
    t << fmt::format("{{\n  \"signal_regions\": [{}],\n  \"class_signal_regions\": {{{}}},\n  \"effect\": {},\n  \"noise\": {},\n  \"seed\": {},\n"
                     "  \"task\": \"multiclass\",\n  \"grid\": \"{}\",\n  \"nan_fraction\": {}\n}}\n",
                     Join(all, ", "), Join(groups, ", "), o.effect, o.noise, o.seed, grid.Describe(), o.nanFraction);
    std::vector<std::string> described;
    for (int c = 0; c < o.classes; ++c)
      described.push_back(classNames[static_cast<std::size_t>(c)] + ": " + Join(classRegions[static_cast<std::size_t>(c)], ", "));
    const std::string studyPath = o.outDir + "/study.json";
    std::ofstream st(studyPath);
    st << fmt::format(R"({{
  "name": "simulated_multiclass",
  "description": "synthetic {}-class cohort written by neuromkl simulate (seed {}); class signal {}",
  "subjects": {{"table": "participants.tsv"}},
  "target": {{"column": "group", "task": "multiclass"}},
  "atlas": "aal",
  "learners": [
    {{"name": "enmkl_svm", "params": {{"c": 1.0, "mu": 0.5}}}},
    {{"name": "svm"}}
  ],
  "seed": {}
}}
)",
                      o.classes, o.seed, Join(described, "; "), o.seed);
    return studyPath;
  }
  {
    auto list = [](const std::vector<std::string>& v) {
      std::vector<std::string> q;
      for (const auto& r : v) q.push_back(fmt::format("\"{}\"", r));
      return fmt::format("[{}]", Join(q, ", "));
    };
    std::string truth = fmt::format("{{\n  \"signal_regions\": {},\n  \"effect\": {},\n  \"noise\": {},\n  \"seed\": {},\n  \"task\": \"{}\",\n"
                                    "  \"grid\": \"{}\",\n  \"nan_fraction\": {}",
                                    list(o.signalRegions), o.effect, o.noise, o.seed,
                                    o.task == learners::Task::Classification ? "classification" : "regression", grid.Describe(), o.nanFraction);
    if (!o.suppressorRegion.empty())
      truth += fmt::format(",\n  \"suppressor_region\": \"{}\",\n  \"suppressor_noise\": {}", o.suppressorRegion, o.suppressorNoise);
    if (o.connectivityNodes > 0) {
      std::vector<std::string> names;
      for (int a : connectivitySignal) names.push_back(nodeName(a));
      truth += fmt::format(",\n  \"connectivity_nodes\": {},\n  \"connectivity_signal\": {}", o.connectivityNodes, list(names));
    }
    if (withAge || o.secondModality || withClinical)  // the confounded designs' settings (absent: the cohort is as before)
      truth += fmt::format(",\n  \"age_regions\": {},\n  \"age_effect\": {},\n  \"age_target_correlation\": {},\n  \"second_modality\": {},\n"
                           "  \"signal_regions_b\": {},\n  \"clinical_effect\": {}",
                           list(o.ageRegions), withAge ? o.ageEffect : 0.0, withAge ? o.ageTargetCorrelation : 0.0, o.secondModality,
                           list(o.signalRegionsB), withClinical ? o.clinicalEffect : 0.0);
    truth += "\n}\n";
    std::ofstream t(o.outDir + "/truth.json");
    t << truth;
    t.close();
    if (!t) throw IoError("simulate:Write", o.outDir + "/truth.json", "cannot write the file (disk full?)");
  }
  const std::string studyPath = o.outDir + "/study.json";
  {
    std::ofstream st(studyPath);
    const bool cls = o.task == learners::Task::Classification;
    st << fmt::format(R"({{
  "name": "simulated_{}",
  "description": "synthetic cohort written by neuromkl simulate (seed {}); signal in {}",
  "subjects": {{"table": "participants.tsv"}},
  "target": {{"column": "{}", "task": "{}"{}}},
  "atlas": "aal",
  "learners": [
    {{"name": "{}", "params": {{"{}": 1.0, "mu": 0.5}}}},
    {{"name": "{}"}}
  ],
  "seed": {}
}}
)",
                      cls ? "classification" : "regression", o.seed, Join(o.signalRegions, ", "), targetName,
                      cls ? "classification" : "regression", cls ? ", \"positive_class\": \"patient\"" : "", cls ? "enmkl_svm" : "enmkl_krr",
                      cls ? "c" : "lambda", cls ? "svm" : "krr", o.seed);
    st.close();
    if (!st) throw IoError("simulate:Write", studyPath, "cannot write the file (disk full?)");
  }
  return studyPath;
}

}  // namespace neuromkl::pipeline
