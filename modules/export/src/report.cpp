#include "neuromkl/export/report.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "neuromkl/core/strings.hpp"
#include "neuromkl/export/derivative.hpp"
#include "neuromkl/export/png.hpp"
#include "neuromkl/export/study_outputs.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/metrics/calibration.hpp"

namespace neuromkl::exporting {

namespace {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Num(double v, int digits = 3) { return std::isfinite(v) ? fmt::format("{:.{}f}", v, digits) : "&ndash;"; }

const char* kColours[] = {"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

/// About `count` round tick values (steps of 1, 2 or 5 x 10^k) covering [lo, hi].
std::vector<double> Ticks(double lo, double hi, int count = 5) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double raw = (hi - lo) / count, magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = magnitude * (raw / magnitude < 1.5 ? 1 : raw / magnitude < 3.5 ? 2 : raw / magnitude < 7.5 ? 5 : 10);
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + 1e-9 * step; t += step) ticks.push_back(std::abs(t) < 1e-12 * step ? 0.0 : t);
  return ticks;
}

std::string TickLabel(double v) { return fmt::format("{:.3g}", v); }

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

/// Horizontal bars: top regions' mean weight (%) with +- 1 SD over folds.
std::string TopRegionsChart(const LearnerRecord& lr, const RunRecord& r, std::size_t top) {
  const std::size_t n = std::min(top, lr.regions.size());
  double maxValue = 1e-12;
  for (std::size_t i = 0; i < n; ++i) maxValue = std::max(maxValue, lr.regions[i].meanPercent + lr.regions[i].sdPercent);
  const int rowH = 18, left = 170, width = 560, barW = width - left - 60;
  const int height = static_cast<int>(n) * rowH + 58;
  std::string svg = fmt::format(R"(<svg class="figure" role="img" aria-label="top regions" width="{}" height="{}" viewBox="0 0 {} {}">)", width, height, width, height);
  const double axisY = 10 + static_cast<double>(n) * rowH + 2;
  svg += fmt::format(R"(<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#888"/>)", left, left + barW, axisY, axisY);
  svg += XTicks(Ticks(0, maxValue, 4), [&](double v) { return left + barW * v / maxValue; }, axisY);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& row = lr.regions[i];
    const double y = 10 + static_cast<double>(i) * rowH;
    const double w = barW * row.meanPercent / maxValue;
    const double lo = barW * std::max(0.0, row.meanPercent - row.sdPercent) / maxValue, hi = barW * (row.meanPercent + row.sdPercent) / maxValue;
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>)", left - 6, y + 12, Escape(r.kernels[row.kernel].name));
    svg += fmt::format(R"(<rect x="{}" y="{}" width="{:.1f}" height="{}" fill="#4c78a8"><title>{}: {:.2f} % (SD {:.2f}), selected in {} folds, expected rank {:.1f}</title></rect>)",
                       left, y + 2, std::max(w, 0.5), rowH - 5, Escape(r.kernels[row.kernel].name), row.meanPercent, row.sdPercent, row.foldsSelected, row.expectedRank);
    svg += fmt::format(R"(<line x1="{:.1f}" x2="{:.1f}" y1="{}" y2="{}" stroke="#222" stroke-width="1.2"/>)", left + lo, left + hi, y + rowH / 2.0, y + rowH / 2.0);
    svg += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="10" fill="#444">{:.1f}</text>)", left + hi + 4, y + 12, row.meanPercent);
  }
  svg += fmt::format(R"(<text x="{}" y="{}" font-size="11">mean weight (%) over outer folds, bar = +-1 SD</text></svg>)", left, height - 8);
  return svg;
}

/// Vertical bars: number of regions with weight > 0 per outer fold.
std::string SelectedCountsChart(const LearnerRecord& lr, std::size_t kernels) {
  std::vector<std::pair<std::string, int>> counts;
  for (const auto& f : lr.outcome.folds)
    if (f.error.empty())
      counts.emplace_back(f.repeat > 0 ? fmt::format("{}/{}", f.repeat, f.index) : std::to_string(f.index), static_cast<int>((f.model.beta.array() > 0).count()));
  const int width = 60 + 40 * static_cast<int>(counts.size()), height = 190, base = 160;
  std::string svg = fmt::format(R"(<svg class="figure" role="img" aria-label="selected regions per fold" width="{}" height="{}" viewBox="0 0 {} {}">)", width, height, width, height);
  svg += fmt::format(R"(<line x1="40" x2="{}" y1="{}" y2="{}" stroke="#888"/>)", width - 10, base, base);
  svg += fmt::format(R"(<line x1="40" x2="40" y1="20" y2="{}" stroke="#888"/>)", base);
  svg += YTicks(Ticks(0, static_cast<double>(std::max<std::size_t>(kernels, 1)), 4),
                [&](double v) { return base - 140.0 * v / std::max<double>(1.0, static_cast<double>(kernels)); }, 40);
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const double h = 140.0 * counts[i].second / std::max<double>(1.0, static_cast<double>(kernels));
    const double x = 50 + 40.0 * static_cast<double>(i);
    svg += fmt::format(R"(<rect x="{}" y="{:.1f}" width="26" height="{:.1f}" fill="#72b7b2"><title>fold {}: {} of {} regions</title></rect>)", x, base - h, std::max(h, 0.5), counts[i].first, counts[i].second, kernels);
    svg += fmt::format(R"(<text x="{}" y="{:.1f}" font-size="10" text-anchor="middle">{}</text>)", x + 13, base - h - 3, counts[i].second);
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="10" text-anchor="middle">{}</text>)", x + 13, base + 13, counts[i].first);
  }
  svg += fmt::format(R"(<text x="40" y="{}" font-size="11">regions selected (weight &gt; 0) per outer fold</text></svg>)", height - 4);
  return svg;
}

/// Pooled out-of-fold (target, decision) pairs of the first repetition.
std::pair<std::vector<double>, std::vector<double>> Pooled(const LearnerRecord& lr, const RunRecord& r) {
  std::vector<double> y, f;
  for (const auto& fold : lr.outcome.folds)
    if (fold.repeat == 0)
      for (std::size_t i = 0; i < fold.test.size(); ++i)
        if (std::isfinite(fold.decision[static_cast<Eigen::Index>(i)])) {
          y.push_back(r.targets[static_cast<std::size_t>(fold.test[i])]);
          f.push_back(fold.decision[static_cast<Eigen::Index>(i)]);
        }
  return {y, f};
}

/// The ROC curve of decision values f for labels y (> 0 positive) as SVG polyline points in a square
/// plot at (pad, pad) of side `plot`; empty when one class is missing. Ties move diagonally.
std::string RocPoints(const std::vector<double>& y, const std::vector<double>& f, int pad, int plot) {
  std::vector<std::size_t> order(y.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return f[a] > f[b]; });
  const double pos = static_cast<double>(std::count_if(y.begin(), y.end(), [](double v) { return v > 0; }));
  const double neg = static_cast<double>(y.size()) - pos;
  if (pos == 0 || neg == 0) return "";
  std::string points = fmt::format("{},{} ", pad, pad + plot);
  double tp = 0, fp = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    (y[order[k]] > 0 ? tp : fp) += 1;
    if (k + 1 < order.size() && f[order[k + 1]] == f[order[k]]) continue;
    points += fmt::format("{:.1f},{:.1f} ", pad + plot * fp / neg, pad + plot * (1 - tp / pos));
  }
  return points;
}

