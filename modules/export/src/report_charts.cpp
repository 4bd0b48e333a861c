// The report's performance figures as inline SVG: ROC curves, predicted-vs-true scatter, reliability
// diagram, bias-correction gaps, confusion matrices and permutation null distributions.
#include <algorithm>
#include <cmath>

#include "report_parts.hpp"

namespace neuromkl::exporting::report {

namespace {

/// The points of an SVG polyline drawing `curve` in a square plot at (pad, pad) of side `plot`.
std::string RocPolyline(const std::vector<metrics::RocPoint>& curve, int pad, int plot) {
  std::string points = fmt::format("{},{} ", pad, pad + plot);
  for (std::size_t k = 1; k < curve.size(); ++k)
    points += fmt::format("{:.1f},{:.1f} ", pad + plot * curve[k].falsePositiveRate, pad + plot * (1 - curve[k].truePositiveRate));
  return points;
}

/// A chart's axis titles: `x` centred under a square plot of side `size`, `y` rotated along its left edge.
std::string AxisTitles(const std::string& x, const std::string& y, int size, int pad, int plot) {
  return fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="middle">{}</text>)", pad + plot / 2, size - 4, x) +
         fmt::format(R"(<text x="10" y="{}" font-size="11" transform='rotate(-90 10 {})' text-anchor="middle">{}</text></svg>)", pad + plot / 2, pad + plot / 2, y);
}

}  // namespace

std::string UnitSquareFrame(const char* label, int size, int pad, int width) {
  const int plot = size - 2 * pad;
  std::string svg = fmt::format(R"(<svg class="figure" role="img" aria-label="{}" width="{}" height="{}" viewBox="0 0 {} {}">)", label, width, size, width, size);
  svg += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#888"/>)", pad, pad, plot, plot);
  svg += fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#bbb" stroke-dasharray="4 3"/>)", pad, pad + plot, pad + plot, pad);
  const std::vector<double> unit = {0, 0.25, 0.5, 0.75, 1};
  svg += XTicks(unit, [&](double v) { return pad + plot * v; }, pad + plot);
  svg += YTicks(unit, [&](double v) { return pad + plot * (1 - v); }, pad);
  return svg;
}

std::string RocChart(const RunRecord& r, const ReportData& data) {
  const int size = 320, pad = 40, plot = size - 2 * pad;
  std::vector<std::string> legend;
  for (const auto& lr : r.learners) legend.push_back(Escape(lr.outcome.label) + " (AUC " + Num(Pooled(lr, "auc")) + ")");
  std::string svg = UnitSquareFrame("ROC curves", size, pad, std::max(size + 150, WidthFor(legend, 11, size - 10)));
  for (std::size_t l = 0; l < r.learners.size(); ++l) {
    const auto& curve = data.learners[l].roc;
    if (curve.empty()) continue;
    const char* colour = Colour(l);
    svg += fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>)", RocPolyline(curve, pad, plot), colour);
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="11" fill="{}">{}</text>)", size - 10, pad + 14 + 16 * static_cast<int>(l), colour, legend[l]);
  }
  return svg + AxisTitles("false positive rate (1 - specificity)", "true positive rate (sensitivity)", size, pad, plot);
}

