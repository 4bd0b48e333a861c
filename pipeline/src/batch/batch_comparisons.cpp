// Comparing the studies of a batch that differ in one matrix axis (atlas, sources or learner): the paired tests of a
// study's learner comparisons, on the out-of-fold predictions each study wrote (predictions.tsv), when the two studies
// scored the same subjects in the same outer folds (docs/statistics.md).
#include "batch_units.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/table.hpp"
#include "neuromkl/cv/splits.hpp"
#include "neuromkl/export/batch_outputs.hpp"
#include "neuromkl/pipeline/study_stages.hpp"

namespace neuromkl::pipeline {

namespace {

/// The axes along which two studies of one cohort and target are compared.
constexpr const char* kComparedAxes[] = {"atlas", "sources", "learner"};

/// One learner's out-of-fold predictions in a study: per (repeat, subject) its outer fold and the value the paired
/// tests use (binary and regression: the decision value; multiclass: the predicted class's index; NaN where the
/// fold failed).
struct ScoredSubject {
  int fold = 0;
  double value = 0;
  double adjustedTarget = std::nan("");  ///< /target/confounds: the target the fold's coefficients leave (target_adjusted)
};
struct StudyPredictions {
  learners::Task task;
  std::map<std::string, std::map<std::pair<int, std::string>, ScoredSubject>> learners;  ///< label -> (repeat, subject) -> ...
  std::map<std::string, double> target;  ///< subject -> the target as the learners code it
  std::vector<std::string> labels;       ///< in the study's order
  bool adjusted = false;                 ///< predictions.tsv has target_adjusted (the decisions are scored against it)
};

/// A number of the table, NaN for a missing cell.
double ParseNumber(const std::string& cell, const DelimitedTable& t, std::size_t row) {
  if (IsMissingCell(cell)) return std::nan("");
  if (double v = 0; ParseFiniteCell(cell, v)) return v;
  throw InputError("batch:BadPredictions", t.path, fmt::format("line {}: expected a number, found \"{}\"", t.lineNumbers[row], cell));
}

/// A fold or repeat number: a whole number from 0 (a missing or other cell is an error, never cast from NaN).
int ParseIndex(const std::string& cell, const DelimitedTable& t, std::size_t row) {
  const double v = ParseNumber(cell, t, row);
  if (!(v >= 0 && v <= 1e6) || v != std::floor(v))
    throw InputError("batch:BadPredictions", t.path, fmt::format("line {}: expected a fold or repeat number, found \"{}\"", t.lineNumbers[row], cell));
  return static_cast<int>(v);
}

StudyPredictions ReadStudyPredictions(const std::string& studyDir, learners::Task task) {
  const exporting::ResultsSummary results = exporting::ReadResultsSummary(studyDir + "/results.json");
  const DelimitedTable t = ReadDelimitedTable(studyDir + "/predictions.tsv");
  StudyPredictions p;
  p.task = task;
  for (const auto& l : results.learners) p.labels.push_back(l.label);
  const bool multiclass = task == learners::Task::Multiclass;
  const auto classIndex = [&](const std::string& name) {
    const auto it = std::find(results.classes.begin(), results.classes.end(), name);
    return it == results.classes.end() ? std::nan("") : static_cast<double>(it - results.classes.begin());
  };
  const std::size_t subject = t.Require("subject", "subject"), learner = t.Require("learner", "learner"), repeat = t.Require("repeat", "repeat"),
                    fold = t.Require("fold", "fold"), target = t.Require("target", "target"),
                    value = t.Require(multiclass ? "predicted" : "decision", "prediction");
  const auto adjusted = t.Find("target_adjusted");
  p.adjusted = adjusted.has_value();
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    const auto& row = t.rows[r];
    const std::string& id = row[subject];
    p.target[id] = multiclass ? classIndex(row[target]) : task == learners::Task::Classification ? (row[target] == results.positiveClass ? 1.0 : -1.0)
                                                                                      : ParseNumber(row[target], t, r);
    const double v = multiclass ? (IsMissingCell(row[value]) ? std::nan("") : classIndex(row[value])) : ParseNumber(row[value], t, r);
    p.learners[row[learner]][{ParseIndex(row[repeat], t, r), id}] = {ParseIndex(row[fold], t, r), v,
                                                                      adjusted ? ParseNumber(row[*adjusted], t, r) : std::nan("")};
  }
  return p;
}

/// Why two learners' predictions are not on the same subjects and outer folds (empty: they are).
std::string FoldsDiffer(const std::map<std::pair<int, std::string>, ScoredSubject>& a, const std::map<std::pair<int, std::string>, ScoredSubject>& b,
                        const StudyPredictions& pa, const StudyPredictions& pb) {
  std::set<std::string> onlyA, onlyB;  // subjects (in some repeat)
  for (const auto& [key, s] : a)
    if (!b.count(key)) onlyA.insert(key.second);
  for (const auto& [key, s] : b)
    if (!a.count(key)) onlyB.insert(key.second);
  if (!onlyA.empty() || !onlyB.empty())
    return fmt::format("the subjects differ ({} scored only in the first study, {} only in the second; e.g. a subject lacking a source is dropped "
                       "from one of them)",
                       onlyA.size(), onlyB.size());
  for (const auto& [key, s] : a) {
    const ScoredSubject& t = b.at(key);
    if (s.fold != t.fold)
      return fmt::format("the outer folds differ (subject {} is in fold {} of repeat {} in the first study and in fold {} in the second; "
                         "the folds follow the seed, the subjects and the cv settings)",
                         key.second, s.fold, key.first, t.fold);
    const double ya = pa.target.at(key.second), yb = pb.target.at(key.second);
    if (ya != yb && !(std::isnan(ya) && std::isnan(yb)))
      return fmt::format("the targets differ (subject {})", key.second);
    if (pa.adjusted != pb.adjusted)
      return "one study adjusts the target for confounds (/target/confounds) and the other does not";
    if (pa.adjusted && s.adjustedTarget != t.adjustedTarget && !(std::isnan(s.adjustedTarget) && std::isnan(t.adjustedTarget)))
      return fmt::format("the confound-adjusted targets differ (subject {} in repeat {}: the studies' /target/confounds differ)", key.second, key.first);
  }
  return "";
}

/// Both learners' predictions as nested-CV outcomes over one subject index (subjects in id order), with the targets.
struct PairedOutcomes {
  cv::LearnerOutcome a, b;
  Eigen::VectorXd y;
};

PairedOutcomes AsOutcomes(const std::map<std::pair<int, std::string>, ScoredSubject>& a, const std::map<std::pair<int, std::string>, ScoredSubject>& b,
                          const StudyPredictions& pa) {
  std::map<std::string, int> index;
  for (const auto& [key, s] : a) index.emplace(key.second, 0);
  PairedOutcomes out;
  out.y.resize(static_cast<Eigen::Index>(index.size()));
  int next = 0;
  for (auto& [id, i] : index) {
    i = next++;
    out.y[i] = pa.target.at(id);
  }
  // (repeat, fold) -> its test subjects, and per repeat every subject scored in it.
  std::map<std::pair<int, int>, std::vector<std::string>> folds;
  std::map<int, std::vector<int>> repeatSubjects;
  for (const auto& [key, s] : a) {
    folds[{key.first, s.fold}].push_back(key.second);
    repeatSubjects[key.first].push_back(index.at(key.second));
  }
  for (const auto& [rf, ids] : folds) {
    cv::OuterFoldResult fa;
    fa.repeat = rf.first;
    fa.index = rf.second;
    std::set<int> test;
    for (const auto& id : ids) test.insert(index.at(id));
    fa.test.assign(test.begin(), test.end());
    for (const int s : repeatSubjects.at(rf.first))
      if (!test.count(s)) fa.train.push_back(s);
    if (pa.adjusted) {
      fa.target.resize(static_cast<Eigen::Index>(ids.size()));
      for (std::size_t i = 0; i < ids.size(); ++i) fa.target[static_cast<Eigen::Index>(i)] = a.at({rf.first, ids[i]}).adjustedTarget;
    }
    cv::OuterFoldResult fb = fa;
    fa.decision.resize(static_cast<Eigen::Index>(ids.size()));
    fb.decision.resize(static_cast<Eigen::Index>(ids.size()));
    for (std::size_t i = 0; i < ids.size(); ++i) {  // ids are in id order, as index numbers them
      fa.decision[static_cast<Eigen::Index>(i)] = a.at({rf.first, ids[i]}).value;
      fb.decision[static_cast<Eigen::Index>(i)] = b.at({rf.first, ids[i]}).value;
    }
    out.a.folds.push_back(std::move(fa));
    out.b.folds.push_back(std::move(fb));
  }
  return out;
}

/// The axis two studies differ in, when it is the only one and one of kComparedAxes; empty otherwise.
std::string SingleComparedAxis(const config::BatchStudy& a, const config::BatchStudy& b) {
  if (a.axes.empty() || b.axes.empty()) return "";
  std::set<std::string> keys;
  for (const auto& [k, v] : a.axes) keys.insert(k);
  for (const auto& [k, v] : b.axes) keys.insert(k);
  std::vector<std::string> differing;
  for (const auto& k : keys)
    if (!a.axes.count(k) || !b.axes.count(k) || a.axes.at(k) != b.axes.at(k)) differing.push_back(k);
  if (differing.size() != 1) return "";
  for (const char* axis : kComparedAxes)
    if (differing[0] == axis) return axis;
  return "";
}

}  // namespace

