// kernels.sources: the study and the cohort as each source sees them, and the subjects a source lacks.
#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/core/table.hpp"
#include "neuromkl/pipeline/harmonisation.hpp"
#include "neuromkl/pipeline/sources.hpp"

namespace neuromkl::pipeline {

namespace fs = std::filesystem;
using config::KernelSource;

config::StudyConfig SourceStudy(const config::StudyConfig& study, const config::SourceSpec& source) {
  config::StudyConfig d = study;
  d.kernels.source = source.kind;
  d.kernels.sources.clear();
  d.subjects.imageColumn = source.imageColumn;
  if (!source.mask.empty()) d.mask = source.mask;
  d.kernels.nanPolicy = source.nanPolicy;
  d.kernels.precomputed = source.precomputed;
  d.kernels.tabular = source.tabular;
  d.kernels.connectivity = source.connectivity;
  if (source.ownAtlas) d.atlas = source.atlas;
  d.subjects.bids.entities = source.bidsEntities;
  d.kernels.intensity = source.intensity;
  return d;
}

Cohort SourceCohort(const config::StudyConfig& sourceStudy, const config::SourceSpec& source, const Cohort& cohort) {
  const auto imputed = cohort.imputedSources.find(source.name);
  if (source.kind != KernelSource::Images && imputed == cohort.imputedSources.end()) return cohort;
  std::map<std::string, std::string> drop(cohort.dropped.begin(), cohort.dropped.end());
  // missing_source "impute": the source's kernels are formed over the subjects it has, then laid into the study's rows.
  if (imputed != cohort.imputedSources.end())
    for (const auto& [id, reason] : imputed->second) drop.emplace(id, reason);
  return LoadCohort(sourceStudy, drop);
}

namespace {

/// A subject a source has no data for.
struct LackedSource {
  std::string id;
  std::size_t source = 0;
  std::string reason;
};

std::vector<LackedSource> LackedSources(const config::StudyConfig& study, const Cohort& cohort) {
  std::vector<LackedSource> lacked;
  const DelimitedTable table = ReadDelimitedTable(study.subjects.table);
  const auto rowOf = RowsById(table, SubjectIdColumn(study.subjects, table), "subject id column, /subjects/id_column");
  auto cell = [&](const std::string& id, std::size_t col) -> std::string {
    const auto it = rowOf.find(id);
    return it == rowOf.end() ? std::string() : table.rows[it->second][col];
  };
  for (std::size_t index = 0; index < study.kernels.sources.size(); ++index) {
    const auto& source = study.kernels.sources[index];
    auto lacks = [&](const std::string& id, std::string reason) { lacked.push_back({id, index, std::move(reason)}); };
    auto fileColumn = [&](const std::string& column, const char* what) {
      const std::size_t col = table.Require(column, std::string(what) + " column of source \"" + source.name + "\"");
      for (const auto& id : cohort.ids) {
        const std::string c = cell(id, col);
        std::error_code ec;
        if (IsMissingCell(c)) lacks(id, std::string("no ") + what + " in column \"" + column + "\"");
        else if (const std::string f = ResolveImagePath(table.path, c); !fs::is_regular_file(f, ec)) lacks(id, "file not found: " + f);
      }
    };
    switch (source.kind) {
      case KernelSource::Images:
        if (study.subjects.bids.root.empty()) {
          fileColumn(source.imageColumn, "image");
        } else {
          config::BidsSpec bids = study.subjects.bids;
          bids.entities = source.bidsEntities;
          std::vector<std::string> unmatched;
          FindBidsImages(bids, cohort.ids, &unmatched);
          for (const auto& id : unmatched) lacks(id, "no image with its BIDS entities");
        }
        break;
      case KernelSource::Connectivity:
        fileColumn(source.connectivity.column, "connectivity matrix");
        break;
      case KernelSource::Tabular: {
        const auto& spec = source.tabular;
        const auto ids = RowsById(ReadDelimitedTable(spec.table), spec.idColumn, source.pointer + "/tabular/id_column");
        for (const auto& id : cohort.ids)
          if (!ids.count(id)) lacks(id, "no row in " + spec.table);
        break;
      }
      case KernelSource::Precomputed:  // n x n files in table order: every subject has a row
      case KernelSource::Sources:
        break;
    }
  }
  return lacked;
}

/// missing_source "impute": every subject kept, each source's lacking subjects listed; InputError where a source cannot
/// be imputed in kernel space (an image source harmonised in the folds, a tabular source whose folds form its kernels
/// from its columns, a source with data for fewer than two subjects).
std::map<std::string, std::vector<std::pair<std::string, std::string>>> ImputedSources(const config::StudyConfig& study, const Cohort& cohort,
                                                                                       const std::vector<LackedSource>& lacked) {
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> out;
  for (const auto& l : lacked) out[study.kernels.sources[l.source].name].emplace_back(l.id, l.reason);
  const std::string where = study.path + " /kernels/missing_source";
  for (const auto& source : study.kernels.sources) {
    const auto it = out.find(source.name);
    if (it == out.end()) continue;
    std::vector<std::string> ids;
    for (const auto& [id, reason] : it->second) ids.push_back(id);
    const std::size_t have = cohort.ids.size() - ids.size();
    if (have < 2)
      throw InputError("sources:TooFewToImpute", where,
                       fmt::format("source \"{}\" has data for {} of {} subjects: too few to impute the others from; give it more subjects or "
                                   "leave it out",
                                   source.name, have, cohort.ids.size()));
    const bool harmonised = HarmonisedInFolds(study, source.name, source.kind);
    if (harmonised && source.kind == KernelSource::Images)
      throw InputError("sources:ImputedHarmonised", where,
                       fmt::format("source \"{}\" is harmonised inside the folds (/harmonisation), which estimates its site effects from every "
                                   "subject's voxels, but {} subject(s) have no image for it: {}; leave the source out of "
                                   "/harmonisation/sources, or set missing_source to \"drop\"",
                                   source.name, ids.size(), Shown(ids)));
    if (source.kind == KernelSource::Tabular && (source.tabular.InFold() || harmonised))
      throw InputError("sources:ImputedInFoldTabular", where,
                       fmt::format("tabular source \"{}\" is standardised, imputed or harmonised inside the folds from its columns, but {} "
                                   "subject(s) have no row in its table: {}; give them a row (empty cells are imputed with \"impute\": "
                                   "\"median\"), or set missing_source to \"drop\"",
                                   source.name, ids.size(), Shown(ids)));
  }
  return out;
}

}  // namespace

std::map<std::string, std::vector<std::string>> SubjectsLackingSources(const config::StudyConfig& study, const Cohort& cohort) {
  std::map<std::string, std::vector<std::string>> lacking;
  for (const auto& l : LackedSources(study, cohort)) lacking[l.id].push_back("source \"" + study.kernels.sources[l.source].name + "\": " + l.reason);
  return lacking;
}

Cohort LoadStudyCohort(const config::StudyConfig& study) {
  Cohort cohort = LoadCohort(study);
  if (study.kernels.source != KernelSource::Sources) return cohort;
  if (study.kernels.missingSource == config::MissingSource::Impute) {
    cohort.imputedSources = ImputedSources(study, cohort, LackedSources(study, cohort));
    return cohort;
  }
  const auto lacking = SubjectsLackingSources(study, cohort);
  if (lacking.empty()) return cohort;
  std::vector<std::string> listed;
  for (const auto& [id, reasons] : lacking) listed.push_back(id + " (" + Join(reasons, "; ") + ")");
  if (study.kernels.missingSource == config::MissingSource::Error)
    throw InputError("sources:MissingData", study.subjects.table,
                     fmt::format("{} of {} subjects lack a source's data: {}; every source needs every subject, or set /kernels/missing_source "
                                 "to \"drop\" to leave them out or \"impute\" to keep them (both listed in the results)",
                                 lacking.size(), cohort.ids.size(), Join(listed, ", ")));
  std::map<std::string, std::string> drop;
  for (const auto& [id, reasons] : lacking) drop[id] = Join(reasons, "; ");
  return LoadCohort(study, drop);
}

}  // namespace neuromkl::pipeline
