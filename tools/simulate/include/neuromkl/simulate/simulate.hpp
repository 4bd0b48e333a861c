#pragma once
// `neuromkl simulate`: synthetic cohorts with known signal regions, the ground truth of tests and the input of
// benchmarks. A tool beside the pipeline: it writes the files a study reads and runs nothing.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "neuromkl/learners/learner.hpp"

namespace neuromkl::simulate {

/// `neuromkl simulate`: a synthetic cohort on the AAL grid with known signal regions.
struct SimulateOptions {
  std::string outDir;
  int subjects = 40;
  learners::Task task = learners::Task::Classification;
  std::vector<std::string> signalRegions = {"Hippocampus_L", "Precuneus_R", "Frontal_Mid_L"};
  double effect = 1.0;       ///< class difference (classification) or slope per target SD (regression), in noise SD units
  double noise = 1.0;
  double nanFraction = 0.0;  ///< fraction of brain voxels set to NaN in each image (independently per subject)
  int downsample = 1;        ///< 1 = the 2 mm AAL grid; k = every k-th voxel (a coarser "second grid", 2k mm)
  std::uint64_t seed = 1;
  bool compress = true;      ///< .nii.gz (else .nii)
  int unlabelled = 0;        ///< extra subjects written with target n/a
  int classes = 2;           ///< > 2: a multiclass cohort, classes A, B, C, ... of (nearly) equal size
  /// binary classification: share of labelled subjects in the positive class ("patient"); NaN = alternate (half)
  double positiveFraction = std::numeric_limits<double>::quiet_NaN();
  /// multiclass: class k's signal regions (its images are shifted by `effect` there); empty = one default region per class
  std::vector<std::vector<std::string>> classSignal;
  /// Confounded designs. Each adds to the cohort only when given and draws from its own random stream, so the
  /// targets and every image's noise of a seed are the same with or without it:
  std::vector<std::string> ageRegions;  ///< an "age" column, correlated with the target, that drives these regions of the images
  double ageEffect = 1.0;               ///< voxel shift per age SD (8 years), in noise-SD units
  double ageTargetCorrelation = 0.6;    ///< correlation of age with the (standardised) target
  bool secondModality = false;          ///< a second image per subject (images_b/, column "image_b"), independent noise
  std::vector<std::string> signalRegionsB;  ///< the target's regions in the second modality
  double clinicalEffect = std::numeric_limits<double>::quiet_NaN();  ///< a "clinical" column = effect * target + N(0, 1); NaN = none
  /// > 0: a connectivity matrix per subject (connectomes/<id>.npy, column "connectome") with this many nodes
  /// (node01, ...; nodes.tsv assigns them to networks netA..netD in turn): a fixed pattern plus noise, and the
  /// connections of `connectivitySignal` nodes shifted by the target effect.
  /// A suppressor: this region and the signal regions share a subject-specific noise N(0, suppressorNoise^2)
  /// (no target effect in it): a linear model cancels the noise with weights of opposite sign there.
  std::string suppressorRegion;
  double suppressorNoise = 2.0;
  int connectivityNodes = 0;
  std::vector<std::string> connectivitySignal;
  /// > 1: a multi-site cohort ("site" column, site1, site2, ...). Every image of site s (images/; the second modality
  /// is left alone) is scanned as shift_sr + scale_sr x value in region r, with shift_sr ~ N(0, siteShift^2) and
  /// log scale_sr ~ N(0, siteScale^2) (one per site and region: a scanner's offset and gain). Site effects, assignments and imbalance come from their own
  /// stream, so the cohort without them (sites = 0) has the same targets and the same unscanned images.
  int sites = 0;
  double siteShift = 1.0;
  double siteScale = 0.3;
  /// In [0, 1): sites confounded with the target. A subject above the target's median (binary: the positive class) is
  /// at one of the first half of the sites with probability (1 + imbalance) / 2, one below it at the second half with
  /// the same probability; 0 = sites drawn uniformly.
  double siteImbalance = 0.0;
};
/// Writes images/, participants.tsv, truth.json and study.json; returns the study file path.
std::string Simulate(const SimulateOptions& options);

}  // namespace neuromkl::simulate