std::string ScatterChart(const LearnerRecord& lr, const ReportData::Learner& data, const char* colour) {
  const auto& y = data.targets;
  const auto& f = data.decisions;
  const int size = 300, pad = 40, plot = size - 2 * pad;
  const std::string title = Escape(lr.outcome.label) + ": r = " + Num(Pooled(lr, "pearson_r")) + ", R&#178; = " + Num(Pooled(lr, "r2"));
  const int width = std::max(size, WidthFor({title}, 12, pad));
  double lo = 1e300, hi = -1e300;
  for (double v : y) lo = std::min(lo, v), hi = std::max(hi, v);
  for (double v : f) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!(hi > lo)) hi = lo + 1;
  auto X = [&](double v) { return pad + plot * (v - lo) / (hi - lo); };
  auto Y = [&](double v) { return pad + plot * (1 - (v - lo) / (hi - lo)); };
  std::string svg = fmt::format(R"(<svg class="figure" role="img" aria-label="predicted vs true" width="{}" height="{}" viewBox="0 0 {} {}">)", width, size, width, size);
  svg += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#888"/>)", pad, pad, plot, plot);
  svg += fmt::format(R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="#bbb" stroke-dasharray="4 3"/>)", X(lo), Y(lo), X(hi), Y(hi));
  svg += XTicks(Ticks(lo, hi, 4), X, pad + plot);
  svg += YTicks(Ticks(lo, hi, 4), Y, pad);
  for (std::size_t i = 0; i < y.size(); ++i)
    svg += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="{}" fill-opacity="0.75"/>)", X(y[i]), Y(f[i]), colour);
  svg += fmt::format(R"(<text x="{}" y="18" font-size="12">{}</text>)", pad, title);
  return svg + AxisTitles("true target", "predicted (out of fold)", size, pad, plot);
}

/// Reliability diagram of the Platt probabilities (pooled out-of-fold, first repeat): per learner, the
/// observed share of positives against the mean predicted probability in 10 equal-width bins (point area
/// ~ subjects in the bin); the diagonal is perfect calibration.
std::string ReliabilityChart(const RunRecord& r, const ReportData& data) {
  const int size = 320, pad = 40, plot = size - 2 * pad;
  if (!data.probabilities) return "";
  std::vector<std::string> legend;
  for (const auto& lr : r.learners) legend.push_back(Escape(lr.outcome.label) + " (Brier " + Num(Pooled(lr, "brier")) + ")");
  const std::string title = "probability of " + Escape(r.positiveClass);
  std::string svg = UnitSquareFrame("reliability diagram", size, pad, std::max({size + 150, WidthFor(legend, 11, size - 10), WidthFor({title}, 12, pad)}));
  svg += fmt::format(R"(<text x="{}" y="18" font-size="12">{}</text>)", pad, title);
  for (std::size_t l = 0; l < r.learners.size(); ++l) {
    const auto& bins = data.learners[l].reliability;
    int total = 0;
    for (const auto& b : bins) total += b.count;
    if (total == 0) continue;
    const char* colour = Colour(l);
    std::string points;
    for (const auto& b : bins) {
      if (b.count == 0) continue;
      const double x = pad + plot * b.meanProbability, yy = pad + plot * (1 - b.observed);
      points += fmt::format("{:.1f},{:.1f} ", x, yy);
      svg += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="{:.1f}" fill="{}" fill-opacity="0.6"><title>{} subjects, mean p {}, observed {}</title></circle>)", x, yy,
                         2.0 + 8.0 * std::sqrt(static_cast<double>(b.count) / total), colour, b.count, Num(b.meanProbability), Num(b.observed));
    }
    svg += fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="1.5"/>)", points, colour);
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="11" fill="{}">{}</text>)", size - 10, pad + 14 + 16 * static_cast<int>(l), colour, legend[l]);
  }
  return svg + AxisTitles("predicted probability", "observed share", size, pad, plot);
}

