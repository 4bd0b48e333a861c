#pragma once
// Kernels formed inside every fold from features transformed with that fold's training statistics only:
// - harmonised image sources (ComBat inside the folds, combat.hpp): ComBat's site scale is per voxel, so a harmonised
//   kernel has no form in terms of the raw kernels (ALGORITHMS.md section 16). The store keeps the sources' voxel data,
//   and every fold fits ComBat on its training subjects (or their reference group) only, harmonises its training and test
//   subjects with those estimates, and forms their region kernels from the harmonised voxels;
// - tabular sources whose columns are imputed, harmonised (the same ComBat) or standardised (tabular.hpp) with the fold's
//   training rows' statistics: standardising over every subject would let held-out values into the training kernels;
// - full kernels of a source some subjects lack (missing_source "impute"): their rows imputed from the fold's training
//   rows having the source (KernelOrigin::present), which is an imputation of features in the fold, not of the cohort.
// The fold is then prepared exactly as a fold of kernels in memory (centring, normalisation, covariates, source scales):
// MemoryKernels over the fold's subjects. Kernels of other sources (connectivity, unharmonised images, tabular sources
// without fold statistics, precomputed) are read from their full kernels.
// Cost per fold: the ComBat fit (two passes over the training voxels) and the kernels, (l + m)^2 x features
// multiply-adds, where l + m are the fold's subjects; memory: the voxel data once (float32), the tabular columns once
// (float64) and the fold's kernels.
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/gram/combat.hpp"
#include "neuromkl/gram/store.hpp"
#include "neuromkl/gram/tabular.hpp"