/// The opening of a chart on the unit square (ROC, reliability): its frame, the diagonal and ticks at 0, 0.25, ..., 1.
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

std::string RocChart(const RunRecord& r) {
  const int size = 320, pad = 40, plot = size - 2 * pad;
  std::string svg = UnitSquareFrame("ROC curves", size, pad, size + 150);
  for (std::size_t l = 0; l < r.learners.size(); ++l) {
    auto [y, f] = Pooled(r.learners[l], r);
    const std::string points = RocPoints(y, f, pad, plot);
    if (points.empty()) continue;
    const char* colour = kColours[l % 8];
    svg += fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>)", points, colour);
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="11" fill="{}">{} (AUC {})</text>)", size - 10, pad + 14 + 16 * static_cast<int>(l), colour,
                       Escape(r.learners[l].outcome.label), Num(r.learners[l].summary.pooled.count("auc") ? r.learners[l].summary.pooled.at("auc") : NAN));
  }
  svg += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="middle">false positive rate (1 - specificity)</text>)", pad + plot / 2, size - 4);
  svg += fmt::format(R"(<text x="10" y="{}" font-size="11" transform='rotate(-90 10 {})' text-anchor="middle">true positive rate (sensitivity)</text></svg>)", pad + plot / 2, pad + plot / 2);
  return svg;
}

std::string ScatterChart(const LearnerRecord& lr, const RunRecord& r, const char* colour) {
  auto [y, f] = Pooled(lr, r);
  const int size = 300, pad = 40, plot = size - 2 * pad;
  double lo = 1e300, hi = -1e300;
  for (double v : y) lo = std::min(lo, v), hi = std::max(hi, v);
  for (double v : f) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!(hi > lo)) hi = lo + 1;
  auto X = [&](double v) { return pad + plot * (v - lo) / (hi - lo); };
  auto Y = [&](double v) { return pad + plot * (1 - (v - lo) / (hi - lo)); };
  std::string svg = fmt::format(R"(<svg class="figure" role="img" aria-label="predicted vs true" width="{}" height="{}" viewBox="0 0 {} {}">)", size, size, size, size);
  svg += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#888"/>)", pad, pad, plot, plot);
  svg += fmt::format(R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="#bbb" stroke-dasharray="4 3"/>)", X(lo), Y(lo), X(hi), Y(hi));
  svg += XTicks(Ticks(lo, hi, 4), X, pad + plot);
  svg += YTicks(Ticks(lo, hi, 4), Y, pad);
  for (std::size_t i = 0; i < y.size(); ++i)
    svg += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="{}" fill-opacity="0.75"/>)", X(y[i]), Y(f[i]), colour);
  svg += fmt::format(R"(<text x="{}" y="18" font-size="12">{}: r = {}, R&#178; = {}</text>)", pad, Escape(lr.outcome.label),
                     Num(lr.summary.pooled.count("pearson_r") ? lr.summary.pooled.at("pearson_r") : NAN),
                     Num(lr.summary.pooled.count("r2") ? lr.summary.pooled.at("r2") : NAN));
  svg += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="middle">true target</text>)", pad + plot / 2, size - 4);
  svg += fmt::format(R"(<text x="10" y="{}" font-size="11" transform='rotate(-90 10 {})' text-anchor="middle">predicted (out of fold)</text></svg>)", pad + plot / 2, pad + plot / 2);
  return svg;
}

/// Reliability diagram of the Platt probabilities (pooled out-of-fold, first repeat): per learner, the
/// observed share of positives against the mean predicted probability in 10 equal-width bins (point area
/// ~ subjects in the bin); the diagonal is perfect calibration. Empty without probabilities.
std::string ReliabilityChart(const RunRecord& r) {
  const int size = 320, pad = 40, plot = size - 2 * pad;
  bool any = false;
  for (const auto& lr : r.learners)
    for (const auto& f : lr.outcome.folds) any |= f.probability.size() > 0;
  if (!any) return "";
  std::string svg = UnitSquareFrame("reliability diagram", size, pad, size + 220);
  for (std::size_t l = 0; l < r.learners.size(); ++l) {
    std::vector<double> y, p;
    for (const auto& fold : r.learners[l].outcome.folds)
      if (fold.repeat == 0 && fold.probability.size() > 0)
        for (std::size_t i = 0; i < fold.test.size(); ++i) {
          y.push_back(r.targets[static_cast<std::size_t>(fold.test[i])]);
          p.push_back(fold.probability[static_cast<Eigen::Index>(i)]);
        }
    const auto bins = metrics::Reliability(Eigen::Map<const Eigen::VectorXd>(y.data(), static_cast<Eigen::Index>(y.size())),
                                           Eigen::Map<const Eigen::VectorXd>(p.data(), static_cast<Eigen::Index>(p.size())), 10);
    int total = 0;
    for (const auto& b : bins) total += b.count;
    if (total == 0) continue;
    const char* colour = kColours[l % 8];
    std::string points;
    for (const auto& b : bins) {
      if (b.count == 0) continue;
      const double x = pad + plot * b.meanProbability, yy = pad + plot * (1 - b.observed);
      points += fmt::format("{:.1f},{:.1f} ", x, yy);
      svg += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="{:.1f}" fill="{}" fill-opacity="0.6"><title>{} subjects, mean p {}, observed {}</title></circle>)", x, yy,
                         2.0 + 8.0 * std::sqrt(static_cast<double>(b.count) / total), colour, b.count, Num(b.meanProbability), Num(b.observed));
    }
    svg += fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="1.5"/>)", points, colour);
    const auto& pooled = r.learners[l].summary.pooled;
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="11" fill="{}">{} (Brier {})</text>)", size - 10, pad + 14 + 16 * static_cast<int>(l), colour,
                       Escape(r.learners[l].outcome.label), Num(pooled.count("brier") ? pooled.at("brier") : NAN));
  }
  svg += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="middle">predicted probability of {}</text>)", pad + plot / 2, size - 4, Escape(r.positiveClass));
  svg += fmt::format(R"(<text x="10" y="{}" font-size="11" transform='rotate(-90 10 {})' text-anchor="middle">observed share of {}</text></svg>)", pad + plot / 2, pad + plot / 2, Escape(r.positiveClass));
  return svg;
}

