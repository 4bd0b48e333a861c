// kernels.sources: the study and the cohort as each source sees them, and the subjects a source lacks.
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/core/table.hpp"
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
  if (source.kind != KernelSource::Images) return cohort;
  std::map<std::string, std::string> drop(cohort.dropped.begin(), cohort.dropped.end());
  return LoadCohort(sourceStudy, drop);
}

std::map<std::string, std::vector<std::string>> SubjectsLackingSources(const config::StudyConfig& study, const Cohort& cohort) {
  std::map<std::string, std::vector<std::string>> lacking;
  const DelimitedTable table = ReadDelimitedTable(study.subjects.table);
  const auto rowOf = RowsById(table, SubjectIdColumn(study.subjects, table), "subject id column, /subjects/id_column");
  auto cell = [&](const std::string& id, std::size_t col) -> std::string {
    const auto it = rowOf.find(id);
    return it == rowOf.end() ? std::string() : table.rows[it->second][col];
  };
  for (const auto& source : study.kernels.sources) {
    const std::string who = "source \"" + source.name + "\": ";
    auto fileColumn = [&](const std::string& column, const char* what) {
      const std::size_t col = table.Require(column, std::string(what) + " column of source \"" + source.name + "\"");
      for (const auto& id : cohort.ids) {
        const std::string c = cell(id, col);
        std::error_code ec;
        if (IsMissingCell(c)) lacking[id].push_back(who + "no " + what + " in column \"" + column + "\"");
        else if (const std::string f = ResolveImagePath(table.path, c); !fs::is_regular_file(f, ec)) lacking[id].push_back(who + "file not found: " + f);
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
          for (const auto& id : unmatched) lacking[id].push_back(who + "no image with its BIDS entities");
        }
        break;
      case KernelSource::Connectivity:
        fileColumn(source.connectivity.column, "connectivity matrix");
        break;
      case KernelSource::Tabular: {
        const auto& spec = source.tabular;
        const auto ids = RowsById(ReadDelimitedTable(spec.table), spec.idColumn, source.pointer + "/tabular/id_column");
        for (const auto& id : cohort.ids)
          if (!ids.count(id)) lacking[id].push_back(who + "no row in " + spec.table);
        break;
      }
      case KernelSource::Precomputed:  // n x n files in table order: every subject has a row
      case KernelSource::Sources:
        break;
    }
  }
  return lacking;
}

Cohort LoadStudyCohort(const config::StudyConfig& study) {
  Cohort cohort = LoadCohort(study);
  if (study.kernels.source != KernelSource::Sources) return cohort;
  const auto lacking = SubjectsLackingSources(study, cohort);
  if (lacking.empty()) return cohort;
  std::vector<std::string> listed;
  for (const auto& [id, reasons] : lacking) listed.push_back(id + " (" + Join(reasons, "; ") + ")");
  if (study.kernels.missingSource == config::MissingSource::Error)
    throw InputError("sources:MissingData", study.subjects.table,
                     fmt::format("{} of {} subjects lack a source's data: {}; every source needs every subject, or set /kernels/missing_source "
                                 "to \"drop\" to leave them out (listed in the results)",
                                 lacking.size(), cohort.ids.size(), Join(listed, ", ")));
  std::map<std::string, std::string> drop;
  for (const auto& [id, reasons] : lacking) drop[id] = Join(reasons, "; ");
  return LoadCohort(study, drop);
}

}  // namespace neuromkl::pipeline
