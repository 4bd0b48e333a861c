#pragma once
// The pieces report.html is made of (report.cpp lays out the sections): SVG axes and charts of the
// performance (report_charts.cpp) and of the regions and maps (report_regions.cpp). They draw what they
// are given: the statistics come from the run (RunRecord) and from ReportData (metrics and weights).
#include <string>
#include <vector>

#include <fmt/format.h>

#include "neuromkl/export/report.hpp"
#include "neuromkl/export/study_outputs.hpp"

namespace neuromkl::exporting::report {

std::string Escape(const std::string& s);
/// A number with `digits` decimals, or a dash when it is not finite.
std::string Num(double v, int digits = 3);
/// The colour of the i-th curve or learner (eight, then again).
const char* Colour(std::size_t i);
/// A pooled metric of the learner, NaN when it has none.
double Pooled(const LearnerRecord& lr, const std::string& key);

/// About how wide `text` (escaped HTML: an entity is one character) is drawn at `fontSize` pixels: 0.62 em per
/// character, above the average of the sans-serif fonts browsers use (DejaVu Sans, Liberation Sans, Helvetica),
/// so that a figure sized by it leaves room rather than cutting its labels off.
double TextWidth(const std::string& text, double fontSize);
/// The width a chart needs for texts starting at x = `start` (legend entries, a title): the widest plus a margin.
int WidthFor(const std::vector<std::string>& texts, double fontSize, double start);

/// About `count` round tick values (steps of 1, 2 or 5 x 10^k) covering [lo, hi].
std::vector<double> Ticks(double lo, double hi, int count = 5);
std::string TickLabel(double v);

/// Tick marks and labels along a horizontal axis at height y (x(v) maps a value to pixels).
template <typename ToX>
std::string XTicks(const std::vector<double>& ticks, ToX x, double y) {
  std::string svg;
  for (double t : ticks)
    svg += fmt::format(R"(<line x1="{0:.1f}" x2="{0:.1f}" y1="{1}" y2="{2}" stroke="#888"/><text x="{0:.1f}" y="{3}" font-size="9" text-anchor="middle">{4}</text>)",
                       x(t), y, y + 4, y + 14, TickLabel(t));
  return svg;
}

/// Tick marks and labels along a vertical axis at x (y(v) maps a value to pixels).
template <typename ToY>
std::string YTicks(const std::vector<double>& ticks, ToY y, double x) {
  std::string svg;
  for (double t : ticks)
    svg += fmt::format(R"(<line x1="{0}" x2="{1}" y1="{2:.1f}" y2="{2:.1f}" stroke="#888"/><text x="{3}" y="{4:.1f}" font-size="9" text-anchor="end">{5}</text>)",
                       x - 4, x, y(t), x - 6, y(t) + 3, TickLabel(t));
  return svg;
}

/// The opening of a chart on the unit square (ROC, reliability): its frame, the diagonal and ticks at 0, 0.25, ..., 1.
std::string UnitSquareFrame(const char* label, int size, int pad, int width);

// Performance (report_charts.cpp).
std::string RocChart(const RunRecord& r, const ReportData& data);
std::string ScatterChart(const LearnerRecord& lr, const ReportData::Learner& data, const char* colour);
/// Empty without probabilities.
std::string ReliabilityChart(const RunRecord& r, const ReportData& data);
/// Empty without corrected predictions.
std::string GapChart(const LearnerRecord& lr, const ReportData::Learner& data, const char* colour);
std::string ConfusionMatrix(const LearnerRecord& lr, const RunRecord& r);
std::string MulticlassConfusion(const LearnerRecord& lr, const RunRecord& r);
std::string PerClassRoc(const LearnerRecord& lr, const ReportData::Learner& data, const RunRecord& r);
/// Empty when the metric has no null distribution.
std::string NullHistogram(const LearnerRecord& lr, const std::string& metric);

// Fits, regions and maps (report_regions.cpp).
/// `unit`: what a kernel is ("regions", or "kernels" when some are not atlas regions).
std::string FitTable(const LearnerRecord& lr, const std::string& unit);
std::string TopRegionsChart(const std::vector<weights::RegionRow>& regions, const RunRecord& r, std::size_t top,
                            const metrics::FamilyPValues* significance = nullptr);
std::string SelectedCountsChart(const LearnerRecord& lr, std::size_t kernels, const std::string& unit);
/// What a montage shows: a voxel weight map, or an activation pattern (Haufe et al. 2014).
enum class MapKind { Weights, Pattern };
/// Axial slices of a voxel map over `background`, with its colour bar and a caption.
std::string Montage(const std::vector<float>& map, const std::vector<float>& background, const io::Geometry& g, MapKind kind = MapKind::Weights);
/// The montages' background on the grid of `regions`: the grey-matter template, or the regions themselves.
std::vector<float> Background(const atlas::RegionIndex& regions);
/// A connectivity source's `top` strongest connections (largest absolute mean weight) as a table.
std::string EdgeTable(const WeightMaps::Edges& e, const Eigen::MatrixXd& mean, const std::string& learner, std::size_t top);

}  // namespace neuromkl::exporting::report