/// Brain-age gap (prediction - target) against the target, before (grey) and after (colour) the bias
/// correction, with both least-squares slopes. Empty without corrected predictions.
std::string GapChart(const LearnerRecord& lr, const RunRecord& r, const char* colour) {
  std::vector<double> y, g, gc;
  for (const auto& fold : lr.outcome.folds)
    if (fold.repeat == 0 && fold.corrected.size() > 0)
      for (std::size_t i = 0; i < fold.test.size(); ++i) {
        const auto ii = static_cast<Eigen::Index>(i);
        if (!std::isfinite(fold.decision[ii]) || !std::isfinite(fold.corrected[ii])) continue;
        const double t = r.targets[static_cast<std::size_t>(fold.test[i])];
        y.push_back(t);
        g.push_back(fold.decision[ii] - t);
        gc.push_back(fold.corrected[ii] - t);
      }
  if (y.empty()) return "";
  const int size = 300, pad = 40, plot = size - 2 * pad;
  double xlo = 1e300, xhi = -1e300, lo = 1e300, hi = -1e300;
  for (double v : y) xlo = std::min(xlo, v), xhi = std::max(xhi, v);
  for (double v : g) lo = std::min(lo, v), hi = std::max(hi, v);
  for (double v : gc) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!(xhi > xlo)) xhi = xlo + 1;
  if (!(hi > lo)) hi = lo + 1;
  auto X = [&](double v) { return pad + plot * (v - xlo) / (xhi - xlo); };
  auto Y = [&](double v) { return pad + plot * (1 - (v - lo) / (hi - lo)); };
  std::string svg = fmt::format(R"(<svg class="figure" role="img" aria-label="gap vs true target" width="{}" height="{}" viewBox="0 0 {} {}">)", size, size, size, size);
  svg += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#888"/>)", pad, pad, plot, plot);
  if (lo < 0 && hi > 0) svg += fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#bbb" stroke-dasharray="4 3"/>)", pad, Y(0), pad + plot, Y(0));
  svg += XTicks(Ticks(xlo, xhi, 4), X, pad + plot);
  svg += YTicks(Ticks(lo, hi, 4), Y, pad);
  for (std::size_t i = 0; i < y.size(); ++i) {
    svg += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="2.5" fill="#999" fill-opacity="0.6"/>)", X(y[i]), Y(g[i]));
    svg += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="2.5" fill="{}" fill-opacity="0.75"/>)", X(y[i]), Y(gc[i]), colour);
  }
  const auto& pooled = lr.summary.pooled;
  auto get = [&](const char* k) { return pooled.count(k) ? pooled.at(k) : NAN; };
  svg += fmt::format(R"(<text x="{}" y="14" font-size="12">{}: gap slope {} (grey) &#8594; {} corrected</text>)", pad, Escape(lr.outcome.label),
                     Num(get("gap_slope")), Num(get("corrected_gap_slope")));
  svg += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="middle">true target</text>)", pad + plot / 2, size - 4);
  svg += fmt::format(R"(<text x="10" y="{}" font-size="11" transform='rotate(-90 10 {})' text-anchor="middle">gap = prediction - target</text></svg>)", pad + plot / 2, pad + plot / 2);
  return svg;
}

/// The pooled confusion matrix (rows: true class, columns: predicted), cells shaded by their share
/// of the true class.
std::string ConfusionMatrix(const LearnerRecord& lr, const RunRecord& r) {
  auto get = [&](const char* k) { return lr.summary.pooled.count(k) ? lr.summary.pooled.at(k) : NAN; };
  const double cells[2][2] = {{get("true_positive"), get("false_negative")}, {get("false_positive"), get("true_negative")}};
  const std::string names[2] = {r.positiveClass, r.negativeClass};
  const int cell = 70, left = 110, top = 40, width = left + 2 * cell + 20, height = top + 2 * cell + 40;
  std::string svg = fmt::format(R"(<svg class="figure" role="img" aria-label="confusion matrix" width="{}" height="{}" viewBox="0 0 {} {}">)", width, height, width, height);
  svg += fmt::format(R"(<text x="{}" y="14" font-size="11" text-anchor="middle">predicted class</text>)", left + cell);
  for (int j = 0; j < 2; ++j)
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="10" text-anchor="middle">{}</text>)", left + cell * j + cell / 2, top - 6, Escape(names[j]));
  for (int i = 0; i < 2; ++i) {
    const double rowTotal = cells[i][0] + cells[i][1];
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="10" text-anchor="end">true {}</text>)", left - 6, top + cell * i + cell / 2 + 4, Escape(names[i]));
    for (int j = 0; j < 2; ++j) {
      const double share = rowTotal > 0 ? cells[i][j] / rowTotal : 0;
      const int shade = static_cast<int>(std::lround(255 - 180 * share));
      svg += fmt::format(R"svg(<rect x="{}" y="{}" width="{}" height="{}" fill="rgb({},{},255)" stroke="#fff"/><text x="{}" y="{}" font-size="13" text-anchor="middle">{}</text><text x="{}" y="{}" font-size="9" text-anchor="middle" fill="#333">{:.0f} %</text>)svg",
                         left + cell * j, top + cell * i, cell, cell, shade, shade, left + cell * j + cell / 2, top + cell * i + cell / 2,
                         std::isfinite(cells[i][j]) ? fmt::format("{:.0f}", cells[i][j]) : "&ndash;", left + cell * j + cell / 2, top + cell * i + cell / 2 + 15, 100 * share);
    }
  }
  svg += fmt::format(R"(<text x="{}" y="{}" font-size="10" fill="#555">{}: pooled out-of-fold predictions</text></svg>)", 4, height - 8, Escape(lr.outcome.label));
  return svg;
}

