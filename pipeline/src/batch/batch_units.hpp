#pragma once
// The units a batch is made of, shared by the single-process runner and the MPI scheduler.
#include <memory>
#include <string>
#include <vector>

#include "neuromkl/export/batch_outputs.hpp"
#include "neuromkl/pipeline/batch_run.hpp"
#include "neuromkl/pipeline/study_context.hpp"

namespace neuromkl::pipeline {

/// Held: under mpirun, a study whose kernels exceed one rank's budget, run by rank 0 with every other rank holding
/// a share of its kernels (the other ranks' unit is to serve it).
enum class UnitKind : int { Kernels = 0, PermutationBlock = 1, Study = 2, Held = 3 };

struct Unit {
  UnitKind kind = UnitKind::Study;
  int study = 0;  ///< index into batch.studies
  int block = 0;  ///< permutation block
};

/// The error recorded for a failed study (its status/<name>.failed marker); empty if none.
std::string StudyFailure(const config::BatchConfig& batch, const std::string& study);

/// This process's studies: index % shards == shard.
std::vector<std::size_t> ShardStudies(const config::BatchConfig& batch, const BatchOptions& options);

/// Phases of units for the studies that still need running: (1) one kernel computation per
/// distinct kernel input, (2) every missing permutation block, (3) the studies. Units of a phase
/// are independent; a phase starts when the previous one is done. With `held` (under mpirun), the studies whose
/// kernels exceed one rank's budget (KernelsExceedRankBudget) get no units: they are listed there, to run one after
/// the other on every rank at once (their kernels held by the ranks).
std::vector<std::vector<Unit>> PlanUnits(const config::BatchConfig& batch, const BatchOptions& options, const std::vector<std::size_t>& todo,
                                         std::vector<std::size_t>* held = nullptr);

/// Runs one study into its folder (stamp, shared cache, checkpoint); never throws.
StudyOutcome RunStudyUnit(const config::BatchConfig& batch, std::size_t index, const BatchOptions& options);
/// Fills the batch's kernel cache for one study's kernel inputs.
void RunKernelUnit(const config::BatchConfig& batch, std::size_t index, const BatchOptions& options);
/// Computes and checkpoints one permutation block; `ctx` is reused while the study is the same.
void RunPermutationUnit(const config::BatchConfig& batch, std::size_t index, int block, const BatchOptions& options,
                        std::unique_ptr<StudyContext>& ctx);

/// Two studies of a batch (indices into batch.studies, first < second) that differ in exactly one matrix axis among
/// atlas, sources and learner, and in no other axis (cohort, target).
struct ComparedPair {
  std::size_t first = 0, second = 0;
  std::string axis;
};
std::vector<ComparedPair> ComparedStudyPairs(const config::BatchConfig& batch);
/// The ComparedStudyPairs whose studies are complete, compared by the paired tests (ComparePair) on their out-of-fold
/// predictions: the same learner label in both (every pair of learners along the learner axis). A pair whose subjects
/// or outer folds differ is listed with the reason and not tested.
std::vector<exporting::StudyComparison> CompareStudies(const config::BatchConfig& batch, const std::vector<exporting::StudyState>& states);

/// A study's config with the process options applied (threads).
config::StudyConfig EffectiveStudy(const config::BatchConfig& batch, std::size_t index, const BatchOptions& options);

}  // namespace neuromkl::pipeline