namespace neuromkl::gram {

/// One harmonised source: its voxel data over the store's rows. ComBat's priors pool every voxel of the source.
struct HarmonisedSource {
  std::string name;
  std::shared_ptr<const Eigen::MatrixXf> voxels;  ///< rows x columns (the store's rows, in order)
};

/// A tabular source whose kernels every fold forms from its columns, each step fitted on the fold's training rows: missing
/// values imputed (FitTabular), the columns harmonised with ComBat (the store's design, as image sources are), then
/// standardised with the statistics of the imputed, harmonised training columns.
struct FoldTabularSource {
  std::string name;
  std::shared_ptr<const Eigen::MatrixXd> features;  ///< rows x columns (the store's rows, in order); NaN = missing
  std::vector<std::string> columns;                 ///< their names, for errors
  TabularSteps steps;
  bool harmonise = false;                           ///< ComBat on the imputed columns (needs the store's design)
  std::string where;                                ///< names the configuration in errors (e.g. "study.json /kernels/tabular")
};

/// One fold's fit of a tabular source: the training medians (`fit.fill`), the ComBat fit of the imputed training columns
/// (harmonised sources), and the mean and SD of the imputed, harmonised training columns (`fit.mean`, `fit.sd`).
struct TabularFoldFit {
  TabularFit fit;
  std::optional<ComBatModel> combat;
};

/// Where a kernel comes from: a full kernel (source -1 and tabular -1), the columns [begin, end) of a harmonised
/// source's voxels (source), or a function of some columns of a tabular source (tabular).
struct KernelOrigin {
  int source = -1;
  Eigen::Index begin = 0, end = 0;
  int tabular = -1;
  std::vector<Eigen::Index> columns;  ///< the tabular source's columns the kernel is a function of
  FeatureKernel function;
  /// A full kernel of a source some rows lack (their rows are never read): per row, whether the source has it, and the
  /// source's name for errors. Every fold imputes the lacking rows from its training rows that have it: in feature space
  /// phi_a = mean of phi_t over those rows, so K(a, j) = mean_t K(t, j) and K(a, b) = mean_{t,u} K(t, u), and after
  /// centring on the fold's training rows the imputed rows are zero. Null: every row has it.
  std::shared_ptr<const std::vector<char>> present;
  std::string presentSource;
  bool Full() const { return source < 0 && tabular < 0; }
  /// The columns [begin, end) of harmonised source `source`.
  static KernelOrigin Voxels(int source, Eigen::Index begin, Eigen::Index end) {
    KernelOrigin o;
    o.source = source;
    o.begin = begin;
    o.end = end;
    return o;
  }
};

/// The ComBat design over the store's rows.
struct Harmonisation {
  std::vector<int> sites;                  ///< per row: site label (an index into siteNames)
  std::vector<std::string> siteNames;
  Eigen::MatrixXd covariates;              ///< rows x p: preserved biological covariates (no intercept); p may be 0
  /// Per covariate column: the categorical covariate whose dummy it is, or -1 (Covariates::categoryOf). A missing value
  /// is NaN (every dummy of a category) and each fold imputes it from its training rows (ImputationFill).
  std::vector<int> categoryOf;
  std::vector<char> fitRow;                ///< 1 = in the reference group ComBat is fitted on; empty = every row
  ComBatOptions options;
  std::string where;                       ///< names the configuration in errors (e.g. "study.json /harmonisation")
  std::vector<std::string> covariateNames; ///< the columns of `covariates` ("column=level" for a dummy), for records
  std::string fitOn = "all";               ///< "all" or "column = value", for records
  std::vector<std::pair<std::string, int>> missing;  ///< per preserved covariate with missing values: how many rows lack it
  /// Rows per site, in siteNames order.
  std::vector<int> SiteCounts() const {
    std::vector<int> counts(siteNames.size(), 0);
    for (const int s : sites) ++counts[static_cast<std::size_t>(s)];
    return counts;
  }
};

/// Kernel K over rows whose first `trainCount` are a training set, with the rows lacking the source (`present`, per row)
/// imputed in place from the training rows having it: phi_a = mean_t phi_t, so K(a, j) = mean_t K(t, j) and K(a, b) =
/// mean_{t,u} K(t, u) (KernelOrigin::present). False, K unchanged, when no training row has the source.
bool ImputeLackingRows(Eigen::MatrixXd& K, const std::vector<char>& present, std::size_t trainCount);

/// Weights D (rows x kernels) of linear combinations sum_i D(i, k) phi_i of a source's features (maps: SubjectWeights), where
/// each row lacking the source among `train` stands for the mean of the rows of `train` having it (KernelOrigin::present),
/// rewritten as the same combinations of the rows having it: each lacking row's weight shared equally among them, its own
/// set to 0. `present`: per row of D. Unchanged when `train` lacks nobody (or has nobody with the source).
void MoveImputedWeights(Eigen::MatrixXd& D, const std::vector<char>& present, const std::vector<int>& train);

class FoldFormedKernels final : public KernelStore {
 public:
  /// `kernels`: every kernel over the rows (those formed per fold may be empty matrices: never read); `origins`: one
  /// per kernel; `design`: the ComBat design of the harmonised `sources` (null without them).
  /// `keptBytes`: how much the fold kernels kept for reuse (FoldKernels) may take; the last fold is always kept.
  FoldFormedKernels(std::shared_ptr<const KernelList> kernels, std::vector<KernelOrigin> origins, std::shared_ptr<const std::vector<HarmonisedSource>> sources,
                    std::shared_ptr<const Harmonisation> design, std::uint64_t keptBytes = 0,
                    std::shared_ptr<const std::vector<FoldTabularSource>> tabular = nullptr);
  std::size_t Count() const override { return kernels_->size(); }
  Eigen::Index Subjects() const override { return rows_; }
  bool Compact() const override { return false; }
  bool Centred() const override { return false; }
  void CheckPreprocessing(const Preprocessing&) const override {}
  std::unique_ptr<PreparedFold> OpenFold(const std::vector<int>& train, const std::vector<int>& test, const Preprocessing& pre) const override;
  Eigen::VectorXd LargestCentredSelfSimilarities(const std::vector<int>& train, const Preprocessing& pre) const override;
  /// Weights of the fold's harmonised images (map_r = sum_i D(i, r) x~_i, x~_i subject i harmonised with the fold's
  /// ComBat estimates): ColumnWeights turns them into maps.
  Eigen::MatrixXd SubjectWeights(const FoldModel& model, const Preprocessing& pre) const override;
  std::uint64_t FoldTaskBytes(const FoldTask& task) const override;
  std::unique_ptr<KernelStore> Subset(const std::vector<std::size_t>& which) const override;