/// Multiclass: the pooled k x k confusion matrix (rows: true class, columns: predicted), cells shaded
/// by their share of the true class.
std::string MulticlassConfusion(const LearnerRecord& lr, const RunRecord& r) {
  const auto k = static_cast<int>(r.classNames.size());
  const int cell = std::max(36, 210 / std::max(k, 1)), left = 110, top = 40, width = left + k * cell + 20, height = top + k * cell + 40;
  std::string svg = fmt::format(R"(<svg class="figure" role="img" aria-label="confusion matrix" width="{}" height="{}" viewBox="0 0 {} {}">)", width, height, width, height);
  svg += fmt::format(R"(<text x="{}" y="14" font-size="11" text-anchor="middle">predicted class</text>)", left + k * cell / 2);
  auto value = [&](int i, int j) {
    const std::string key = "confusion_" + r.classNames[static_cast<std::size_t>(i)] + "_" + r.classNames[static_cast<std::size_t>(j)];
    return lr.summary.pooled.count(key) ? lr.summary.pooled.at(key) : NAN;
  };
  for (int j = 0; j < k; ++j)
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="10" text-anchor="middle">{}</text>)", left + cell * j + cell / 2, top - 6, Escape(r.classNames[static_cast<std::size_t>(j)]));
  for (int i = 0; i < k; ++i) {
    double rowTotal = 0;
    for (int j = 0; j < k; ++j) rowTotal += std::isfinite(value(i, j)) ? value(i, j) : 0;
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="10" text-anchor="end">true {}</text>)", left - 6, top + cell * i + cell / 2 + 4, Escape(r.classNames[static_cast<std::size_t>(i)]));
    for (int j = 0; j < k; ++j) {
      const double v = value(i, j), share = rowTotal > 0 && std::isfinite(v) ? v / rowTotal : 0;
      const int shade = static_cast<int>(std::lround(255 - 180 * share));
      svg += fmt::format(R"svg(<rect x="{}" y="{}" width="{}" height="{}" fill="rgb({},{},255)" stroke="#fff"/><text x="{}" y="{}" font-size="12" text-anchor="middle">{}</text>)svg",
                         left + cell * j, top + cell * i, cell, cell, shade, shade, left + cell * j + cell / 2, top + cell * i + cell / 2 + 4,
                         std::isfinite(v) ? fmt::format("{:.0f}", v) : "&ndash;");
    }
  }
  svg += fmt::format(R"(<text x="{}" y="{}" font-size="10" fill="#555">{}: pooled out-of-fold predictions</text></svg>)", 4, height - 8, Escape(lr.outcome.label));
  return svg;
}

/// Multiclass: one-vs-rest ROC curve of every class (its score column against the rest), first repetition.
std::string PerClassRoc(const LearnerRecord& lr, const RunRecord& r) {
  const int size = 320, pad = 40, plot = size - 2 * pad;
  std::string svg = UnitSquareFrame("per-class ROC curves", size, pad, size + 150);
  for (std::size_t c = 0; c < r.classNames.size(); ++c) {
    std::vector<double> y, f;
    for (const auto& fold : lr.outcome.folds)
      if (fold.repeat == 0 && fold.scores.cols() > static_cast<Eigen::Index>(c))
        for (std::size_t i = 0; i < fold.test.size(); ++i)
          if (fold.scores.row(static_cast<Eigen::Index>(i)).allFinite()) {
            y.push_back(r.targets[static_cast<std::size_t>(fold.test[i])] == static_cast<double>(c) ? 1.0 : -1.0);
            f.push_back(fold.scores(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(c)));
          }
    const std::string points = RocPoints(y, f, pad, plot);
    if (points.empty()) continue;
    const char* colour = kColours[c % 8];
    const std::string key = "auc_" + r.classNames[c];
    svg += fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>)", points, colour);
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="11" fill="{}">{} (AUC {})</text>)", size - 10, pad + 14 + 16 * static_cast<int>(c), colour,
                       Escape(r.classNames[c]), Num(lr.summary.pooled.count(key) ? lr.summary.pooled.at(key) : NAN));
  }
  svg += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="middle">{}: false positive rate (class vs rest)</text>)", pad + plot / 2, size - 4, Escape(lr.outcome.label));
  svg += fmt::format(R"(<text x="10" y="{}" font-size="11" transform='rotate(-90 10 {})' text-anchor="middle">true positive rate</text></svg>)", pad + plot / 2, pad + plot / 2);
  return svg;
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
  const int bins = 20, width = 360, height = 200, left = 40, right = 14, top = 24, base = 160;
  const double binWidth = (hi - lo) / bins;
  std::vector<int> counts(bins, 0);
  for (double v : values) ++counts[static_cast<std::size_t>(std::min(bins - 1, static_cast<int>((v - lo) / binWidth)))];
  const int maxCount = *std::max_element(counts.begin(), counts.end());
  auto X = [&](double v) { return left + (width - left - right) * (v - lo) / (hi - lo); };
  auto Y = [&](double c) { return base - (base - top) * c / std::max(1, maxCount); };
  std::string svg = fmt::format(R"(<svg class="figure" role="img" aria-label="permutation null distribution" width="{}" height="{}" viewBox="0 0 {} {}">)", width, height, width, height);
  for (int b = 0; b < bins; ++b)
    if (counts[static_cast<std::size_t>(b)] > 0)
      svg += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="#bab0ac"/>)", X(lo + b * binWidth), Y(counts[static_cast<std::size_t>(b)]),
                         std::max(1.0, X(lo + (b + 1) * binWidth) - X(lo + b * binWidth) - 1), base - Y(counts[static_cast<std::size_t>(b)]));
  svg += fmt::format(R"(<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#888"/><line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#888"/>)", left, width - right, base, base, left, left, top, base);
  svg += XTicks(Ticks(lo, hi, 4), X, base);
  svg += YTicks(Ticks(0, maxCount, 3), Y, left);
  svg += fmt::format(R"(<line x1="{0:.1f}" x2="{0:.1f}" y1="{1}" y2="{2}" stroke="#d62728" stroke-width="2"/><text x="{0:.1f}" y="{3}" font-size="10" fill="#d62728" text-anchor="middle">observed {4:.3g}</text>)",
                     X(observed), top - 4, base, top - 8, observed);
  const double p = lr.permutations.pValues.count(metric) ? lr.permutations.pValues.at(metric) : NAN;
  svg += fmt::format(R"(<text x="{}" y="{}" font-size="10" text-anchor="middle">{}: {} {} permuted targets, p = {:.3g}</text></svg>)",
                     (left + width - right) / 2, height - 8, Escape(lr.outcome.label), Escape(metric), values.size(), p);
  return svg;
}