/// Brain-age gap (prediction - target) against the target, before (grey) and after (colour) the bias
/// correction, with both least-squares slopes.
std::string GapChart(const LearnerRecord& lr, const ReportData::Learner& data, const char* colour) {
  const auto& gaps = data.gaps;
  if (gaps.empty()) return "";
  const int size = 300, pad = 40, plot = size - 2 * pad;
  const std::string title = Escape(lr.outcome.label) + ": gap slope " + Num(Pooled(lr, "gap_slope")) + " (grey) &#8594; " +
                            Num(Pooled(lr, "corrected_gap_slope")) + " corrected";
  const int width = std::max(size, WidthFor({title}, 12, pad));
  double xlo = 1e300, xhi = -1e300, lo = 1e300, hi = -1e300;
  for (const auto& p : gaps) xlo = std::min(xlo, p.target), xhi = std::max(xhi, p.target);
  for (const auto& p : gaps) lo = std::min(lo, p.gap), hi = std::max(hi, p.gap);
  for (const auto& p : gaps) lo = std::min(lo, p.correctedGap), hi = std::max(hi, p.correctedGap);
  if (!(xhi > xlo)) xhi = xlo + 1;
  if (!(hi > lo)) hi = lo + 1;
  auto X = [&](double v) { return pad + plot * (v - xlo) / (xhi - xlo); };
  auto Y = [&](double v) { return pad + plot * (1 - (v - lo) / (hi - lo)); };
  std::string svg = fmt::format(R"(<svg class="figure" role="img" aria-label="gap vs true target" width="{}" height="{}" viewBox="0 0 {} {}">)", width, size, width, size);
  svg += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#888"/>)", pad, pad, plot, plot);
  if (lo < 0 && hi > 0) svg += fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#bbb" stroke-dasharray="4 3"/>)", pad, Y(0), pad + plot, Y(0));
  svg += XTicks(Ticks(xlo, xhi, 4), X, pad + plot);
  svg += YTicks(Ticks(lo, hi, 4), Y, pad);
  for (const auto& p : gaps) {
    svg += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="2.5" fill="#999" fill-opacity="0.6"/>)", X(p.target), Y(p.gap));
    svg += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="2.5" fill="{}" fill-opacity="0.75"/>)", X(p.target), Y(p.correctedGap), colour);
  }
  svg += fmt::format(R"(<text x="{}" y="14" font-size="12">{}</text>)", pad, title);
  return svg + AxisTitles("true target", "gap = prediction - target", size, pad, plot);
}

/// The pooled confusion matrix (rows: true class, columns: predicted), cells shaded by their share
/// of the true class.
std::string ConfusionMatrix(const LearnerRecord& lr, const RunRecord& r) {
  const double cells[2][2] = {{Pooled(lr, "true_positive"), Pooled(lr, "false_negative")}, {Pooled(lr, "false_positive"), Pooled(lr, "true_negative")}};
  const std::string names[2] = {Escape(r.positiveClass), Escape(r.negativeClass)};
  const std::string caption = Escape(lr.outcome.label) + ": pooled out-of-fold predictions";
  // Room for the class names: beside the rows ("true <class>") and over the columns.
  const int left = std::max(110, WidthFor({"true " + names[0], "true " + names[1]}, 10, 6));
  const int cellH = 70, cellW = std::max(cellH, WidthFor({names[0], names[1]}, 10, 2));
  const int top = 40, width = std::max(left + 2 * cellW + 20, WidthFor({caption}, 10, 4)), height = top + 2 * cellH + 40;
  std::string svg = fmt::format(R"(<svg class="figure" role="img" aria-label="confusion matrix" width="{}" height="{}" viewBox="0 0 {} {}">)", width, height, width, height);
  svg += fmt::format(R"(<text x="{}" y="14" font-size="11" text-anchor="middle">predicted class</text>)", left + cellW);
  for (int j = 0; j < 2; ++j)
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="10" text-anchor="middle">{}</text>)", left + cellW * j + cellW / 2, top - 6, names[j]);
  for (int i = 0; i < 2; ++i) {
    const double rowTotal = cells[i][0] + cells[i][1];
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="10" text-anchor="end">true {}</text>)", left - 6, top + cellH * i + cellH / 2 + 4, names[i]);
    for (int j = 0; j < 2; ++j) {
      const double share = rowTotal > 0 ? cells[i][j] / rowTotal : 0;
      const int shade = static_cast<int>(std::lround(255 - 180 * share));
      svg += fmt::format(R"svg(<rect x="{}" y="{}" width="{}" height="{}" fill="rgb({},{},255)" stroke="#fff"/><text x="{}" y="{}" font-size="13" text-anchor="middle">{}</text><text x="{}" y="{}" font-size="9" text-anchor="middle" fill="#333">{:.0f} %</text>)svg",
                         left + cellW * j, top + cellH * i, cellW, cellH, shade, shade, left + cellW * j + cellW / 2, top + cellH * i + cellH / 2,
                         std::isfinite(cells[i][j]) ? fmt::format("{:.0f}", cells[i][j]) : "&ndash;", left + cellW * j + cellW / 2, top + cellH * i + cellH / 2 + 15, 100 * share);
    }
  }
  svg += fmt::format(R"(<text x="{}" y="{}" font-size="10" fill="#555">{}</text></svg>)", 4, height - 8, caption);
  return svg;
}

