// The kernels every fold forms itself: harmonised image sources and tabular sources with fold statistics (harmonisation.hpp).
#include <algorithm>

#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/system.hpp"
#include "neuromkl/pipeline/harmonisation.hpp"
#include "neuromkl/pipeline/sources.hpp"
#include "neuromkl/pipeline/study_context.hpp"

namespace neuromkl::pipeline {

namespace {

/// The tabular sources whose kernels the folds form (standardise, impute), their columns over the kernels' rows, and
/// their kernels' origins among those columns (found by name: kernels the stage excluded as zero have none).
std::shared_ptr<const std::vector<gram::FoldTabularSource>> FoldTabularSources(const StudyContext& ctx, std::vector<gram::KernelOrigin>& origins) {
  auto sources = std::make_shared<std::vector<gram::FoldTabularSource>>();
  const Eigen::VectorXi rows = Eigen::Map<const Eigen::VectorXi>(ctx.kernelRows.data(), static_cast<Eigen::Index>(ctx.kernelRows.size()));
  for (const TabularSection& part : TabularSections(ctx.study)) {
    const auto& spec = part.study.kernels.tabular;
    const bool harmonise = HarmonisedInFolds(ctx.study, part.name, config::KernelSource::Tabular);
    if (!spec.InFold() && !harmonise) continue;
    const TabularFeatureTable table = TabularFeatures(part.study, ctx.cohort);
    const int source = static_cast<int>(sources->size());
    for (const TabularKernelSpec& k : TabularKernelSpecs(table, spec.functions)) {
      const auto& info = ctx.ks.set.info;
      const auto found = std::find_if(info.begin(), info.end(), [&](const auto& i) { return i.name == part.prefix + k.name; });
      if (found == info.end()) continue;
      gram::KernelOrigin& o = origins[static_cast<std::size_t>(found - info.begin())];
      o.tabular = source;
      o.columns = table.groups[k.group].columns;
      o.function = k.function;
    }
    sources->push_back({part.name, std::make_shared<const Eigen::MatrixXd>(table.X(rows, Eigen::all)), table.columns,
                        {spec.imputeMedian, spec.standardise}, harmonise, ctx.study.path + " " + part.pointer});
  }
  return sources;
}

}  // namespace

bool HarmonisedInFolds(const config::StudyConfig& study, const std::string& name, config::KernelSource kind) {
  if (!study.harmonisation.Active() || (kind != config::KernelSource::Images && kind != config::KernelSource::Tabular)) return false;
  const auto& chosen = study.harmonisation.sources;
  if (!chosen.empty()) return std::find(chosen.begin(), chosen.end(), name) != chosen.end();
  if (kind == config::KernelSource::Images) return true;
  // Tabular sources by default only in a study without image sources.
  const auto& sources = study.kernels.sources;
  return study.kernels.source != config::KernelSource::Images &&
         std::none_of(sources.begin(), sources.end(), [](const config::SourceSpec& s) { return s.kind == config::KernelSource::Images; });
}

bool FoldsFormKernels(const config::StudyConfig& study, const Cohort& cohort) {
  if (study.harmonisation.Active() || !cohort.imputedSources.empty()) return true;
  const auto parts = TabularSections(study);
  return std::any_of(parts.begin(), parts.end(), [](const TabularSection& p) { return p.study.kernels.tabular.InFold(); });
}

std::shared_ptr<const gram::FoldFormedKernels> FoldFormedStudyKernels(const StudyContext& ctx, std::shared_ptr<const gram::KernelList> kernels,
                                                                     const std::string& scratchDir, std::vector<HarmonisedSourceNote>& notes) {
  const auto& study = ctx.study;
  if (ctx.ks.owners) {  // (imputed sources are refused by the kernel stage first: sources:ImputedHeldByRanks)
    const bool harmonised = study.harmonisation.Active();
    throw InputError(harmonised ? "harmonisation:HeldByRanks" : "tabular:HeldByRanks", study.path + (harmonised ? " /harmonisation" : " /kernels"),
                     fmt::format("this study's kernels are too large for one process and are held by the MPI ranks, but every fold forms {} in "
                                 "one process; run it {}, or on fewer subjects",
                                 harmonised ? "its kernels of harmonised sources from the harmonised voxels"
                                            : "its standardised or imputed tabular kernels from their columns",
                                 harmonised ? "without harmonisation" : "without tabular standardise and impute"));
  }
  std::vector<gram::KernelOrigin> origins(kernels->size());
  auto images = HarmonisedImageSources(ctx, scratchDir, origins, notes);
  auto tabular = FoldTabularSources(ctx, origins);
  // missing_source "impute": the full kernels of a source some subjects lack are imputed in every fold.
  std::size_t first = 0;
  for (std::size_t s = 0; s < ctx.ks.sourcePresent.size(); first += ctx.ks.sourceKernelCounts[s], ++s) {
    if (ctx.ks.sourcePresent[s].empty()) continue;
    auto present = std::make_shared<const std::vector<char>>(ctx.SourceRowsPresent(ctx.ks.sourceNames[s]));
    for (std::size_t k = first; k < first + ctx.ks.sourceKernelCounts[s]; ++k)
      if (origins[k].Full()) {
        origins[k].present = present;
        origins[k].presentSource = ctx.ks.sourceNames[s];
      }
  }
  for (const gram::FoldTabularSource& s : *tabular)
    if (s.harmonise)
      notes.push_back({s.name.empty() ? std::string("tabular") : s.name, s.features->cols(), static_cast<std::uint64_t>(s.features->size()) * sizeof(double),
                       "tabular"});
  // Fold kernels kept for the stages after the nested CV, which open every outer fold once per learner and use: up to a
  // quarter of the memory available now.
  return std::make_shared<gram::FoldFormedKernels>(std::move(kernels), std::move(origins), std::move(images), ctx.harmonisation,
                                                   AvailableMemoryBytes() / 4, std::move(tabular));
}

}  // namespace neuromkl::pipeline