/// The montages' colour scale: blue (negative) through the background to red (positive), to +-vmax.
std::string ColourBar(double vmax) {
  const int width = 300, height = 46, left = 20, barW = 260;
  std::string svg = fmt::format(R"(<svg class="figure" role="img" aria-label="colour bar" width="{}" height="{}" viewBox="0 0 {} {}">)", width, height, width, height);
  svg += R"svg(<defs><linearGradient id="weightScale"><stop offset="0" stop-color="rgb(30,120,255)"/><stop offset="0.5" stop-color="rgb(130,130,130)"/><stop offset="1" stop-color="rgb(255,70,20)"/></linearGradient></defs>)svg";
  svg += fmt::format(R"svg(<rect x="{}" y="4" width="{}" height="12" fill="url(#weightScale)"/>)svg", left, barW);
  svg += XTicks({-vmax, 0.0, vmax}, [&](double v) { return left + barW * (v + vmax) / (2 * vmax); }, 16);
  svg += fmt::format(R"(<text x="{}" y="{}" font-size="9" text-anchor="middle">voxel weight w (decision units per unit image intensity); saturates at the 99th percentile of |w|</text></svg>)",
                     width / 2, height - 2);
  return svg;
}

/// Per outer fold: chosen parameters, inner score, fit status and iterations; the status counts.
std::string FitTable(const LearnerRecord& lr) {
  const std::map<std::string, int> counts = cv::FoldStatusCounts(lr.outcome);
  std::vector<std::string> parts;
  for (const auto& [status, count] : counts) parts.push_back(fmt::format("{} {}", count, status));
  const bool allConverged = counts.size() == 1 && counts.count("converged");
  bool platt = false, bias = false;
  for (const auto& f : lr.outcome.folds) {
    platt |= f.probability.size() > 0;
    bias |= f.corrected.size() > 0;
  }
  std::string h = fmt::format("<p class=\"note\"><b>{}</b>: outer folds {}{}.</p>\n<table><tr><th>fold</th><th>chosen parameters</th><th>inner score</th><th>status</th><th>iterations</th><th>regions selected</th>{}{}</tr>\n",
                              Escape(lr.outcome.label), Join(parts, ", "), allConverged ? "" : " &mdash; <b>not every fit converged: read the warnings below</b>",
                              platt ? "<th>Platt A</th><th>Platt B</th>" : "", bias ? "<th>bias slope</th><th>bias offset</th>" : "");
  for (const auto& f : lr.outcome.folds) {
    std::vector<std::string> chosen;
    for (const auto& [k, v] : lr.outcome.grid[f.chosen])
      if (std::find(lr.searched.begin(), lr.searched.end(), k) != lr.searched.end()) chosen.push_back(k + " = " + FormatDouble(v));
    const std::string status = cv::FoldStatus(f);
    std::string extra;
    if (platt) extra += fmt::format("<td class=\"num\">{}</td><td class=\"num\">{}</td>", Num(f.platt.Valid() ? f.platt.a : NAN), Num(f.platt.Valid() ? f.platt.b : NAN));
    if (bias) extra += fmt::format("<td class=\"num\">{}</td><td class=\"num\">{}</td>", Num(f.bias.Valid() ? f.bias.slope : NAN), Num(f.bias.Valid() ? f.bias.offset : NAN));
    h += fmt::format("<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td{}>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>{}</tr>\n",
                     f.repeat > 0 ? fmt::format("{} (repeat {})", f.index, f.repeat) : std::to_string(f.index), chosen.empty() ? "fixed" : Escape(Join(chosen, ", ")),
                     Num(f.innerScores.empty() ? NAN : f.innerScores[f.chosen]), status == "converged" ? "" : " style=\"background:#fdd\"", status,
                     f.model.info.iterations, (f.model.beta.array() > 0).count(), extra);
  }
  return h + "</table>\n";
}

/// Axial slices of a voxel map over a grey background, neurological convention (left on the left,
/// anterior up), red = positive weight, blue = negative.
std::string Montage(const std::vector<float>& map, const std::vector<float>& background, const io::Geometry& g) {
  const auto W = g.dims[0], H = g.dims[1], Z = g.dims[2];
  const auto affine = g.RasAffine();
  const bool flipX = affine[0] < 0, flipY = affine[5] > 0;  // RAS: x grows to the right, y grows upwards
  std::vector<double> mags;
  for (float v : map)
    if (v != 0.0f && std::isfinite(v)) mags.push_back(std::abs(v));
  if (mags.empty()) return "<p>(the mean weight map is zero everywhere)</p>";
  std::sort(mags.begin(), mags.end());
  const double vmax = mags[static_cast<std::size_t>(0.99 * static_cast<double>(mags.size() - 1))];
  double bgMax = 1e-12;
  for (float b : background) bgMax = std::max(bgMax, static_cast<double>(b));
  std::int64_t zLo = Z, zHi = -1;
  for (std::int64_t z = 0; z < Z; ++z)
    for (std::int64_t i = 0; i < W * H; ++i)
      if (background[static_cast<std::size_t>(z * W * H + i)] > 0) {
        zLo = std::min(zLo, z);
        zHi = std::max(zHi, z);
        break;
      }
  if (zHi < zLo) zLo = 0, zHi = Z - 1;
  const int slices = 10, cols = 5, rows = 2;
  const int scale = std::max<int>(1, static_cast<int>(std::lround(170.0 / static_cast<double>(std::max(W, H)))));
  const int tileW = static_cast<int>(W) * scale, tileH = static_cast<int>(H) * scale;
  const int width = cols * tileW, height = rows * tileH;
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * 3, 0);
  std::vector<double> zMm;
  for (int s = 0; s < slices; ++s) {
    const std::int64_t z = zLo + (zHi - zLo) * (s + 1) / (slices + 1);
    zMm.push_back(g.IndexToLps({0, 0, static_cast<double>(z)})[2]);
    const int ox = (s % cols) * tileW, oy = (s / cols) * tileH;
    for (int py = 0; py < tileH; ++py)
      for (int px = 0; px < tileW; ++px) {
        std::int64_t i = px / scale, j = py / scale;
        if (flipX) i = W - 1 - i;
        if (flipY) j = H - 1 - j;
        const std::size_t v = static_cast<std::size_t>(g.Linear(i, j, z));
        const double grey = background[v] > 0 ? 30.0 + 200.0 * background[v] / bgMax : 0.0;
        double r = grey, gg = grey, b = grey;
        const double w = map[v];
        if (w != 0.0 && std::isfinite(w)) {
          const double a = std::min(1.0, std::abs(w) / vmax);
          const double cr = w > 0 ? 255 : 30, cg = w > 0 ? 70 : 120, cb = w > 0 ? 20 : 255;
          r = (1 - a) * grey + a * cr, gg = (1 - a) * grey + a * cg, b = (1 - a) * grey + a * cb;
        }
        const std::size_t p = (static_cast<std::size_t>(oy + py) * static_cast<std::size_t>(width) + static_cast<std::size_t>(ox + px)) * 3;
        rgb[p] = static_cast<std::uint8_t>(r);
        rgb[p + 1] = static_cast<std::uint8_t>(gg);
        rgb[p + 2] = static_cast<std::uint8_t>(b);
      }
  }
  std::vector<std::string> zs;
  for (double z : zMm) zs.push_back(fmt::format("{:.0f}", z));
  return fmt::format(R"(<img class="montage" alt="mean weight map, axial slices" width="{}" height="{}" src="data:image/png;base64,{}"><br>)", width, height,
                     Base64(EncodePng(width, height, rgb))) +
         ColourBar(vmax) +
         fmt::format(R"(<p class="note">Axial slices at z = {} mm (MNI), left to right, top to bottom; subject's left on the left, anterior up. Red: positive weight (towards the positive class / higher target), blue: negative; opacity ~ |w| up to its 99th percentile ({:.3g}).</p>)",
                     Join(zs, ", "), vmax);
}

std::vector<float> Background(const atlas::RegionIndex& regions) {
  const std::string path = atlas::DataDir() + "/atlases/templates/mni_icbm152_gm_tal_nlin_sym_09a_converted.nii.gz";
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    const io::Volume t = io::ReadVolume(path);
    return atlas::ResampleNearest(t.geometry, t.data, regions.grid);
  }
  std::vector<float> bg(static_cast<std::size_t>(regions.grid.VoxelCount()), 0.0f);
  for (const auto& r : regions.regions)
    for (auto v : r.voxels) bg[static_cast<std::size_t>(v)] = 1.0f;
  return bg;
}

