// The report's figures and tables of the fits, the regions and the maps: the per-fold fit table, the top
// regions and selected-count charts, slice montages of voxel maps with their colour bar, strongest connections.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "neuromkl/core/strings.hpp"
#include "neuromkl/export/png.hpp"
#include "neuromkl/io/nifti.hpp"
#include "report_parts.hpp"

namespace neuromkl::exporting::report {

namespace {

/// The montages' colour scale: blue (negative) through the background to red (positive), to +-vmax, with
/// what the colours are in two lines under it.
std::string ColourBar(double vmax, MapKind kind) {
  const std::string quantity = kind == MapKind::Pattern ? "activation pattern a = Cov(x, f) / Var(f) over training subjects"
                                                        : "voxel weight w (decision units per unit image intensity)";
  const std::string saturation = kind == MapKind::Pattern ? "colours saturate at the 99th percentile of |a|" : "colours saturate at the 99th percentile of |w|";
  // The end ticks are centred on the bar's ends: the bar starts half a label in.
  const int barW = 260, left = std::max(20, static_cast<int>(std::ceil(TextWidth(TickLabel(-vmax), 9) / 2)) + 4);
  const int width = std::max({left + barW + left, WidthFor({quantity, saturation}, 9, 0)}), height = 58;
  std::string svg = fmt::format(R"(<svg class="figure" role="img" aria-label="colour bar" width="{}" height="{}" viewBox="0 0 {} {}">)", width, height, width, height);
  svg += R"svg(<defs><linearGradient id="weightScale"><stop offset="0" stop-color="rgb(30,120,255)"/><stop offset="0.5" stop-color="rgb(130,130,130)"/><stop offset="1" stop-color="rgb(255,70,20)"/></linearGradient></defs>)svg";
  svg += fmt::format(R"svg(<rect x="{}" y="4" width="{}" height="12" fill="url(#weightScale)"/>)svg", left, barW);
  svg += XTicks({-vmax, 0.0, vmax}, [&](double v) { return left + barW * (v + vmax) / (2 * vmax); }, 16);
  svg += fmt::format(R"(<text x="0" y="{}" font-size="9">{}</text><text x="0" y="{}" font-size="9">{}</text></svg>)", height - 15, quantity, height - 4,
                     saturation);
  return svg;
}

}  // namespace

/// Horizontal bars: top regions' mean weight (%) with +- 1 SD over folds. With permutation p-values (`significance`,
/// kernel order), regions with p_FWE <= 0.05 are drawn darker and marked "*".
std::string TopRegionsChart(const std::vector<weights::RegionRow>& regions, const RunRecord& r, std::size_t top, const metrics::FamilyPValues* significance) {
  const std::size_t n = std::min(top, regions.size());
  if (significance && significance->familyWise.empty()) significance = nullptr;
  const auto significant = [&](std::size_t kernel) { return significance && significance->familyWise[kernel] <= 0.05; };
  double maxValue = 1e-12;
  for (std::size_t i = 0; i < n; ++i) maxValue = std::max(maxValue, regions[i].meanPercent + regions[i].sdPercent);
  std::vector<std::string> names;
  for (std::size_t i = 0; i < n; ++i) names.push_back(Escape(r.kernels[regions[i].kernel].name) + (significant(regions[i].kernel) ? " *" : ""));
  const std::string caption = "mean weight (%) over outer folds, bar = +-1 SD" +
                              (significance ? fmt::format("; * p_FWE <= 0.05 ({} permutations)", r.permutations) : std::string());
  // Room on the left for the longest name; the bars keep their length; the caption starts under the bars when it fits.
  const int rowH = 18, left = std::max(170, WidthFor(names, 11, 6)), barW = 330, captionW = WidthFor({caption}, 11, 0);
  const int width = std::max(left + barW + 60, captionW + 8), captionX = left + captionW <= width ? left : 4;
  const int height = static_cast<int>(n) * rowH + 58;
  std::string svg = fmt::format(R"(<svg class="figure" role="img" aria-label="top regions" width="{}" height="{}" viewBox="0 0 {} {}">)", width, height, width, height);
  const double axisY = 10 + static_cast<double>(n) * rowH + 2;
  svg += fmt::format(R"(<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#888"/>)", left, left + barW, axisY, axisY);
  svg += XTicks(Ticks(0, maxValue, 4), [&](double v) { return left + barW * v / maxValue; }, axisY);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& row = regions[i];
    const double y = 10 + static_cast<double>(i) * rowH;
    const double w = barW * row.meanPercent / maxValue;
    const double lo = barW * std::max(0.0, row.meanPercent - row.sdPercent) / maxValue, hi = barW * (row.meanPercent + row.sdPercent) / maxValue;
    const auto& kernel = r.kernels[row.kernel];
    const std::string made = FeatureName(KernelKind(r, kernel.name));  // what the kernel is made of: voxels, connections, columns
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>)", left - 6, y + 12, names[i]);
    const std::string pValues = significance ? fmt::format(", p_FWE {:.3g}, p {:.3g}, q {:.3g}", significance->familyWise[row.kernel],
                                                           significance->uncorrected[row.kernel], significance->q[row.kernel])
                                             : "";
    const std::string sign = std::isfinite(row.signConsistency) ? fmt::format(", sign consistency {:.2f}", row.signConsistency) : "";
    svg += fmt::format(R"(<rect x="{}" y="{}" width="{:.1f}" height="{}" fill="{}"><title>{}: {:.2f} % (SD {:.2f}){}, selected in {} folds, expected rank {:.1f}{}{}</title></rect>)",
                       left, y + 2, std::max(w, 0.5), rowH - 5, significant(row.kernel) ? "#1f3f66" : "#4c78a8", names[i], row.meanPercent, row.sdPercent,
                       made.empty() ? "" : fmt::format(", {} {}", kernel.features, made), row.foldsSelected, row.expectedRank, sign, pValues);
    svg += fmt::format(R"(<line x1="{:.1f}" x2="{:.1f}" y1="{}" y2="{}" stroke="#222" stroke-width="1.2"/>)", left + lo, left + hi, y + rowH / 2.0, y + rowH / 2.0);
    svg += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="10" fill="#444">{:.1f}</text>)", left + hi + 4, y + 12, row.meanPercent);
  }
  svg += fmt::format(R"(<text x="{}" y="{}" font-size="11">{}</text></svg>)", captionX, height - 8, Escape(caption));
  return svg;
}

/// Vertical bars: number of regions (kernels) with weight > 0 per outer fold.
std::string SelectedCountsChart(const LearnerRecord& lr, std::size_t kernels, const std::string& unit) {
  std::vector<std::pair<std::string, int>> counts;
  for (const auto& f : lr.outcome.folds)
    if (f.error.empty())
      counts.emplace_back(f.repeat > 0 ? fmt::format("{}/{}", f.repeat, f.index) : std::to_string(f.index), static_cast<int>((f.model.beta.array() > 0).count()));
  const std::string caption = unit + " selected (weight &gt; 0) per outer fold";
  const int width = std::max(60 + 40 * static_cast<int>(counts.size()), WidthFor({caption}, 11, 40)), height = 190, base = 160;
  std::string svg = fmt::format(R"(<svg class="figure" role="img" aria-label="selected regions per fold" width="{}" height="{}" viewBox="0 0 {} {}">)", width, height, width, height);
  svg += fmt::format(R"(<line x1="40" x2="{}" y1="{}" y2="{}" stroke="#888"/>)", 50 + 40 * static_cast<int>(counts.size()), base, base);
  svg += fmt::format(R"(<line x1="40" x2="40" y1="20" y2="{}" stroke="#888"/>)", base);
  svg += YTicks(Ticks(0, static_cast<double>(std::max<std::size_t>(kernels, 1)), 4),
                [&](double v) { return base - 140.0 * v / std::max<double>(1.0, static_cast<double>(kernels)); }, 40);
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const double h = 140.0 * counts[i].second / std::max<double>(1.0, static_cast<double>(kernels));
    const double x = 50 + 40.0 * static_cast<double>(i);
    svg += fmt::format(R"(<rect x="{}" y="{:.1f}" width="26" height="{:.1f}" fill="#72b7b2"><title>fold {}: {} of {} {}</title></rect>)", x, base - h, std::max(h, 0.5), counts[i].first, counts[i].second, kernels, unit);
    svg += fmt::format(R"(<text x="{}" y="{:.1f}" font-size="10" text-anchor="middle">{}</text>)", x + 13, base - h - 3, counts[i].second);
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="10" text-anchor="middle">{}</text>)", x + 13, base + 13, counts[i].first);
  }
  svg += fmt::format(R"(<text x="40" y="{}" font-size="11">{}</text></svg>)", height - 4, caption);
  return svg;
}

/// Per outer fold: chosen parameters, inner score, fit status, iterations and `unit` (regions, kernels) selected; the status counts.
std::string FitTable(const LearnerRecord& lr, const std::string& unit) {
  const std::map<std::string, int> counts = cv::FoldStatusCounts(lr.outcome);
  std::vector<std::string> parts;
  for (const auto& [status, count] : counts) parts.push_back(fmt::format("{} {}", count, status));
  const bool allConverged = counts.size() == 1 && counts.count("converged");
  bool platt = false, bias = false;
  for (const auto& f : lr.outcome.folds) {
    platt |= f.probability.size() > 0;
    bias |= f.corrected.size() > 0;
  }
  std::string h = fmt::format("<p class=\"note\"><b>{}</b>: outer folds {}{}.</p>\n<table><tr><th>fold</th><th>chosen parameters</th><th>inner score</th><th>status</th><th>iterations</th><th>{} selected</th>{}{}</tr>\n",
                              Escape(lr.outcome.label), Join(parts, ", "), allConverged ? "" : " &mdash; <b>not every fit converged: read the warnings below</b>", unit,
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
/// anterior up), red = positive, blue = negative.
std::string Montage(const std::vector<float>& map, const std::vector<float>& background, const io::Geometry& g, MapKind kind) {
  const auto W = g.dims[0], H = g.dims[1], Z = g.dims[2];
  const auto affine = g.RasAffine();
  const bool flipX = affine[0] < 0, flipY = affine[5] > 0;  // RAS: x grows to the right, y grows upwards
  std::vector<double> mags;
  for (float v : map)
    if (v != 0.0f && std::isfinite(v)) mags.push_back(std::abs(v));
  const bool pattern = kind == MapKind::Pattern;
  if (mags.empty()) return pattern ? "<p>(the mean activation pattern is zero everywhere)</p>" : "<p>(the mean weight map is zero everywhere)</p>";
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
  const char* colours = pattern ? "Red: the image values rise with the decision value (towards the positive class / higher target), blue: they fall; "
                                  "opacity ~ |a|"
                                : "Red: positive weight (towards the positive class / higher target), blue: negative; opacity ~ |w|";
  return fmt::format(R"(<img class="montage" alt="mean {}, axial slices" width="{}" height="{}" src="data:image/png;base64,{}"><br>)",
                     pattern ? "activation pattern" : "weight map", width, height, Base64(EncodePng(width, height, rgb))) +
         ColourBar(vmax, kind) +
         fmt::format(R"(<p class="note">Axial slices at z = {} mm (MNI), left to right, top to bottom; subject's left on the left, anterior up. {} up to its 99th percentile ({:.3g}).</p>)",
                     Join(zs, ", "), colours, vmax);
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

}  // namespace neuromkl::exporting::report
