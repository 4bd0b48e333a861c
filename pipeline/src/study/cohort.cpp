#include "neuromkl/pipeline/cohort.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>

#include "neuromkl/config/participants_sidecar.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/files.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/core/table.hpp"
#include "neuromkl/io/nifti.hpp"

namespace neuromkl::pipeline {

namespace fs = std::filesystem;

std::string ResolveImagePath(const std::string& tablePath, const std::string& cell) {
  fs::path p(cell);
  if (p.is_relative()) p = fs::absolute(tablePath).parent_path() / p;
  return p.lexically_normal().string();
}

namespace {
bool ParseNumber(const std::string& s, double& v) { return ParseFiniteCell(Trim(s), v); }

bool IsImageExtension(const std::string& ext) {
  const std::string e = ToLower(ext);
  return e == ".nii" || e == ".nii.gz" || e == ".hdr" || e == ".hdr.gz";
}

std::string WithoutSubPrefix(const std::string& id) { return id.rfind("sub-", 0) == 0 ? id.substr(4) : id; }

BidsName ParseName(const std::string& path);

/// Study-wide notes on the images: the Analyze orientation convention (once), the template
/// space of the image names against /atlas/space.
void DescribeImages(const config::StudyConfig& study, Cohort& c) {
  std::size_t analyze = 0;
  std::vector<std::string> withMat;
  std::set<std::string> spaces;
  for (const auto& img : c.images) {
    const std::string lower = ToLower(img);
    const bool pairName = lower.ends_with(".hdr") || lower.ends_with(".img") || lower.ends_with(".hdr.gz") || lower.ends_with(".img.gz");
    if (pairName && io::ReadImageFormat(img) == io::ImageFormat::Analyze75) {
      ++analyze;
      // SPM stores a reoriented Analyze image's affine in X.mat, which neuromkl cannot read.
      std::string stem = img.substr(0, img.size() - (lower.ends_with(".gz") ? 7 : 4));
      std::error_code ec;
      if (fs::exists(stem + ".mat", ec)) withMat.push_back(stem + ".mat");
    }
    const BidsName name = ParseName(img);
    if (auto it = name.entities.find("space"); it != name.entities.end()) spaces.insert(it->second);
  }
  c.imageSpaces.assign(spaces.begin(), spaces.end());
  if (analyze > 0)
    c.warnings.push_back(fmt::format("images: {} of {} images are Analyze 7.5 files: {}", analyze, c.images.size(), io::AnalyzeConventionNote()));
  if (!withMat.empty())
    c.warnings.push_back(fmt::format("images: {} Analyze image(s) have an SPM .mat file beside them (e.g. {}): SPM reads its orientation "
                                     "from there, neuromkl ignores it; convert these images to NIfTI (e.g. SPM's Import or nibabel) "
                                     "if they were reoriented",
                                     withMat.size(), withMat.front()));
  const std::string& atlasSpace = study.atlas.space;
  for (const auto& space : spaces)
    if (!atlasSpace.empty() && space != atlasSpace)
      c.warnings.push_back(fmt::format("atlas: /atlas/space is \"{}\" but image names say space-{}: the atlas and the images may be in "
                                       "different template spaces (regions would be misplaced)",
                                       atlasSpace, space));
}

BidsName ParseName(const std::string& path) { return ParseBidsName(fs::path(path).filename().string()); }
}  // namespace

std::map<std::string, std::size_t> RowsById(const DelimitedTable& table, const std::string& idColumn, const std::string& role) {
  const bool byRow = idColumn == "#row";
  const std::size_t idCol = byRow ? 0 : table.Require(idColumn, role);
  std::map<std::string, std::size_t> rows;
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    const std::string id = byRow ? std::to_string(r + 1) : table.rows[r][idCol];
    // Joined by id: a second row of one id would silently stand for the first (or be ignored).
    if (const auto [it, fresh] = rows.emplace(id, r); !fresh)
      throw InputError("table:DuplicateId", table.path + ":" + std::to_string(table.lineNumbers[r]),
                       fmt::format("id \"{}\" ({}) appears twice (lines {} and {}); ids must be unique", id, role,
                                   table.lineNumbers[it->second], table.lineNumbers[r]));
  }
  return rows;
}

bool LabelLess(const std::string& a, const std::string& b) {
  double x, y;
  if (ParseNumber(a, x) && ParseNumber(b, y)) return x < y;
  return a < b;
}