/// A connectivity source's strongest connections (largest absolute mean weight) as a table.
std::string EdgeTable(const WeightMaps::Edges& e, const Eigen::MatrixXd& mean, const std::string& learner, std::size_t top) {
  struct Edge {
    Eigen::Index a, b;
    double w;
  };
  std::vector<Edge> edges;
  for (Eigen::Index a = 0; a < mean.rows(); ++a)
    for (Eigen::Index b = a + 1; b < mean.cols(); ++b) edges.push_back({a, b, mean(a, b)});
  std::stable_sort(edges.begin(), edges.end(), [](const Edge& x, const Edge& y) { return std::abs(x.w) > std::abs(y.w); });
  std::string h = "<p class=\"note\">Source <b>" + Escape(e.name) + "</b> (connectivity): the " + std::to_string(std::min(top, edges.size())) +
                  " connections with the largest mean weight (sign: direction of the effect on the decision value); all in <code>weights/" +
                  Escape(e.name) + "/edges_" + Escape(learner) + ".tsv</code>.</p>\n<table><tr><th>#</th><th>node</th><th>node</th>" +
                  (e.networks.empty() ? "" : "<th>networks</th>") + "<th>mean weight</th></tr>\n";
  for (std::size_t r = 0; r < edges.size() && r < top; ++r) {
    const auto a = static_cast<std::size_t>(edges[r].a), b = static_cast<std::size_t>(edges[r].b);
    h += "<tr><td>" + std::to_string(r + 1) + "</td><td>" + Escape(e.nodes[a]) + "</td><td>" + Escape(e.nodes[b]) + "</td>" +
         (e.networks.empty() ? "" : "<td>" + Escape(e.networks[a]) + " &ndash; " + Escape(e.networks[b]) + "</td>") + "<td>" +
         fmt::format("{:.4g}", edges[r].w) + "</td></tr>\n";
  }
  return h + "</table>\n";
}

}  // namespace

