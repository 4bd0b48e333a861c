// Batch benchmarks, end to end through the library, figures printed.
//  batch:  8 studies = 2 simulated cohorts x 2 targets x 2 learners, as one batch (shared kernel
//          cache) and as 8 separate runs (each computing its own kernels): image reads (counted
//          by the io module) and wall time. Floor: the batch reads each cohort's images once.
//  scale:  one study as n grows (116 AAL regions, images on a coarse grid): kernel memory, peak
//          RSS, kernel-stage time, nested-CV time per learner fit (5 outer folds, fixed parameters).
// Usage: bench_batch batch [subjects per cohort (60)] | bench_batch scale n [n ...] | bench_batch scale-summed n [n ...]
// (scale: kelm, svm and enmkl_svm; scale-summed: kelm and svm only, whose folds need no kernel copies)
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "neuromkl/config/batch_config.hpp"
#include "neuromkl/export/batch_outputs.hpp"
#include "neuromkl/config/study_config.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/pipeline/batch_run.hpp"
#include "neuromkl/pipeline/study_run.hpp"
#include "neuromkl/simulate/simulate.hpp"

using namespace neuromkl;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double PeakRssGb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / (1024.0 * 1024.0);  // ru_maxrss is in KiB on Linux
}

/// A simulated cohort with a second, regression target "score".
std::string Cohort(const std::string& dir, int n, int downsample, std::uint64_t seed) {
  simulate::SimulateOptions o;
  o.outDir = dir;
  o.subjects = n;
  o.downsample = downsample;
  o.seed = seed;
  simulate::Simulate(o);
  std::ifstream in(dir + "/participants.tsv");
  std::stringstream out;
  std::string line;
  std::getline(in, line);
  out << line << "\tscore\n";
  for (int i = 0; std::getline(in, line); ++i) out << line << "\t" << (i * 7) % 11 + (line.find("patient") != std::string::npos ? 2 : 0) << "\n";
  std::ofstream(dir + "/participants.tsv") << out.str();
  return dir + "/participants.tsv";
}

int BatchBench(int n) {
  const std::string root = fs::temp_directory_path() / "neuromkl_bench_batch";
  fs::remove_all(root);
  fs::create_directories(root);
  const std::string t1 = Cohort(root + "/c1", n, 1, 1), t2 = Cohort(root + "/c2", n, 1, 2);
  const std::string common = R"("cv": {"outer": {"k": 5}}, "output": {"save_kernels": false})";
  std::ofstream(root + "/batch.json") << R"({"name": "bench", "overrides": {)" << common << R"(},
    "matrix": {"base": {"name": "b", "subjects": {"table": ")" << t1 << R"("}, "target": {"column": "group", "task": "classification"}, "learners": [{"name": "svm"}]},
      "cohorts": [{"name": "c1", "subjects": {"table": ")" << t1 << R"("}}, {"name": "c2", "subjects": {"table": ")" << t2 << R"("}}],
      "targets": [{"name": "dx", "column": "group", "task": "classification", "positive_class": "patient"}, {"column": "score", "task": "regression"}],
      "learners": [{"name": "kelm", "params": {"c": 1}}, {"name": "enmkl_krr", "params": {"lambda": 1, "mu": 0.5}}]}})";
  const config::BatchConfig batch = config::LoadBatchConfig(root + "/batch.json");
  std::size_t reads0 = io::VolumeReadCount();
  auto t = Clock::now();
  const auto outcome = pipeline::RunBatch(batch, {});
  const double batchSeconds = Since(t);
  const std::size_t batchReads = io::VolumeReadCount() - reads0;

  // The peer: the same 8 studies one by one, each with its own kernel computation (no cache).
  reads0 = io::VolumeReadCount();
  t = Clock::now();
  for (const auto& s : batch.studies) {
    config::StudyConfig c = s.config;
    c.kernels.cache = false;
    pipeline::RunOptions o;
    o.outDir = root + "/single/" + s.name;
    pipeline::RunStudy(c, o);
  }
  const double singleSeconds = Since(t);
  const std::size_t singleReads = io::VolumeReadCount() - reads0;
  std::printf("batch of %zu studies (2 cohorts x %d subjects x 2 targets x 2 learners), %d completed\n", batch.studies.size(), n, outcome.completed);
  std::printf("  image reads: batch %zu, one by one %zu (floor: each cohort's images once = %d; plus the atlas)\n",
              batchReads, singleReads, 2 * n);
  std::printf("  wall time:   batch %.1f s, one by one %.1f s (%.2fx)\n", batchSeconds, singleSeconds, singleSeconds / batchSeconds);
  fs::remove_all(root);
  return 0;
}

int ScaleBench(const std::vector<int>& sizes, bool withMkl) {
  for (int n : sizes) {
    const std::string root = fs::temp_directory_path() / ("neuromkl_bench_scale_" + std::to_string(n));
    fs::remove_all(root);
    const std::string table = Cohort(root, n, 4, 7);  // 8 mm grid: small images, all 116 regions kept? (reported)
    std::ofstream(root + "/scale.json") << R"({"name": "scale", "subjects": {"table": ")" << table
                                        << R"("}, "target": {"column": "group", "task": "classification", "positive_class": "patient"},
      "kernels": {"cache": false}, "cv": {"outer": {"k": 5}}, "output": {"save_kernels": false, "weight_maps": false},
      "learners": [{"name": "kelm", "params": {"c": 1}}, {"name": "svm", "params": {"c": 1}})"
                                        << (withMkl ? R"(, {"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}})" : "") << "]}";
    const config::StudyConfig study = config::LoadStudyConfig(root + "/scale.json");
    pipeline::RunOptions o;
    o.outDir = root + "/out";
    const auto t = Clock::now();
    const auto r = pipeline::RunStudy(study, o);
    const double seconds = Since(t);
    const exporting::ResultsSummary rs = exporting::ReadResultsSummary(root + "/out/results.json");
    const double kernelGb = 116.0 * n * n * 8 / 1e9;
    std::printf("n = %d: %d region kernels = %.2f GB (double), peak RSS %.2f GB, kernel stage %.1f s, nested CV %.1f s, total %.1f s\n", n, rs.kernels,
                kernelGb, PeakRssGb(), rs.stageSeconds.at("kernels"), rs.stageSeconds.at("nested_cv"), seconds);
    std::printf("    stages:");
    for (const auto& [stage, secs] : rs.stageSeconds) std::printf(" %s %.1f s;", stage.c_str(), secs);
    std::printf("\n");
    for (const auto& line : r.summary) std::printf("    %s\n", line.c_str());
    for (const auto& l : rs.learners) {
      double sum = 0;
      for (double s : l.fitSeconds) sum += s;
      std::printf("    %-10s %.3f s per fit (mean of %zu outer-fold refits)\n", l.label.c_str(), sum / static_cast<double>(l.fitSeconds.size()),
                  l.fitSeconds.size());
    }
    fs::remove_all(root);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "batch";
  if (mode == "batch") return BatchBench(argc > 2 ? std::stoi(argv[2]) : 60);
  std::vector<int> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::stoi(argv[i]));
  if (sizes.empty()) sizes = {500, 2000};
  return ScaleBench(sizes, mode != "scale-summed");
}