BidsName ParseBidsName(const std::string& fileName) {
  BidsName out;
  const std::size_t dot = fileName.find('.');
  const std::string stem = fileName.substr(0, dot);
  out.extension = dot == std::string::npos ? "" : fileName.substr(dot);
  const auto parts = Split(stem, '_');
  if (parts.size() < 2) return out;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    const std::size_t dash = parts[i].find('-');
    if (dash == std::string::npos || dash == 0 || dash + 1 == parts[i].size()) return BidsName{};
    out.entities[parts[i].substr(0, dash)] = parts[i].substr(dash + 1);
  }
  out.suffix = parts.back();
  return out;
}

std::vector<std::string> FindBidsImages(const config::BidsSpec& bids, const std::vector<std::string>& ids, std::vector<std::string>* unmatched) {
  const std::string searched = bids.derivatives.empty() ? bids.root : bids.derivatives;
  std::error_code ec;
  if (!fs::is_directory(searched, ec))
    throw InputError("subjects:BidsMissing", searched,
                     std::string("the BIDS ") + (bids.derivatives.empty() ? "root (/subjects/bids/root)" : "derivatives folder (/subjects/bids/derivatives)") +
                         " is not a folder");
  // Every image file under sub-<label>/ folders, by participant label.
  std::map<std::string, std::vector<std::pair<std::string, BidsName>>> byLabel;
  for (auto it = fs::recursive_directory_iterator(searched, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (it->is_directory(ec) && (name.rfind('.', 0) == 0 || name == "sourcedata")) {
      it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(ec)) continue;
    BidsName parsed = ParseBidsName(name);
    if (parsed.suffix.empty() || !parsed.entities.count("sub") || !IsImageExtension(parsed.extension)) continue;
    byLabel[parsed.entities["sub"]].emplace_back(it->path().lexically_normal().string(), std::move(parsed));
  }
  std::vector<std::string> wanted;
  for (const auto& [key, value] : bids.entities) wanted.push_back(key + "-" + value);
  std::vector<std::string> images, problems;
  for (const auto& id : ids) {
    const std::string label = WithoutSubPrefix(id);
    std::vector<std::string> matches, others;
    for (const auto& [path, name] : byLabel[label]) {
      bool ok = true;
      for (const auto& [key, value] : bids.entities) {
        if (key == "suffix") ok &= name.suffix == value;
        else if (key == "extension") ok &= ToLower(name.extension) == ToLower(value.front() == '.' ? value : "." + value);
        else ok &= name.entities.count(key) && name.entities.at(key) == value;
      }
      (ok ? matches : others).push_back(path);
    }
    std::sort(matches.begin(), matches.end());
    if (matches.size() == 1) {
      images.push_back(matches[0]);
      continue;
    }
    images.emplace_back();
    auto list = [](std::vector<std::string> files) {
      std::sort(files.begin(), files.end());
      for (auto& f : files) f = fs::path(f).filename().string();
      const std::size_t shown = std::min<std::size_t>(files.size(), 6);
      return Join(std::vector<std::string>(files.begin(), files.begin() + static_cast<std::ptrdiff_t>(shown)), ", ") +
             (files.size() > shown ? fmt::format(", ... ({} in all)", files.size()) : "");
    };
    if (matches.empty() && unmatched) unmatched->push_back(id);
    else if (matches.empty())
      problems.push_back(fmt::format("sub-{}: no image matches; {}", label,
                                     others.empty() ? "no image file of this participant at all" : "its images are " + list(others)));
    else
      problems.push_back(fmt::format("sub-{}: {} images match ({}); add an entity that tells them apart (e.g. ses, run, desc, res)",
                                     label, matches.size(), list(matches)));
  }
  if (!problems.empty())
    throw InputError("subjects:BidsMatch", searched,
                     fmt::format("expected exactly one image per participant with entities {}, but {} of {} participants {}:\n  {}",
                                 Join(wanted, ", "), problems.size(), ids.size(), problems.size() == 1 ? "has none or several" : "have none or several",
                                 Join(problems, "\n  ")));
  return images;
}

std::string SubjectIdColumn(const config::SubjectsSpec& subjects, const DelimitedTable& table) {
  // participant_id (BIDS) by default; a table with a "subject" column instead keeps working.
  if (!subjects.idColumnGiven && subjects.idColumn == "participant_id" && !table.Find("participant_id") && table.Find("subject")) return "subject";
  return subjects.idColumn;
}

namespace {

/// The default table lives in the BIDS root: a root that is no folder is said as such, not as a missing table.
void CheckBidsRoot(const config::StudyConfig& study) {
  const std::string& root = study.subjects.bids.root;
  if (root.empty()) return;
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    throw InputError("subjects:BidsMissing", root,
                     "expected the BIDS dataset's folder (/subjects/bids/root), but " +
                         (fs::exists(root, ec) ? std::string("it is a file") : WhyNotAFile(root)));
}

/// Dropped subjects (kernels.missing_source "drop") leave the table before anything reads it: the rows kept, in
/// `c.tableRows` (indices into the file's rows) and `c.dropped`.
DelimitedTable WithoutDroppedSubjects(DelimitedTable table, const std::map<std::string, std::string>& drop, std::size_t idCol, bool byRow, Cohort& c) {
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    const std::string id = byRow ? std::to_string(r + 1) : table.rows[r][idCol];
    if (auto it = drop.find(id); it != drop.end()) c.dropped.emplace_back(id, it->second);
    else c.tableRows.push_back(r);
  }
  if (c.dropped.empty()) return table;
  DelimitedTable kept = table;
  kept.rows.clear();
  kept.lineNumbers.clear();
  for (auto r : c.tableRows) {
    kept.rows.push_back(table.rows[r]);
    kept.lineNumbers.push_back(table.lineNumbers[r]);
  }
  return kept;
}

/// Each row's subject: a unique id, its image (checked to exist, every missing one listed at once), its raw target.
void ReadSubjectRows(const config::StudyConfig& study, const DelimitedTable& table, std::size_t idCol, bool byRow, Cohort& c) {
  const std::string& path = table.path;
  const std::size_t targetCol = table.Require(study.target.column, "target column, /target/column");
  const bool needImages = study.kernels.source == config::KernelSource::Images;
  const bool bids = !study.subjects.bids.root.empty();
  const std::size_t imageCol = needImages && !bids ? table.Require(study.subjects.imageColumn, "image column, /subjects/image_column") : 0;
  if (table.rows.empty()) throw InputError("subjects:Empty", path, "the subjects table has a header but no subject rows");
  std::map<std::string, std::size_t> seen;
  std::vector<std::string> missing;
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    const auto& row = table.rows[r];
    const std::string where = path + ":" + std::to_string(table.lineNumbers[r]);
    const std::string id = byRow ? std::to_string(c.tableRows[r] + 1) : row[idCol];
    if (id.empty()) throw InputError("subjects:EmptyId", where, "empty subject id in column \"" + c.idColumn + "\"");
    // In a BIDS dataset "sub-01" and "01" name one participant (and would share its image).
    const std::string key = bids ? WithoutSubPrefix(id) : id;
    if (auto it = seen.find(key); it != seen.end()) {
      const std::string& first = byRow ? std::to_string(c.tableRows[it->second] + 1) : table.rows[it->second][idCol];
      throw InputError("subjects:DuplicateId", where,
                       first == id ? fmt::format("subject id \"{}\" appears twice (lines {} and {}); ids must be unique", id,
                                                 table.lineNumbers[it->second], table.lineNumbers[r])
                                   : fmt::format("subject ids \"{}\" (line {}) and \"{}\" (line {}) name the same BIDS participant sub-{}; ids must "
                                                 "be unique",
                                                 first, table.lineNumbers[it->second], id, table.lineNumbers[r], key));
    }
    seen[key] = r;
    c.ids.push_back(id);
    if (needImages && !bids) {
      if (IsMissingCell(row[imageCol]))
        throw InputError("subjects:NoImage", where, "subject " + id + " has no image path in column \"" + study.subjects.imageColumn + "\"");
      const std::string img = ResolveImagePath(path, row[imageCol]);
      std::error_code ec;
      if (!fs::is_regular_file(img, ec)) missing.push_back(id + ": " + img + " (" + WhyNotAFile(img) + ")");
      else if (!std::ifstream(img, std::ios::binary)) missing.push_back(id + ": " + img + " (not readable)");
      c.images.push_back(img);
    }
    const bool has = !IsMissingCell(row[targetCol]);
    c.labelled.push_back(has);
    c.rawTargets.push_back(row[targetCol]);
    if (!has) c.excluded.emplace_back(id, "no target value (empty or n/a in column \"" + study.target.column + "\")");
  }
  if (!missing.empty()) {
    std::vector<std::string> shown(missing.begin(), missing.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(5, missing.size())));
    throw InputError("subjects:MissingImage", path,
                     fmt::format("{} of {} image files are missing or not files: {}{}", missing.size(), c.ids.size(), Join(shown, "; "),
                                 missing.size() > 5 ? "; ..." : "") +
                         " (relative image paths resolve against the table's folder)");
  }
}

