#pragma once
// report.html: a self-contained page (no network, no external tools) a researcher would rather read
// than the TSV files: study summary, performance per learner, ROC curves or predicted-vs-true
// scatter, top regions with fold spread, selected-region counts, weight-map slice montages.
// The page draws prepared data: the run's record and what PrepareReportData computes from it with
// metrics and weights (ROC curves, reliability bins, source shares); its style sheet and script are the
// resource files modules/export/resources/report.{css,js}, embedded at build time.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/export/run_record.hpp"
#include "neuromkl/metrics/calibration.hpp"
#include "neuromkl/metrics/metrics.hpp"
#include "neuromkl/weights/weights.hpp"

namespace neuromkl::exporting {

/// What the report's figures show beyond the record's own numbers, per learner in RunRecord::learners order.
struct ReportData {
  struct Gap {
    double target = 0, gap = 0, correctedGap = 0;  ///< gap = prediction - target, before and after the bias correction
  };
  struct Learner {
    /// The pooled out-of-fold predictions of the first repetition with a finite decision value, in fold order.
    std::vector<double> targets, decisions;
    std::vector<metrics::RocPoint> roc;                    ///< binary: their ROC curve (empty: one class)
    std::vector<std::vector<metrics::RocPoint>> classRoc;  ///< multiclass: one-vs-rest per class, RunRecord::classNames order
    std::vector<metrics::ReliabilityBin> reliability;      ///< binary with probabilities: 10 bins (first repetition)
    std::vector<Gap> gaps;                                 ///< regression with bias correction (first repetition)
    std::vector<weights::SourceShare> sources;             ///< kernels.sources: each source's part of the region table
  };
  std::vector<Learner> learners;
  /// The fewest and most features (voxels, connections, columns) of a kernel.
  struct FeatureRange {
    std::int64_t fewest = 0, most = 0;
  };
  FeatureRange features;                     ///< over every kernel of the study
  std::vector<FeatureRange> sourceFeatures;  ///< kernels.sources: per source
  bool probabilities = false;  ///< some fold has Platt probabilities
  double prevalence = std::numeric_limits<double>::quiet_NaN();  ///< share of positive targets (Brier p (1 - p) to beat)
};

/// The report's data from the run: pooled predictions, ROC curves (metrics::RocCurve), reliability bins
/// (metrics::Reliability), bias-correction gaps, source shares (weights::SourceShares) and kernel sizes.
ReportData PrepareReportData(const RunRecord& record);

/// `data`: PrepareReportData(record); `meanMaps`: one mean voxel map per learner (empty when none);
/// `regions`: the image grid's region index (null without images). The background of the montages is
/// the ICBM 2009a grey-matter template shipped in atlases/templates (or the atlas itself when the
/// template is missing). `maps`: with kernels.sources, one montage per image source (maps->sources)
/// under each learner.
struct WeightMaps;
std::string RenderReport(const RunRecord& record, const ReportData& data, const std::vector<std::vector<float>>& meanMaps,
                         const atlas::RegionIndex* regions, const WeightMaps* maps = nullptr);

}  // namespace neuromkl::exporting