std::string RenderReport(const RunRecord& r, const std::vector<std::vector<float>>& meanMaps, const atlas::RegionIndex* regions, const WeightMaps* maps) {
  const bool classification = r.task == "classification", multiclass = r.task == "multiclass";
  std::string h;
  h += "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>neuromkl: " + Escape(r.study) + "</title>\n";
  h += R"(<style>body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{margin-bottom:0}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left;font-size:.92em}th{background:#f5f5f5}.num{text-align:right;font-variant-numeric:tabular-nums}
.figs{display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start}.note{color:#555;font-size:.88em;max-width:900px}.montage{image-rendering:pixelated;border:1px solid #ccc}</style></head>
<body>
)";
  h += "<h1>" + Escape(r.study) + "</h1>\n";
  if (!r.description.empty()) h += "<p>" + Escape(r.description) + "</p>\n";
  h += "<h2>Study</h2>\n<table>\n";
  auto row = [&](const std::string& k, const std::string& v) { h += "<tr><th>" + k + "</th><td>" + v + "</td></tr>\n"; };
  row("task", Escape(r.task) + " of <code>" + Escape(r.targetColumn) + "</code>" +
                  (classification ? " (positive class <code>" + Escape(r.positiveClass) + "</code>, negative <code>" + Escape(r.negativeClass) + "</code>)" : "") +
                  (multiclass ? " (classes <code>" + Escape(Join(r.classNames, ", ")) + "</code>; kernel weights " + Escape(r.multiclassWeights) + ")" : ""));
  row("subjects", fmt::format("{} used, {} excluded (no target)", r.labelledSubjects.size(), r.excludedSubjects.size()));
  row("kernels", fmt::format("{} ({}), {} excluded; {}centred, {}normalised per fold on training subjects", r.kernels.size(), Escape(r.kernelSource),
                             r.excludedKernels.size(), r.centre ? "" : "not ", r.normalise ? "" : "not "));
  if (!r.atlas.empty()) row("atlas", Escape(r.atlas) + (r.mask.empty() ? "" : ", mask " + Escape(r.mask)));
  if (r.outsideAtlasShare >= 0)
    row("coverage", fmt::format("{:.1f} % of the images' non-zero voxel values lie outside the atlas regions (for lesion or other sparse maps: "
                                "signal that no region sees)",
                                100 * r.outsideAtlasShare));
  if (!r.intensityScaling.empty()) {
    const auto [lo, hi] = std::minmax_element(r.intensityScale.begin(), r.intensityScale.end());
    row("intensity scaling", fmt::format("each image divided by its own {} (divisors {:.4g} to {:.4g})", Escape(r.intensityScaling), *lo, *hi));
  }
  if (!r.sourceNames.empty()) {
    std::vector<std::string> parts;
    for (std::size_t s = 0; s < r.sourceNames.size(); ++s) {
      std::string part = fmt::format("<code>{}</code> ({}, {} kernels", Escape(r.sourceNames[s]), Escape(r.sourceKinds[s]), r.sourceKernelCounts[s]);
      std::size_t first = 0;
      for (std::size_t t = 0; t < s; ++t) first += r.sourceKernelCounts[t];
      for (const auto& lr : r.learners) {
        double mean = 0;
        for (const auto& row : lr.regions)
          if (row.kernel >= first && row.kernel < first + r.sourceKernelCounts[s]) mean += row.meanPercent;
        part += fmt::format("; {} {:.1f} %", Escape(lr.outcome.label), mean);
      }
      parts.push_back(part + ")");
    }
    row("sources", Join(parts, ", ") + " &mdash; total kernel weight per source, mean over outer folds; a source with more kernels tends to collect more weight");
  }
  if (!r.covariateColumns.empty())
    row("covariates", fmt::format("regressed out of every kernel inside every fold (training subjects: {}): {}; the target's R<sup>2</sup> on them is "
                                  "{:.3f}{}",
                                  Escape(r.covariateFitOn), Escape(Join(r.covariateColumns, ", ")), r.covariateTargetR2,
                                  r.covariateTargetR2 > 0.1 ? " (the design is confounded: regions that track the covariates would otherwise carry weight)" : ""));
  row("cross-validation", "outer " + Escape(r.outerScheme) + "; inner " + Escape(r.innerScheme) + fmt::format("; seed {}", r.cvSeed));
  row("run", fmt::format("neuromkl {}, {}, seed {}, input hash <code>{}</code>, {:.1f} s", Escape(r.version), Escape(r.date), r.seed, r.inputHash,
                         r.seconds.count("total") ? r.seconds.at("total") : 0.0));
  h += "</table>\n";

  h += "<h2>Performance</h2>\n<p class=\"note\">Pooled over all out-of-fold predictions; fold mean &plusmn; SD over outer folds";
  if (!r.learners.empty() && r.learners[0].permutations.count > 0)
    h += fmt::format("; p from {} permutations of the targets (whole nested CV rerun each time), (count + 1) / (N + 1)", r.learners[0].permutations.count);
  h += ".</p>\n<table><tr><th>learner</th>";
  std::vector<std::pair<std::string, std::string>> classMetrics = {{"balanced_accuracy", "macro balanced accuracy"}, {"macro_auc", "macro AUC"},
                                                                   {"kappa", "Cohen's kappa"}, {"accuracy", "accuracy"}};
  for (const auto& c : r.classNames) classMetrics.emplace_back("recall_" + c, "recall " + Escape(c));
  std::vector<std::pair<std::string, std::string>> metrics =
      multiclass ? classMetrics : classification ? std::vector<std::pair<std::string, std::string>>{{"balanced_accuracy", "balanced accuracy"}, {"auc", "AUC"}, {"accuracy", "accuracy"},
                                                                       {"recall_positive", "sensitivity"}, {"recall_negative", "specificity"}}
                     : std::vector<std::pair<std::string, std::string>>{{"pearson_r", "Pearson r"}, {"r2", "R&#178; (coef. of determination)"},
                                                                       {"mse", "MSE"}, {"mae", "MAE"}, {"nmse", "normalised MSE"}};
  const bool withBrier = !r.learners.empty() && r.learners[0].summary.pooled.count("brier");
  const bool withCorrection = !r.learners.empty() && r.learners[0].summary.pooled.count("corrected_mae");
  if (withBrier) metrics.insert(metrics.end(), {{"brier", "Brier score"}, {"log_loss", "log-loss"}});
  if (withCorrection)
    metrics.insert(metrics.end(), {{"corrected_mae", "MAE corrected"}, {"gap_slope", "gap slope"}, {"corrected_gap_slope", "gap slope corrected"}});
  for (const auto& [_, label] : metrics) h += "<th>" + label + "</th>";
  h += "</tr>\n";
  for (const auto& lr : r.learners) {
    h += "<tr><td>" + Escape(lr.outcome.label) + "</td>";
    for (const auto& [key, _] : metrics) {
      const auto& s = lr.summary;
      std::string cell = Num(s.pooled.count(key) ? s.pooled.at(key) : NAN);
      if (s.foldMean.count(key)) cell += fmt::format(" <span class=\"note\">({} &plusmn; {})</span>", Num(s.foldMean.at(key)), Num(s.foldSd.count(key) ? s.foldSd.at(key) : NAN));
      if (lr.permutations.pValues.count(key)) cell += fmt::format(" <b>p = {:.3g}</b>", lr.permutations.pValues.at(key));
      h += "<td class=\"num\">" + cell + "</td>";
    }
    h += "</tr>\n";
  }
  h += "</table>\n<div class=\"figs\">";
  if (multiclass) {
    for (const auto& lr : r.learners) h += MulticlassConfusion(lr, r) + PerClassRoc(lr, r);
  } else if (classification) {
    h += RocChart(r);
    for (const auto& lr : r.learners) h += ConfusionMatrix(lr, r);
  } else {
    for (std::size_t l = 0; l < r.learners.size(); ++l) h += ScatterChart(r.learners[l], r, kColours[l % 8]);
  }
  h += "</div>\n";
  if (withBrier) {
    // The reference a probability must beat: always predicting the prevalence p gives Brier p (1 - p).
    double pos = 0;
    for (double t : r.targets) pos += t > 0 ? 1 : 0;
    const double prevalence = r.targets.empty() ? NAN : pos / static_cast<double>(r.targets.size());
    h += fmt::format("<h2>Calibration</h2>\n<p class=\"note\">Probabilities of <code>{}</code> by Platt scaling, fitted in each outer fold on the "
                     "inner-CV out-of-fold decision values of its training subjects (coefficients per fold in results.json). Predicting the "
                     "prevalence ({}) for everyone scores Brier {}; lower is better.</p>\n<div class=\"figs\">",
                     Escape(r.positiveClass), Num(prevalence), Num(prevalence * (1 - prevalence)));
    h += ReliabilityChart(r) + "</div>\n";
  }
  if (withCorrection) {
    h += "<h2>Bias correction</h2>\n<p class=\"note\">Predictions corrected per outer fold with prediction = a target + b fitted on the "
         "inner-CV out-of-fold predictions of its training subjects, corrected = (prediction - b) / a (coefficients per fold in results.json); "
         "without it, the gap (prediction - target) falls with the target (regression to the mean).</p>\n<div class=\"figs\">";
    for (std::size_t l = 0; l < r.learners.size(); ++l) h += GapChart(r.learners[l], r, kColours[l % 8]);
    h += "</div>\n";
  }
  if (r.permutations > 0) {
    const std::string metric = classification || multiclass ? "balanced_accuracy" : "pearson_r";
    h += "<h2>Permutation test</h2>\n<p class=\"note\">The whole nested cross-validation rerun on permuted targets; the red line is the "
         "value on the real targets. Every metric's null distribution: <code>null_distribution.tsv</code>.</p>\n<div class=\"figs\">";
    for (const auto& lr : r.learners) h += NullHistogram(lr, metric);
    h += "</div>\n";
  }
  h += "<h2>Fits and chosen parameters</h2>\n<p class=\"note\">Parameters chosen by the inner cross-validation on each outer training set "
       "(score: mean over inner folds of " + std::string(!r.innerCriterion.empty() ? r.innerCriterion : classification ? "balanced accuracy" : multiclass ? "macro balanced accuracy" : "MSE") + "), and how each outer refit ended.</p>\n";
  for (const auto& lr : r.learners) h += FitTable(lr);

  std::vector<float> background;
  if (regions) background = Background(*regions);
  for (std::size_t l = 0; l < r.learners.size(); ++l) {
    const auto& lr = r.learners[l];
    h += "<h2>Regions: " + Escape(lr.outcome.label) + "</h2>\n<p class=\"note\">" + Escape(lr.regionSource) +
         ". Table: <code>regions_" + Escape(lr.outcome.label) + ".tsv</code>" + (lr.meanMap.empty() ? "" : "; map: <code>" + Escape(lr.meanMap) + "</code>") + ".</p>\n";
    h += "<div class=\"figs\">" + TopRegionsChart(lr, r, 15) + SelectedCountsChart(lr, r.kernels.size()) + "</div>\n";
    if (regions && l < meanMaps.size() && !meanMaps[l].empty()) h += Montage(meanMaps[l], background, regions->grid);
    if (regions && maps && l < maps->patternMean.size() && !maps->patternMean[l].empty()) {
      h += "<p class=\"note\">Activation pattern (Haufe et al. 2014): how the images covary with the decision value, "
           "<code>" + Escape(lr.patternMean) + "</code>; regions ranked by it in <code>regions_" + Escape(lr.outcome.label) +
           "_pattern.tsv</code>. A region with large weights but no pattern suppresses noise rather than carrying the effect.</p>\n";
      h += Montage(maps->patternMean[l], background, regions->grid);
    }
    const std::vector<std::string> classParts = ClassFileParts(r.classNames);
    for (std::size_t c = 0; c < lr.classRegions.size() && c < r.classNames.size(); ++c) {
      LearnerRecord one;
      one.regions = lr.classRegions[c];
      h += "<h3>" + Escape(lr.outcome.label) + ", class " + Escape(r.classNames[c]) + " vs rest</h3>\n<p class=\"note\">Table: <code>regions_" +
           Escape(lr.outcome.label) + "_class-" + Escape(classParts[c]) + ".tsv</code>.</p>\n<div class=\"figs\">" + TopRegionsChart(one, r, 15) + "</div>\n";
    }
    if (maps)
      for (const auto& src : maps->sources) {
        const auto it = std::find_if(lr.sourceMaps.begin(), lr.sourceMaps.end(), [&](const auto& m) { return m.source == src.name; });
        if (it == lr.sourceMaps.end() || l >= src.mean.size() || src.mean[l].empty()) continue;
        h += "<p class=\"note\">Source <b>" + Escape(src.name) + "</b>: map <code>" + Escape(it->mean) + "</code>.</p>\n";
        h += Montage(src.mean[l], Background(*src.regions), src.regions->grid);
      }
    if (maps)
      for (const auto& e : maps->edges) {
        if (l >= e.mean.size() || e.mean[l].size() == 0) continue;
        h += EdgeTable(e, e.mean[l], lr.outcome.label, 10);
      }
  }
  if (!r.warnings.empty()) {
    h += "<h2>Warnings</h2><ul>";
    for (const auto& w : r.warnings) h += "<li>" + Escape(w) + "</li>";
    h += "</ul>\n";
  }
  // A check the browser test reads: how many figures rendered (images decoded, SVGs with a size).
  h += R"(<script>window.addEventListener('load',function(){var ok=0,bad=0,imgs=document.images,svgs=document.querySelectorAll('svg.figure');
for(var i=0;i<imgs.length;i++){if(imgs[i].complete&&imgs[i].naturalWidth>0)ok++;else bad++;}
for(var j=0;j<svgs.length;j++){var b=svgs[j].getBBox();if(b.width>0&&b.height>0)ok++;else bad++;}
document.body.setAttribute('data-figures',imgs.length+svgs.length);document.body.setAttribute('data-figures-ok',ok);document.body.setAttribute('data-figures-bad',bad);});</script>
</body></html>
)";
  return h;
}

}  // namespace neuromkl::exporting