/// Multiclass: the pooled k x k confusion matrix (rows: true class, columns: predicted), cells shaded
/// by their share of the true class.
std::string MulticlassConfusion(const LearnerRecord& lr, const RunRecord& r) {
  const auto k = static_cast<int>(r.classNames.size());
  std::vector<std::string> names, rowNames;
  for (const auto& c : r.classNames) names.push_back(Escape(c)), rowNames.push_back("true " + Escape(c));
  const std::string caption = Escape(lr.outcome.label) + ": pooled out-of-fold predictions";
  const int cellH = std::max(36, 210 / std::max(k, 1)), cellW = std::max(cellH, WidthFor(names, 10, 2)), left = std::max(110, WidthFor(rowNames, 10, 6)), top = 40;
  const int width = std::max(left + k * cellW + 20, WidthFor({caption}, 10, 4)), height = top + k * cellH + 40;
  std::string svg = fmt::format(R"(<svg class="figure" role="img" aria-label="confusion matrix" width="{}" height="{}" viewBox="0 0 {} {}">)", width, height, width, height);
  svg += fmt::format(R"(<text x="{}" y="14" font-size="11" text-anchor="middle">predicted class</text>)", left + k * cellW / 2);
  auto value = [&](int i, int j) {
    return Pooled(lr, "confusion_" + r.classNames[static_cast<std::size_t>(i)] + "_" + r.classNames[static_cast<std::size_t>(j)]);
  };
  for (int j = 0; j < k; ++j)
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="10" text-anchor="middle">{}</text>)", left + cellW * j + cellW / 2, top - 6, names[static_cast<std::size_t>(j)]);
  for (int i = 0; i < k; ++i) {
    double rowTotal = 0;
    for (int j = 0; j < k; ++j) rowTotal += std::isfinite(value(i, j)) ? value(i, j) : 0;
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="10" text-anchor="end">{}</text>)", left - 6, top + cellH * i + cellH / 2 + 4, rowNames[static_cast<std::size_t>(i)]);
    for (int j = 0; j < k; ++j) {
      const double v = value(i, j), share = rowTotal > 0 && std::isfinite(v) ? v / rowTotal : 0;
      const int shade = static_cast<int>(std::lround(255 - 180 * share));
      svg += fmt::format(R"svg(<rect x="{}" y="{}" width="{}" height="{}" fill="rgb({},{},255)" stroke="#fff"/><text x="{}" y="{}" font-size="12" text-anchor="middle">{}</text>)svg",
                         left + cellW * j, top + cellH * i, cellW, cellH, shade, shade, left + cellW * j + cellW / 2, top + cellH * i + cellH / 2 + 4,
                         std::isfinite(v) ? fmt::format("{:.0f}", v) : "&ndash;");
    }
  }
  svg += fmt::format(R"(<text x="{}" y="{}" font-size="10" fill="#555">{}</text></svg>)", 4, height - 8, caption);
  return svg;
}

/// Multiclass: one-vs-rest ROC curve of every class (its score column against the rest), first repetition.
std::string PerClassRoc(const LearnerRecord& lr, const ReportData::Learner& data, const RunRecord& r) {
  const int size = 320, pad = 40, plot = size - 2 * pad;
  std::vector<std::string> legend;
  for (const auto& c : r.classNames) legend.push_back(Escape(c) + " (AUC " + Num(Pooled(lr, "auc_" + c)) + ")");
  const std::string title = Escape(lr.outcome.label) + ": one class vs the rest";
  std::string svg = UnitSquareFrame("per-class ROC curves", size, pad, std::max({size + 150, WidthFor(legend, 11, size - 10), WidthFor({title}, 12, pad)}));
  svg += fmt::format(R"(<text x="{}" y="18" font-size="12">{}</text>)", pad, title);
  for (std::size_t c = 0; c < r.classNames.size() && c < data.classRoc.size(); ++c) {
    if (data.classRoc[c].empty()) continue;
    const char* colour = Colour(c);
    svg += fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>)", RocPolyline(data.classRoc[c], pad, plot), colour);
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="11" fill="{}">{}</text>)", size - 10, pad + 14 + 16 * static_cast<int>(c), colour, legend[c]);
  }
  return svg + AxisTitles("false positive rate", "true positive rate", size, pad, plot);
}