/// The columns the CV schemes need (outer and inner must name the same column when both use one) and the
/// covariate columns (present, else ConfigError at the column's pointer; values are checked where the design is built).
void ReadDesignColumns(const config::StudyConfig& study, const DelimitedTable& table, Cohort& c) {
  const std::string& path = table.path;
  auto column = [&](const std::string& name, const char* role, std::vector<std::string>& out) {
    if (name.empty()) return;
    const std::size_t col = table.Require(name, role);
    for (auto r : c.labelledRows) {
      const std::string& cell = table.rows[static_cast<std::size_t>(r)][col];
      if (IsMissingCell(cell))
        throw InputError("subjects:MissingGroup", path + ":" + std::to_string(table.lineNumbers[static_cast<std::size_t>(r)]),
                         "subject " + c.ids[static_cast<std::size_t>(r)] + " has no value in column \"" + name + "\" (" + role + ")");
      out.push_back(cell);
    }
  };
  const std::string groupColumn = !study.cv.outer.groupColumn.empty() ? study.cv.outer.groupColumn : study.cv.inner.groupColumn;
  const std::string foldColumn = !study.cv.outer.foldColumn.empty() ? study.cv.outer.foldColumn : study.cv.inner.foldColumn;
  if (!study.cv.outer.groupColumn.empty() && !study.cv.inner.groupColumn.empty() && study.cv.outer.groupColumn != study.cv.inner.groupColumn)
    throw InputError("subjects:TwoGroupColumns", study.path, "/cv/outer/group_column and /cv/inner/group_column differ; use one group column");
  auto covariateColumn = [&](const std::string& name, const std::string& pointer) {
    const auto col = table.Find(name);
    if (!col)
      throw ConfigError("config:Value", study.path,
                        fmt::format("{}: column \"{}\" is not in the subjects table {} (columns: {}){}", pointer, name, path, Join(table.header, ", "),
                                    DidYouMean(name, table.header)));
    auto& cells = c.covariateCells[name];
    for (const auto& row : table.rows) cells.push_back(Trim(row[*col]));
  };
  for (const config::CovariateSpec* spec : {&study.covariates, &study.harmonisation.preserve, &study.target.confounds}) {
    for (std::size_t i = 0; i < spec->columns.size(); ++i) covariateColumn(spec->columns[i], spec->ColumnPointer(i));
    for (std::size_t i = 0; i < spec->categorical.size(); ++i) covariateColumn(spec->categorical[i], spec->CategoricalPointer(i));
    if (!spec->fitOnColumn.empty()) covariateColumn(spec->fitOnColumn, spec->fitOnPointer + "/column");
  }
  if (study.harmonisation.Active()) covariateColumn(study.harmonisation.siteColumn, "/harmonisation/site_column");
  column(groupColumn, "group column, /cv/*/group_column", c.groups);
  column(foldColumn, "fold column, /cv/*/fold_column", c.customFolds);
}

