#pragma once
// report.html: a self-contained page (no network, no external tools) a researcher would rather read
// than the TSV files: study summary, performance per learner, ROC curves or predicted-vs-true
// scatter, top regions with fold spread, selected-region counts, weight-map slice montages.
#include <string>
#include <vector>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/export/run_record.hpp"

namespace neuromkl::exporting {

/// `meanMaps`: one mean voxel map per learner (empty when none); `regions`: the image grid's region
/// index (null without images). The background of the montages is the ICBM 2009a grey-matter
/// template shipped in atlases/templates (or the atlas itself when the template is missing).
/// `maps`: with kernels.sources, one montage per image source (maps->sources) under each learner.
struct WeightMaps;
std::string RenderReport(const RunRecord& record, const std::vector<std::vector<float>>& meanMaps, const atlas::RegionIndex* regions,
                         const WeightMaps* maps = nullptr);

}  // namespace neuromkl::exporting