/// Histogram of a metric over the permutations with the observed value marked.
std::string NullHistogram(const LearnerRecord& lr, const std::string& metric) {
  if (!lr.permutations.null.count(metric) || !lr.summary.pooled.count(metric)) return "";
  std::vector<double> values;
  for (double v : lr.permutations.null.at(metric))
    if (std::isfinite(v)) values.push_back(v);
  const double observed = lr.summary.pooled.at(metric);
  if (values.empty()) return "";
  double lo = std::min(*std::min_element(values.begin(), values.end()), observed), hi = std::max(*std::max_element(values.begin(), values.end()), observed);
  if (!(hi > lo)) lo -= 0.5, hi += 0.5;
  const double p = lr.permutations.pValues.count(metric) ? lr.permutations.pValues.at(metric) : NAN;
  const std::string title = fmt::format("{}: p = {:.3g} ({} permutations)", Escape(lr.outcome.label), p, values.size());
  const int bins = 20, left = 46, right = 20, top = 40, base = 156, height = 200, width = std::max(360, WidthFor({title}, 11, 4));
  const double binWidth = (hi - lo) / bins;
  std::vector<int> counts(bins, 0);
  for (double v : values) ++counts[static_cast<std::size_t>(std::min(bins - 1, static_cast<int>((v - lo) / binWidth)))];
  const int maxCount = *std::max_element(counts.begin(), counts.end());
  auto X = [&](double v) { return left + (width - left - right) * (v - lo) / (hi - lo); };
  auto Y = [&](double c) { return base - (base - top) * c / std::max(1, maxCount); };
  std::string svg = fmt::format(R"(<svg class="figure" role="img" aria-label="permutation null distribution" width="{}" height="{}" viewBox="0 0 {} {}">)", width, height, width, height);
  svg += fmt::format(R"(<text x="4" y="14" font-size="11">{}</text>)", title);
  for (int b = 0; b < bins; ++b)
    if (counts[static_cast<std::size_t>(b)] > 0)
      svg += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="#bab0ac"/>)", X(lo + b * binWidth), Y(counts[static_cast<std::size_t>(b)]),
                         std::max(1.0, X(lo + (b + 1) * binWidth) - X(lo + b * binWidth) - 1), base - Y(counts[static_cast<std::size_t>(b)]));
  svg += fmt::format(R"(<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#888"/><line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#888"/>)", left, width - right, base, base, left, left, top, base);
  svg += XTicks(Ticks(lo, hi, 4), X, base);
  svg += YTicks(Ticks(0, maxCount, 3), Y, left);
  // The observed value's label stays over its line, moved inwards where it would cross the figure's edge.
  const std::string label = fmt::format("observed {:.3g}", observed);
  const double half = TextWidth(label, 10) / 2, labelX = std::clamp(X(observed), half + 2, width - half - 2);
  svg += fmt::format(R"(<line x1="{0:.1f}" x2="{0:.1f}" y1="{1}" y2="{2}" stroke="#d62728" stroke-width="2"/><text x="{3:.1f}" y="{4}" font-size="10" fill="#d62728" text-anchor="middle">{5}</text>)",
                     X(observed), top - 4, base, labelX, top - 8, label);
  svg += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="middle">{} on permuted targets</text>)", (left + width - right) / 2, height - 8, Escape(metric));
  svg += fmt::format(R"(<text x="12" y="{0}" font-size="11" transform='rotate(-90 12 {0})' text-anchor="middle">permutations</text></svg>)", (top + base) / 2);
  return svg;
}

}  // namespace neuromkl::exporting::report