  /// The weight vectors of maps over one fold's harmonised training images, over source `source`'s voxel columns: for
  /// each D (rows x kernels: SubjectWeights' output for a model of that fold), entry c of kernel k's columns is
  /// sum_i D(i, k) x*_ic over the training subjects i, x* harmonised with the fold's ComBat fit on `train`; 0 in the
  /// columns of no kernel. A map of raw images does not exist here: it would need every subject's own site transform.
  std::vector<Eigen::VectorXd> ColumnWeights(std::size_t source, const std::vector<int>& train, const std::vector<const Eigen::MatrixXd*>& weights,
                                             const std::string& fold) const;
  /// The same with the fold's fit already made (FitFoldFor(source, train, train, fold)).
  std::vector<Eigen::VectorXd> ColumnWeights(const ComBatModel& fit, std::size_t source, const std::vector<int>& train,
                                             const std::vector<const Eigen::MatrixXd*>& weights, const std::string& fold) const;
  const std::vector<HarmonisedSource>& Sources() const { return *sources_; }
  const std::vector<FoldTabularSource>& TabularSources() const { return *tabular_; }
  /// The fit of tabular source `source` on rows `train` (`everyColumn`: a fill for every column, as a model keeps).
  TabularFoldFit FitTabularFold(std::size_t source, const std::vector<int>& train, const std::string& fold, bool everyColumn = false) const;
  /// Tabular source `source` over rows `rows` with `fit` applied: filled, harmonised (each row's site and preserved
  /// covariates, those imputed from the first `trainCount` rows), standardised.
  Eigen::MatrixXd TabularFoldRows(const TabularFoldFit& fit, std::size_t source, const std::vector<int>& rows, std::size_t trainCount,
                                  const std::string& fold) const;
  const std::vector<KernelOrigin>& Origins() const { return origins_; }
  /// The ComBat fit of source `source` on the fit rows among `train` (errors name `fold`).
  ComBatModel FitFold(std::size_t source, const std::vector<int>& train, const std::string& fold) const;
  /// FitFold, and InputError combat:SiteNotInFit when a site of `rows` has no fitting subject among `train`.
  ComBatModel FitFoldFor(std::size_t source, const std::vector<int>& train, const std::vector<int>& rows, const std::string& fold) const;
  /// Every kernel over rows `rows` (the fold's training then test subjects), harmonised sources formed from their voxels
  /// harmonised with ComBat fitted on the fit rows among the first `trainCount` of them.
  KernelList FoldKernelsOver(const std::vector<int>& rows, std::size_t trainCount, const std::string& fold) const;
  /// FoldKernelsOver, the most recent folds kept within `keptBytes`: the stages after the nested CV open each outer fold
  /// several times (weights, patterns and attributions of every learner), and forming its kernels again would cost each
  /// time what the fold cost in the CV.
  std::shared_ptr<const KernelList> FoldKernels(const std::vector<int>& rows, std::size_t trainCount, const std::string& fold) const;

 private:
  /// Names the configuration, the source and the fold in errors.
  std::string Where(std::size_t source, const std::string& fold) const;
  /// The kernels of harmonised source `source`.
  std::vector<std::size_t> KernelsOf(std::size_t source) const;
  /// Some of the store's rows with their sites and preserved covariates (missing values imputed from the first
  /// `trainCount` of them, the fold's training rows), gathered once for every kernel of a fold.
  struct Rows {
    Eigen::VectorXi index;
    std::vector<int> sites;
    Eigen::MatrixXd covariates;
  };
  Rows RowsOf(const std::vector<int>& rows, std::size_t trainCount) const;
  /// The rows ComBat is fitted on among gathered training rows (`train`, gathered as `gathered`): those of the reference
  /// group, or every one; their positions in `train` and their sites.
  struct FitRows {
    std::vector<Eigen::Index> positions;
    std::vector<int> sites;
  };
  FitRows FitRowsOf(const std::vector<int>& train, const Rows& gathered) const;
  /// The design's options with its site names, for messages.
  ComBatOptions FitOptions() const;
  /// TabularFoldRows over rows already gathered.
  Eigen::MatrixXd TabularRows(const TabularFoldFit& fit, std::size_t source, const Rows& gathered, const std::string& fold) const;
  /// Where() for tabular source `source`.
  std::string TabularWhere(std::size_t source, const std::string& fold) const;
  /// Kernel k's voxels of `rows` (its columns), harmonised with `model`.
  Eigen::MatrixXd HarmonisedBlock(const ComBatModel& model, std::size_t k, const Rows& rows, const std::string& where) const;
  std::shared_ptr<const KernelList> kernels_;
  std::vector<KernelOrigin> origins_;
  std::shared_ptr<const std::vector<HarmonisedSource>> sources_;
  std::shared_ptr<const Harmonisation> design_;
  std::shared_ptr<const std::vector<FoldTabularSource>> tabular_;
  Eigen::Index rows_ = 0;
  struct KeptFold {
    std::vector<int> rows;
    std::size_t trainCount = 0;
    std::shared_ptr<const KernelList> kernels;
  };
  std::uint64_t keptBytes_ = 0;
  mutable std::mutex keptMutex_;
  mutable std::deque<KeptFold> kept_;  ///< most recent first
};

}  // namespace neuromkl::gram
