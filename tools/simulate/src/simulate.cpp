// `neuromkl simulate`: ground truth for tests and the input of benchmarks.
#include "neuromkl/simulate/simulate.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include <Eigen/Core>
#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/npy.hpp"
#include "neuromkl/core/random.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/cv/splits.hpp"
#include "neuromkl/io/nifti.hpp"

namespace neuromkl::simulate {

namespace fs = std::filesystem;

namespace {

std::string NodeName(int a) { return fmt::format("node{:02d}", a + 1); }

/// The options that need nothing else to be checked, before the atlas is read or a file written.
void CheckOptions(const SimulateOptions& o) {
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
  if (o.sites < 0 || o.sites == 1 || o.sites > 100)
    throw InputError("simulate:Sites", "--sites", fmt::format("expected 0 (one scanner) or 2..100 sites, got {}", o.sites));
  if (!(o.siteShift >= 0 && std::isfinite(o.siteShift)) || !(o.siteScale >= 0 && std::isfinite(o.siteScale)))
    throw InputError("simulate:SiteEffect", "--site-shift/--site-scale", fmt::format("expected finite SDs >= 0, got {} and {}", o.siteShift, o.siteScale));
  if (!(o.siteImbalance >= 0 && o.siteImbalance < 1)) throw InputError("simulate:SiteImbalance", "--site-imbalance", "expected a value in [0, 1)");
}

/// Where the signal is: the output grid and its labels, and the regions (AAL codes) and nodes each effect shifts.
struct Design {
  io::Geometry grid;
  std::vector<std::int32_t> labels;       ///< per voxel of `grid`
  std::map<std::int32_t, std::size_t> slotOf;  ///< AAL code -> region index (the baseline's offset)
  bool multiclass = false;
  std::set<std::int32_t> signal, suppressor, ageSignal, signalB;
  std::vector<std::set<std::int32_t>> classSignal;
  std::vector<std::vector<std::string>> classRegions;
  std::vector<std::string> classNames;
  std::set<int> connectivitySignal;
};

/// The AAL 2 mm grid, or every k-th voxel of it (a different, coarser grid).
void MakeGrid(const atlas::Atlas& aal, int k, Design& d) {
  d.grid = aal.geometry;
  for (int axis = 0; axis < 3; ++axis) {
    d.grid.dims[static_cast<std::size_t>(axis)] = (aal.geometry.dims[static_cast<std::size_t>(axis)] + k - 1) / k;
    d.grid.spacing[static_cast<std::size_t>(axis)] *= k;
  }
  d.labels = k == 1 ? aal.labels : atlas::ResampleLabels(aal.geometry, aal.labels, d.grid);
}

/// Each class's signal regions (one default region per class unless given) and the class names A, B, ...
void MakeClassSignal(const SimulateOptions& o, const std::function<std::set<std::int32_t>(const std::vector<std::string>&, const char*)>& regionSet,
                     Design& d) {
  const std::vector<std::string> defaults = {"Hippocampus_L", "Precuneus_R", "Frontal_Mid_L", "Amygdala_L", "Cuneus_L", "Insula_R"};
  d.classRegions = o.classSignal;
  if (d.classRegions.empty() && o.classes <= static_cast<int>(defaults.size()))
    for (int c = 0; c < o.classes; ++c) d.classRegions.push_back({defaults[static_cast<std::size_t>(c)]});
  if (static_cast<int>(d.classRegions.size()) != o.classes)
    throw InputError("simulate:SignalGroups", "--signal",
                     fmt::format("--classes {} needs {} signal groups separated by ';' (one per class), found {}", o.classes, o.classes, d.classRegions.size()));
  for (int c = 0; c < o.classes; ++c) {
    d.classNames.emplace_back(1, static_cast<char>('A' + c));
    d.classSignal.push_back(regionSet(d.classRegions[static_cast<std::size_t>(c)], "--signal"));
  }
}

std::set<int> ConnectivitySignal(const SimulateOptions& o) {
  if (o.connectivityNodes < 0 || o.connectivityNodes == 1 || o.connectivityNodes > 1000)
    throw InputError("simulate:Connectivity", "--connectivity", fmt::format("expected 0 (none) or 2..1000 nodes, got {}", o.connectivityNodes));
  std::set<int> nodes;
  for (const auto& name : o.connectivitySignal) {
    int found = -1;
    for (int a = 0; a < o.connectivityNodes; ++a)
      if (NodeName(a) == name) found = a;
    if (found < 0)
      throw InputError("simulate:UnknownNode", "--connectivity-signal",
                       fmt::format("unknown node \"{}\" (nodes are node01 .. {} with --connectivity {})", name,
                                   o.connectivityNodes > 0 ? NodeName(o.connectivityNodes - 1) : std::string("none"), o.connectivityNodes));
    nodes.insert(found);
  }
  return nodes;
}

Design MakeDesign(const SimulateOptions& o) {
  const auto files = atlas::BuiltinAtlas("aal");
  const atlas::Atlas aal = atlas::LoadAtlas(files->image, files->table);
  Design d;
  MakeGrid(aal, o.downsample, d);
  std::map<std::string, std::int32_t> codeOf;
  for (std::size_t r = 0; r < aal.regions.size(); ++r) {
    codeOf[aal.regions[r].name] = static_cast<std::int32_t>(aal.regions[r].label);
    d.slotOf[static_cast<std::int32_t>(aal.regions[r].label)] = r;
  }
  const auto regionSet = [&](const std::vector<std::string>& regionNames, const char* option) {
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
  d.multiclass = o.classes > 2;
  if (o.task == learners::Task::Regression && d.multiclass)
    throw InputError("simulate:ClassesNeedClassification", "--classes", "--classes > 2 needs --task classification");
  if (d.multiclass) MakeClassSignal(o, regionSet, d);
  else d.signal = regionSet(o.signalRegions, "--signal");
  if (!o.suppressorRegion.empty()) d.suppressor = regionSet({o.suppressorRegion}, "--suppressor");
  if (!(o.suppressorNoise >= 0) || !std::isfinite(o.suppressorNoise))
    throw InputError("simulate:SuppressorNoise", "--suppressor-noise", fmt::format("expected a finite SD >= 0, got {}", o.suppressorNoise));
  d.ageSignal = regionSet(o.ageRegions, "--age-regions");
  d.signalB = regionSet(o.signalRegionsB, "--signal-b");
  if (!(o.ageTargetCorrelation >= -1 && o.ageTargetCorrelation <= 1))
    throw InputError("simulate:AgeCorrelation", "--age-target-correlation", "expected a value in [-1, 1]");
  d.connectivitySignal = ConnectivitySignal(o);
  return d;
}

/// Every subject's target (labelled subjects first, shuffled; unlabelled ones after them).
std::vector<double> Targets(const SimulateOptions& o, bool multiclass) {
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
  return target;
}

/// Age and the clinical score. They come from their own streams, so the images and targets are those of the
/// same cohort without them. Age = 70 + 8 (rho z + sqrt(1 - rho^2) e), z the standardised target.
struct Covariates {
  bool withAge = false, withClinical = false;
  std::vector<double> age, clinical;
};
Covariates MakeCovariates(const SimulateOptions& o, const std::vector<double>& target) {
  const std::size_t n = target.size();
  Covariates c{!o.ageRegions.empty(), !std::isnan(o.clinicalEffect), std::vector<double>(n, 70.0), std::vector<double>(n, 0.0)};
  if (!c.withAge && !c.withClinical) return c;
  const auto standardised = [&](double t) { return o.task == learners::Task::Classification ? 2.0 * t - 1.0 : t; };
  Rng extra(cv::DeriveSeed(o.seed, 0xA6EC11ULL));
  const double rho = o.ageTargetCorrelation;
  for (std::size_t s = 0; s < n; ++s) {
    const double z = standardised(target[s]);
    c.age[s] = 70.0 + 8.0 * (rho * z + std::sqrt(1.0 - rho * rho) * extra.Normal());
    c.clinical[s] = (c.withClinical ? o.clinicalEffect : 0.0) * z + extra.Normal();
  }
  return c;
}

/// Sites: each subject's site and each site's offset and gain per region (SimulateOptions::sites), from their own stream.
struct Sites {
  std::vector<int> of;              ///< per subject; empty without sites
  Eigen::MatrixXd shift, scale;     ///< sites x regions (AAL slots)
};
Sites MakeSites(const SimulateOptions& o, const Design& d, const std::vector<double>& target) {
  Sites out;
  if (o.sites == 0) return out;
  Rng rng(cv::DeriveSeed(o.seed, 0x517E0000ULL));
  const auto regions = static_cast<Eigen::Index>(d.slotOf.size());
  out.shift.resize(o.sites, regions);
  out.scale.resize(o.sites, regions);
  for (int s = 0; s < o.sites; ++s)
    for (Eigen::Index r = 0; r < regions; ++r) {
      out.shift(s, r) = o.siteShift * rng.Normal();
      out.scale(s, r) = std::exp(o.siteScale * rng.Normal());
    }
  std::vector<double> labelled(target.begin(), target.begin() + o.subjects);
  std::nth_element(labelled.begin(), labelled.begin() + static_cast<std::ptrdiff_t>(labelled.size() / 2), labelled.end());
  const double median = labelled.empty() ? 0.0 : labelled[labelled.size() / 2];
  const int half = (o.sites + 1) / 2;
  for (std::size_t i = 0; i < target.size(); ++i) {
    // Binary: the positive class; regression: above the median; unlabelled subjects are not confounded.
    const bool labelledSubject = static_cast<int>(i) < o.subjects;
    const bool high = o.task == learners::Task::Classification && !d.multiclass ? target[i] > 0.5 : target[i] >= median;
    const double firstHalf = !labelledSubject ? 0.5 : high ? (1.0 + o.siteImbalance) / 2 : (1.0 - o.siteImbalance) / 2;
    const bool first = rng.Uniform() < firstHalf;
    const int count = first ? half : o.sites - half;
    const int site = (first ? 0 : half) + std::min(count - 1, static_cast<int>(rng.Uniform() * count));
    out.of.push_back(site);
  }
  return out;
}

/// The class effect centred on 0 (+-effect/2) or a continuous effect, in noise-SD units.
double TargetShift(const SimulateOptions& o, double t) { return o.task == learners::Task::Classification ? (t - 0.5) * o.effect : t * o.effect; }

void WriteImages(const SimulateOptions& o, const Design& d, const std::vector<std::string>& ids, const std::vector<double>& target,
                 const Covariates& cov, const Sites& sites, const std::string& ext) {
  fs::create_directories(o.outDir + "/images");
  if (o.secondModality) fs::create_directories(o.outDir + "/images_b");
  const int nLabelled = o.subjects, nTotal = static_cast<int>(ids.size());
  tbb::parallel_for(0, nTotal, [&](int s) {
    // Each subject has its own stream, so the images do not depend on the thread count.
    Rng gen(cv::DeriveSeed(o.seed, 1 + static_cast<std::uint64_t>(s)));
    const double t = target[static_cast<std::size_t>(s)];
    const double shift = TargetShift(o, t);
    // The suppressor's shared noise: its own stream, so the cohort without it is unchanged.
    const double shared = d.suppressor.empty() ? 0.0 : o.suppressorNoise * Rng(cv::DeriveSeed(o.seed, 0x5A000000ULL + static_cast<std::uint64_t>(s))).Normal();
    io::Volume v;
    v.geometry = d.grid;
    v.data.assign(d.labels.size(), 0.0f);
    for (std::size_t i = 0; i < d.labels.size(); ++i) {
      const std::int32_t lab = d.labels[i];
      if (lab == 0) continue;
      // A region-specific baseline (non-zero means make centring matter), noise, and the effect.
      double value = 2.0 + 0.01 * static_cast<double>(d.slotOf.at(lab)) + o.noise * gen.Normal();
      if (d.signal.count(lab)) value += shift;
      if (d.multiclass && s < nLabelled && d.classSignal[static_cast<std::size_t>(t)].count(lab)) value += o.effect;  // class t's own regions
      if (cov.withAge && d.ageSignal.count(lab)) value += o.ageEffect * (cov.age[static_cast<std::size_t>(s)] - 70.0) / 8.0;
      if (!d.suppressor.empty() && (d.suppressor.count(lab) || d.signal.count(lab))) value += shared;
      if (!sites.of.empty()) {  // the scanner: its offset and gain in this region
        const auto slot = static_cast<Eigen::Index>(d.slotOf.at(lab));
        const int site = sites.of[static_cast<std::size_t>(s)];
        value = sites.shift(site, slot) + sites.scale(site, slot) * value;
      }
      if (o.nanFraction > 0 && gen.Uniform() < o.nanFraction) value = std::nan("");
      v.data[i] = static_cast<float>(value);
    }
    io::WriteVolume(o.outDir + "/images/" + ids[static_cast<std::size_t>(s)] + ext, v);
    if (o.secondModality) {  // another tracer or contrast: its own baseline, noise stream and signal regions
      Rng genB(cv::DeriveSeed(o.seed, 0xB0000000ULL + static_cast<std::uint64_t>(s)));
      for (std::size_t i = 0; i < d.labels.size(); ++i) {
        const std::int32_t lab = d.labels[i];
        if (lab == 0) continue;
        double value = 1.0 + 0.02 * static_cast<double>(d.slotOf.at(lab)) + o.noise * genB.Normal();
        if (d.signalB.count(lab)) value += shift;
        v.data[i] = static_cast<float>(value);
      }
      io::WriteVolume(o.outDir + "/images_b/" + ids[static_cast<std::size_t>(s)] + ext, v);
    }
  });
}

/// Connectivity: a fixed pattern (the same for everyone) + noise, symmetric, unit diagonal; the target effect
/// shifts every connection of the signal nodes. Its own stream per subject.
void WriteConnectomes(const SimulateOptions& o, const Design& d, const std::vector<std::string>& ids, const std::vector<double>& target) {
  const int N = o.connectivityNodes;
  fs::create_directories(o.outDir + "/connectomes");
  tbb::parallel_for(0, static_cast<int>(ids.size()), [&](int s) {
    Rng gen(cv::DeriveSeed(o.seed, 0xC0000000ULL + static_cast<std::uint64_t>(s)));
    const double shift = TargetShift(o, target[static_cast<std::size_t>(s)]);
    Eigen::MatrixXd M = Eigen::MatrixXd::Identity(N, N);
    for (int a = 0; a < N; ++a)
      for (int b = a + 1; b < N; ++b) {
        double v = 0.3 * std::sin(1.7 * a + 0.9 * b) + o.noise * gen.Normal();
        if (d.connectivitySignal.count(a) || d.connectivitySignal.count(b)) v += shift;
        M(a, b) = M(b, a) = v;
      }
    WriteNpy(o.outDir + "/connectomes/" + ids[static_cast<std::size_t>(s)] + ".npy", M);
  });
  std::ofstream nodes(o.outDir + "/nodes.tsv");
  nodes << "name\tnetwork\n";
  for (int a = 0; a < N; ++a) nodes << NodeName(a) << "\tnet" << static_cast<char>('A' + a % 4) << "\n";
  nodes.close();
  if (!nodes) throw IoError("simulate:Write", o.outDir + "/nodes.tsv", "cannot write the file (disk full?)");
}

std::string TargetColumn(const SimulateOptions& o) { return o.task == learners::Task::Classification ? "group" : "score"; }

void WriteParticipants(const SimulateOptions& o, const Design& d, const std::vector<std::string>& ids, const std::vector<double>& target,
                       const Covariates& cov, const Sites& sites, const std::string& ext) {
  std::ofstream p(o.outDir + "/participants.tsv");
  p << "subject\timage\t" << TargetColumn(o) << (o.secondModality ? "\timage_b" : "") << (cov.withAge ? "\tage" : "")
    << (cov.withClinical ? "\tclinical" : "") << (o.connectivityNodes > 0 ? "\tconnectome" : "") << (sites.of.empty() ? "" : "\tsite") << "\n";
  for (std::size_t s = 0; s < ids.size(); ++s) {
    std::string value = static_cast<int>(s) >= o.subjects ? "n/a"
                        : d.multiclass                     ? d.classNames[static_cast<std::size_t>(target[s])]
                        : o.task == learners::Task::Classification ? (target[s] > 0.5 ? "patient" : "control")
                                                                   : FormatDouble(target[s]);
    p << ids[s] << "\timages/" << ids[s] << ext << "\t" << value;
    if (o.secondModality) p << "\timages_b/" << ids[s] << ext;
    if (cov.withAge) p << "\t" << fmt::format("{:.2f}", cov.age[s]);
    if (cov.withClinical) p << "\t" << fmt::format("{:.4f}", cov.clinical[s]);
    if (o.connectivityNodes > 0) p << "\tconnectomes/" << ids[s] << ".npy";
    if (!sites.of.empty()) p << "\tsite" << sites.of[s] + 1;
    p << "\n";
  }
  p.close();
  if (!p) throw IoError("simulate:Write", o.outDir + "/participants.tsv", "cannot write the file (disk full?)");
}

std::string WriteMulticlassTruthAndStudy(const SimulateOptions& o, const Design& d) {
  std::vector<std::string> groups, all;
  for (int c = 0; c < o.classes; ++c) {
    std::vector<std::string> quoted;
    for (const auto& r : d.classRegions[static_cast<std::size_t>(c)]) quoted.push_back("\"" + r + "\"");
    groups.push_back(fmt::format("\"{}\": [{}]", d.classNames[static_cast<std::size_t>(c)], Join(quoted, ", ")));
    all.insert(all.end(), quoted.begin(), quoted.end());
  }
  std::ofstream t(o.outDir + "/truth.json");
  t << fmt::format("{{\n  \"signal_regions\": [{}],\n  \"class_signal_regions\": {{{}}},\n  \"effect\": {},\n  \"noise\": {},\n  \"seed\": {},\n"
                   "  \"task\": \"multiclass\",\n  \"grid\": \"{}\",\n  \"nan_fraction\": {}\n}}\n",
                   Join(all, ", "), Join(groups, ", "), o.effect, o.noise, o.seed, d.grid.Describe(), o.nanFraction);
  std::vector<std::string> described;
  for (int c = 0; c < o.classes; ++c)
    described.push_back(d.classNames[static_cast<std::size_t>(c)] + ": " + Join(d.classRegions[static_cast<std::size_t>(c)], ", "));
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

std::string Quoted(const std::vector<std::string>& v) {
  std::vector<std::string> q;
  for (const auto& r : v) q.push_back(fmt::format("\"{}\"", r));
  return fmt::format("[{}]", Join(q, ", "));
}

void WriteTruth(const SimulateOptions& o, const Design& d, const Covariates& cov) {
  std::string truth = fmt::format("{{\n  \"signal_regions\": {},\n  \"effect\": {},\n  \"noise\": {},\n  \"seed\": {},\n  \"task\": \"{}\",\n"
                                  "  \"grid\": \"{}\",\n  \"nan_fraction\": {}",
                                  Quoted(o.signalRegions), o.effect, o.noise, o.seed,
                                  o.task == learners::Task::Classification ? "classification" : "regression", d.grid.Describe(), o.nanFraction);
  if (!o.suppressorRegion.empty())
    truth += fmt::format(",\n  \"suppressor_region\": \"{}\",\n  \"suppressor_noise\": {}", o.suppressorRegion, o.suppressorNoise);
  if (o.connectivityNodes > 0) {
    std::vector<std::string> names;
    for (int a : d.connectivitySignal) names.push_back(NodeName(a));
    truth += fmt::format(",\n  \"connectivity_nodes\": {},\n  \"connectivity_signal\": {}", o.connectivityNodes, Quoted(names));
  }
  if (cov.withAge || o.secondModality || cov.withClinical)  // the confounded designs' settings, written only when used
    truth += fmt::format(",\n  \"age_regions\": {},\n  \"age_effect\": {},\n  \"age_target_correlation\": {},\n  \"second_modality\": {},\n"
                         "  \"signal_regions_b\": {},\n  \"clinical_effect\": {}",
                         Quoted(o.ageRegions), cov.withAge ? o.ageEffect : 0.0, cov.withAge ? o.ageTargetCorrelation : 0.0, o.secondModality,
                         Quoted(o.signalRegionsB), cov.withClinical ? o.clinicalEffect : 0.0);
  if (o.sites > 0)
    truth += fmt::format(",\n  \"sites\": {},\n  \"site_shift\": {},\n  \"site_scale\": {},\n  \"site_imbalance\": {}", o.sites, o.siteShift,
                         o.siteScale, o.siteImbalance);
  truth += "\n}\n";
  std::ofstream t(o.outDir + "/truth.json");
  t << truth;
  t.close();
  if (!t) throw IoError("simulate:Write", o.outDir + "/truth.json", "cannot write the file (disk full?)");
}

std::string WriteStudy(const SimulateOptions& o) {
  const std::string studyPath = o.outDir + "/study.json";
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
                    cls ? "classification" : "regression", o.seed, Join(o.signalRegions, ", "), TargetColumn(o),
                    cls ? "classification" : "regression", cls ? ", \"positive_class\": \"patient\"" : "", cls ? "enmkl_svm" : "enmkl_krr",
                    cls ? "c" : "lambda", cls ? "svm" : "krr", o.seed);
  st.close();
  if (!st) throw IoError("simulate:Write", studyPath, "cannot write the file (disk full?)");
  return studyPath;
}

}  // namespace

std::string Simulate(const SimulateOptions& o) {
  CheckOptions(o);
  const Design design = MakeDesign(o);
  const std::vector<double> target = Targets(o, design.multiclass);
  const Covariates covariates = MakeCovariates(o, target);
  const std::string ext = o.compress ? ".nii.gz" : ".nii";
  std::vector<std::string> ids(target.size());
  for (std::size_t s = 0; s < ids.size(); ++s) ids[s] = fmt::format("sub-{:04d}", s + 1);
  const Sites sites = MakeSites(o, design, target);
  WriteImages(o, design, ids, target, covariates, sites, ext);
  if (o.connectivityNodes > 0) WriteConnectomes(o, design, ids, target);
  WriteParticipants(o, design, ids, target, covariates, sites, ext);
  if (design.multiclass) return WriteMulticlassTruthAndStudy(o, design);
  WriteTruth(o, design, covariates);
  return WriteStudy(o);
}

}  // namespace neuromkl::simulate