void ReadRegressionTargets(const config::StudyConfig& study, const DelimitedTable& table, Cohort& c) {
  for (Eigen::Index i = 0; i < c.y.size(); ++i) {
    const auto r = static_cast<std::size_t>(c.labelledRows[static_cast<std::size_t>(i)]);
    if (!ParseNumber(c.rawTargets[r], c.y[i]))
      throw InputError("subjects:NonNumericTarget", table.path + ":" + std::to_string(table.lineNumbers[r]),
                       fmt::format("subject {}: regression target \"{}\" in column \"{}\" is not a finite number", c.ids[r],
                                   c.rawTargets[r], study.target.column));
  }
}

/// participants.json declares the target column's levels: every class must be one of them.
void CheckDeclaredLevels(const config::StudyConfig& study, const config::ColumnLevels& levels, const std::map<std::string, int>& counts,
                         const std::string& path, Cohort& c) {
  const auto it = levels.find(study.target.column);
  if (it == levels.end()) return;
  std::vector<std::string> declared, unknown;
  for (const auto& level : it->second) {
    declared.push_back(level.value);
    c.classDescriptions[level.value] = level.description;
  }
  for (const auto& [value, count] : counts)
    if (!c.classDescriptions.count(value)) unknown.push_back(fmt::format("\"{}\" ({} subjects)", value, count));
  if (!unknown.empty())
    throw InputError("subjects:UnknownLevel", path,
                     fmt::format("column \"{}\" holds values that {} (\"Levels\" of \"{}\") does not declare: {}; declared levels: {}",
                                 study.target.column, c.sidecar, study.target.column, Join(unknown, ", "), Join(declared, ", ")));
}