std::vector<ComparedPair> ComparedStudyPairs(const config::BatchConfig& batch) {
  std::vector<ComparedPair> out;
  for (std::size_t i = 0; i < batch.studies.size(); ++i)
    for (std::size_t j = i + 1; j < batch.studies.size(); ++j)
      if (std::string axis = SingleComparedAxis(batch.studies[i], batch.studies[j]); !axis.empty()) out.push_back({i, j, std::move(axis)});
  return out;
}

std::vector<exporting::StudyComparison> CompareStudies(const config::BatchConfig& batch, const std::vector<exporting::StudyState>& states) {
  std::vector<exporting::StudyComparison> out;
  // Read once per study; a study whose outputs cannot be read is named in its pairs' rows, the others are compared.
  std::map<std::size_t, StudyPredictions> predictions;
  std::map<std::size_t, std::string> unreadable;
  const auto read = [&](std::size_t i) {
    if (!predictions.count(i) && !unreadable.count(i)) try {
        predictions.emplace(i, ReadStudyPredictions(batch.StudyDir(batch.studies[i].name), batch.studies[i].config.target.task));
      } catch (const Error& e) {
        unreadable[i] = fmt::format("the predictions of study {} could not be read: {}", batch.studies[i].name, e.what());
      }
    return unreadable.count(i) ? nullptr : &predictions.at(i);
  };
  for (const auto& [i, j, axis] : ComparedStudyPairs(batch)) {
    if (!states[i].complete || !states[j].complete) continue;
    const auto &sa = batch.studies[i], &sb = batch.studies[j];
    const StudyPredictions *readA = read(i), *readB = read(j);
    if (!readA || !readB) {
      out.push_back({axis, sa.name, sb.name, "n/a", "n/a", 0, unreadable[readA ? j : i], {}});
      continue;
    }
    const StudyPredictions &pa = *readA, &pb = *readB;
    for (const auto& la : pa.labels)
      for (const auto& lb : pb.labels) {
        if (axis != "learner" && la != lb) continue;  // the same learner on another atlas or other sources
        exporting::StudyComparison c{axis, sa.name, sb.name, la, lb, 0, "", {}};
        // Seeded from the first study's seed; the pair's stream follows from the two qualified names.
        c.seed = cv::DeriveSeed(sa.config.seed, 0x6261746368ULL);  // "batch"
        const auto itA = pa.learners.find(la), itB = pb.learners.find(lb);
        if (itA == pa.learners.end() || itB == pb.learners.end()) {
          c.refused = fmt::format("predictions.tsv of study {} has no rows of learner {}", itA == pa.learners.end() ? sa.name : sb.name,
                                  itA == pa.learners.end() ? la : lb);
          out.push_back(std::move(c));
          continue;
        }
        const auto &a = itA->second, &b = itB->second;
        c.refused = pa.task != pb.task ? "the tasks differ" : FoldsDiffer(a, b, pa, pb);
        if (c.refused.empty()) {
          PairedOutcomes paired = AsOutcomes(a, b, pa);
          paired.a.label = sa.name + "/" + la;
          paired.b.label = sb.name + "/" + lb;
          const int swaps = std::max(sa.config.statistics.pairedSwaps, sb.config.statistics.pairedSwaps);
          c.tests = ComparePair(PairedTestSettings{pa.task, paired.y, swaps, c.seed}, paired.a, paired.b);
          for (auto& t : c.tests) {  // the table names the studies and learners in columns of their own
            t.learnerA = la;
            t.learnerB = lb;
          }
        }
        out.push_back(std::move(c));
      }
  }
  return out;
}

}  // namespace neuromkl::pipeline