/// Classes sorted (numeric if every class is a number, else lexical); multiclass: label k = the k-th class;
/// binary: +1 for the positive class, -1 for the other.
void ReadClassTargets(const config::StudyConfig& study, const config::ColumnLevels& levels, const std::string& path, Cohort& c) {
  std::map<std::string, int> counts;
  for (auto r : c.labelledRows) ++counts[c.rawTargets[static_cast<std::size_t>(r)]];
  CheckDeclaredLevels(study, levels, counts, path, c);
  std::vector<std::string> classes;
  for (const auto& [k, _] : counts) classes.push_back(k);
  std::sort(classes.begin(), classes.end(), LabelLess);
  for (const auto& k : classes) c.classCounts.emplace_back(k, counts[k]);
  std::vector<std::string> described;
  for (const auto& [k, v] : c.classCounts) described.push_back(fmt::format("\"{}\": {}", k, v));
  if (classes.size() < 2)
    throw InputError("subjects:SingleClass", path,
                     fmt::format("classification needs two classes in column \"{}\", found one ({}); is this the right target column?",
                                 study.target.column, Join(described, ", ")));
  const Eigen::Index n = c.y.size();
  if (study.target.task == learners::Task::Multiclass) {
    c.classNames = classes;
    for (Eigen::Index i = 0; i < n; ++i) {
      const auto& raw = c.rawTargets[static_cast<std::size_t>(c.labelledRows[static_cast<std::size_t>(i)])];
      c.y[i] = static_cast<double>(std::find(classes.begin(), classes.end(), raw) - classes.begin());
    }
    return;
  }
  if (classes.size() > 2)
    throw InputError("subjects:TooManyClasses", path,
                     fmt::format("found {} classes in column \"{}\" ({}); task \"classification\" is binary: use task \"multiclass\", "
                                 "select two classes (set the others to n/a) or use task \"regression\" for an ordinal score",
                                 classes.size(), study.target.column, Join(described, ", ")));
  c.positiveClass = study.target.positiveClass.empty() ? classes[1] : study.target.positiveClass;
  if (c.positiveClass != classes[0] && c.positiveClass != classes[1])
    throw InputError("subjects:UnknownPositiveClass", path,
                     fmt::format("/target/positive_class is \"{}\", but the classes in column \"{}\" are {}{}", c.positiveClass,
                                 study.target.column, Join(described, ", "), DidYouMean(c.positiveClass, classes)));
  c.negativeClass = c.positiveClass == classes[0] ? classes[1] : classes[0];
  for (Eigen::Index i = 0; i < n; ++i)
    c.y[i] = c.rawTargets[static_cast<std::size_t>(c.labelledRows[static_cast<std::size_t>(i)])] == c.positiveClass ? 1.0 : -1.0;
}

}  // namespace

Cohort LoadCohort(const config::StudyConfig& study, const std::map<std::string, std::string>& drop) {
  CheckBidsRoot(study);
  Cohort c;
  c.sidecar = config::ParticipantsSidecarPath(study.subjects.table);
  const config::ColumnLevels levels = c.sidecar.empty() ? config::ColumnLevels{} : config::ReadParticipantsLevels(c.sidecar);
  DelimitedTable file = ReadDelimitedTable(study.subjects.table);
  c.idColumn = SubjectIdColumn(study.subjects, file);
  const bool byRow = c.idColumn == "#row";  // tables without ids: data rows numbered from 1
  const std::size_t idCol = byRow ? 0 : file.Require(c.idColumn, "subject id column, /subjects/id_column");
  c.tableRowCount = file.rows.size();
  const DelimitedTable table = WithoutDroppedSubjects(std::move(file), drop, idCol, byRow, c);
  ReadSubjectRows(study, table, idCol, byRow, c);
  const bool needImages = study.kernels.source == config::KernelSource::Images;
  if (needImages && !study.subjects.bids.root.empty()) c.images = FindBidsImages(study.subjects.bids, c.ids);
  if (needImages) DescribeImages(study, c);
  for (std::size_t r = 0; r < c.ids.size(); ++r)
    if (c.labelled[r]) c.labelledRows.push_back(static_cast<int>(r));
  const auto n = static_cast<Eigen::Index>(c.labelledRows.size());
  if (n < 2)
    throw InputError("subjects:TooFewLabelled", table.path,
                     fmt::format("expected at least 2 subjects with a target in column \"{}\", found {}", study.target.column, n));
  ReadDesignColumns(study, table, c);
  c.y.resize(n);
  if (study.target.task == learners::Task::Regression) ReadRegressionTargets(study, table, c);
  else ReadClassTargets(study, levels, table.path, c);
  return c;
}

}  // namespace neuromkl::pipeline
