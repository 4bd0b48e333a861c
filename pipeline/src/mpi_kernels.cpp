// The distributed kernel stage of `neuromkl run` under mpirun (docs/batch.md, "Subject data that do
// not fit one rank"). Rank p owns the subjects [p n / P, (p + 1) n / P) and decodes only
// them (each image is decoded once in the whole job). The non-finite rule is agreed by a sum of
// per-column counts, the reference row (subject 0 after that rule) is broadcast from rank 0, and
// the data blocks travel round a ring: at step s rank p holds block p - s and forms K_r(p, p - s)
// for every region with kernels::RegionKernelBlocks, the arithmetic of ComputeRegionKernels. With
// floor(P / 2) steps every block pair is formed exactly once, by one rank, with two data blocks in
// memory per rank. Rank 0 gathers the blocks into the kernels and goes on with the study alone.
// Every step ends with an agreement on failures, so an error on any rank (a bad image on rank 2)
// reaches rank 0, which throws it as the single-process stage would: no hang, no partial output.
#include "neuromkl/pipeline/mpi_kernels.hpp"

#include <stdexcept>

#ifdef NEUROMKL_HAVE_MPI
// The C API only: OpenMPI would otherwise pull in its deprecated C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/hash.hpp"
#include "neuromkl/pipeline/batch_run.hpp"
#include "neuromkl/pipeline/kernel_stage.hpp"
#include "neuromkl/pipeline/study_context.hpp"
#endif

namespace neuromkl::pipeline {

#ifndef NEUROMKL_HAVE_MPI
KernelRanks::KernelRanks() = default;
KernelRanks::~KernelRanks() = default;
int ServeRunKernels(const std::string&, int) { return 0; }
bool DistributeKernels(std::size_t, const atlas::RegionIndex&, const kernels::RegionKernelOptions&) { return false; }
kernels::KernelSet DistributedRegionKernels(int, const std::vector<std::string>&, const std::vector<std::string>&, const atlas::RegionIndex&,
                                            const kernels::RegionKernelOptions&, kernels::RegionKernelReport*) {
  throw std::logic_error("DistributedRegionKernels: built without MPI");
}
#else

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr int kTagFailure = 31, kTagBlock = 32, kTagRing = 33;
constexpr int kStop = 0, kKernels = 1;
bool gServing = false;  // rank 0: a KernelRanks is alive (a run, not a batch unit)
bool gStopped = false;

int Size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

/// Waits for a request without spinning a core: ranks that wait for rank 0 (which may run a whole
/// study meanwhile) sleep between tests.
void WaitIdle(MPI_Request& request) {
  for (int done = 0;;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

/// Rank 0's instruction to the others: {kStop} or {kKernels, source index}.
void Instruct(int kind, int sourceIndex) {
  int message[2] = {kind, sourceIndex};
  MPI_Request request;
  MPI_Ibcast(message, 2, MPI_INT, 0, MPI_COMM_WORLD, &request);
  WaitIdle(request);
}

/// "kind \0 code \0 where \0 message" of a failure; kind -1: not a neuromkl::Error.
std::string Serialise(std::exception_ptr failure) {
  std::string out;
  try {
    std::rethrow_exception(failure);
  } catch (const Error& e) {
    const std::string what = e.what();
    const std::string message = e.where().empty() ? what : what.substr(std::min(what.size(), e.where().size() + 2));
    out = std::to_string(static_cast<int>(e.kind()));
    out += '\0' + e.code() + '\0' + e.where() + '\0' + message;
  } catch (const std::exception& e) {
    out = "-1";
    out += std::string(1, '\0') + "" + '\0' + "" + '\0' + e.what();
  } catch (...) {
    out = "-1";
    out += std::string(1, '\0') + "" + '\0' + "" + '\0' + "unknown failure";
  }
  return out;
}

[[noreturn]] void ThrowSerialised(const std::string& text, int rank) {
  std::vector<std::string> parts(4);
  std::size_t k = 0;
  for (char c : text) {
    if (c == '\0' && k < 3) ++k;
    else parts[k] += c;
  }
  const int kind = std::stoi(parts[0]);
  if (kind < 0) throw std::runtime_error(fmt::format("rank {}: {}", rank, parts[3]));
  throw Error(static_cast<ErrorKind>(kind), parts[1], parts[2], parts[3]);
}

/// Every rank says whether its share of a step failed. Rank 0 throws the failure of the lowest
/// failing rank (its own exception as it is; another rank's rebuilt with the same kind, code,
/// place and message, so the exit code and the message are those of a single-process run); the
/// other ranks return true when any rank failed (and then abandon the stage).
bool AnyFailure(std::exception_ptr mine) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int P = Size();
  int failed = mine ? 1 : 0;
  std::vector<int> all(static_cast<std::size_t>(P));
  MPI_Allgather(&failed, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
  const auto first = std::find(all.begin(), all.end(), 1);
  if (first == all.end()) return false;
  const int culprit = static_cast<int>(first - all.begin());
  if (rank == 0 && culprit == 0) std::rethrow_exception(mine);
  if (rank == culprit) {
    const std::string text = Serialise(mine);
    MPI_Send(text.data(), static_cast<int>(text.size()), MPI_CHAR, 0, kTagFailure, MPI_COMM_WORLD);
  }
  if (rank == 0) {
    MPI_Status status;
    MPI_Probe(culprit, kTagFailure, MPI_COMM_WORLD, &status);
    int count = 0;
    MPI_Get_count(&status, MPI_CHAR, &count);
    std::string text(static_cast<std::size_t>(count), '\0');
    MPI_Recv(text.data(), count, MPI_CHAR, culprit, kTagFailure, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    spdlog::debug("kernels: rank {} failed", culprit);
    ThrowSerialised(text, culprit);
  }
  return true;
}

/// The first subject of rank p's block: blocks differ in size by at most one subject.
std::int64_t BlockStart(std::int64_t n, int p, int P) { return n * p / P; }

/// What every rank needs for the stage; rank 0 has it, the others rebuild it from the study.
struct StageInputs {
  std::vector<std::string> ids, paths;
  atlas::RegionIndex regions;
  kernels::RegionKernelOptions options;
};

StageInputs RebuildInputs(const config::StudyConfig& study, int sourceIndex) {
  const Cohort cohort = LoadStudyCohort(study);
  config::StudyConfig d = study;
  Cohort sc = cohort;
  if (sourceIndex >= 0) {
    const auto& source = study.kernels.sources.at(static_cast<std::size_t>(sourceIndex));
    d = SourceStudy(study, source);
    sc = SourceCohort(d, source, cohort);
  }
  StageInputs in;
  in.ids = sc.ids;
  in.paths = sc.images;
  std::vector<std::string> warnings;
  in.regions = StudyRegions(d, sc, warnings);
  in.options = RegionKernelOptionsOf(d, in.regions, "");
  return in;
}

std::string CohortDigest(const std::vector<std::string>& ids, const std::vector<std::string>& paths) {
  Hasher h;
  for (const auto& id : ids) h.Update(id);
  for (const auto& p : paths) h.Update(p);
  return h.Hex();
}

/// Sends `rows` rows of `columns` floats to the next rank and receives as many from the previous
/// one, in place, in messages of at most 2^28 floats.
void RingShift(std::vector<float>& held, std::int64_t rows, std::int64_t columns, int rank, int P) {
  const std::int64_t chunkRows = std::max<std::int64_t>(1, (std::int64_t{1} << 28) / std::max<std::int64_t>(1, columns));
  for (std::int64_t r = 0; r < rows; r += chunkRows) {
    const std::int64_t count = std::min(chunkRows, rows - r) * columns;
    MPI_Sendrecv_replace(held.data() + r * columns, static_cast<int>(count), MPI_FLOAT, (rank + 1) % P, kTagRing, (rank + P - 1) % P, kTagRing,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
}

/// The blocks rank p forms: (p, p) and (p, p - s) for s = 1..floor(P / 2); with P even, the pair at
/// distance P / 2 only by the rank of the lower half (the other rank of the pair would repeat it).
std::vector<int> PartnersOf(int p, int P) {
  std::vector<int> q = {p};
  for (int s = 1; s <= P / 2; ++s)
    if (!(P % 2 == 0 && s == P / 2 && p >= P / 2)) q.push_back((p - s + P) % P);
  return q;
}

/// Every rank's part of one distributed kernel stage. Rank 0 passes its inputs and gets the kernel
/// set; the other ranks pass nullptr (they rebuild the inputs from `study`) and get nothing.
/// Returns false on the other ranks when some rank failed (rank 0 throws instead).
bool RunStage(const StageInputs* given, const config::StudyConfig* study, int sourceIndex, std::exception_ptr studyFailure, kernels::KernelSet* out,
              kernels::RegionKernelReport* report, const StageInputs* prepared = nullptr, std::exception_ptr preparedFailure = nullptr) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int P = Size();
  const auto start = Clock::now();

  // 1. The inputs, and that every rank sees the same cohort.
  StageInputs rebuilt;
  std::exception_ptr failure = studyFailure;
  if (!given && !failure && !prepared) {
    try {
      rebuilt = RebuildInputs(*study, sourceIndex);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (!given && !failure && prepared) failure = preparedFailure;
  const StageInputs& in = given ? *given : prepared ? *prepared : rebuilt;
  char digest[33] = {};
  std::int64_t n = 0;
  if (rank == 0) {
    const std::string d = CohortDigest(in.ids, in.paths);
    std::copy(d.begin(), d.end(), digest);
    n = static_cast<std::int64_t>(in.ids.size());
  }
  MPI_Bcast(digest, 33, MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Bcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  if (rank != 0 && !failure && CohortDigest(in.ids, in.paths) != digest)
    failure = std::make_exception_ptr(std::runtime_error(fmt::format("rank {} sees another cohort than rank 0 (different subjects or image paths)", rank)));
  if (AnyFailure(failure)) return false;

  // 2. Each rank reads its own subjects.
  const auto t0 = Clock::now();
  const std::int64_t first = BlockStart(n, rank, P), count = BlockStart(n, rank + 1, P) - first;
  std::int64_t maxRows = 0;
  for (int p = 0; p < P; ++p) maxRows = std::max(maxRows, BlockStart(n, p + 1, P) - BlockStart(n, p, P));
  kernels::SubjectRows rows;
  try {
    const auto b = in.ids.begin() + first, pb = in.paths.begin() + first;
    rows = kernels::ReadSubjectRows({b, b + count}, {pb, pb + count}, in.regions, in.options);
  } catch (...) {
    failure = std::current_exception();
  }
  if (AnyFailure(failure)) return false;
  const double readSeconds = Since(t0);

  // 3. The non-finite rule over the whole cohort, and the reference row from rank 0 (subject 0).
  const auto t1 = Clock::now();
  const std::int64_t V = rows.columns;
  MPI_Allreduce(MPI_IN_PLACE, rows.nonFiniteCount.data(), static_cast<int>(V), MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
  std::int64_t nonZero[2] = {rows.nonZeroInsideAtlas, rows.nonZeroOutsideAtlas};
  MPI_Allreduce(MPI_IN_PLACE, nonZero, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  std::vector<std::int64_t> dropped;
  kernels::KernelSet set = kernels::RegionKernelHeader(in.ids, in.regions, rows.nonFiniteCount, in.options.nanPolicy, dropped);
  for (std::int64_t i = 0; i < count; ++i)
    for (auto c : dropped) rows.data[static_cast<std::size_t>(i * V + c)] = 0.0f;
  std::vector<float> reference(static_cast<std::size_t>(V));
  if (rank == 0) std::copy(rows.data.begin(), rows.data.begin() + V, reference.begin());
  MPI_Bcast(reference.data(), static_cast<int>(V), MPI_FLOAT, 0, MPI_COMM_WORLD);

  // 4. The ring: own block and one travelling block per rank.
  const auto offsets = kernels::RegionColumnOffsets(in.regions);
  const std::size_t R = offsets.size() - 1;
  std::vector<std::vector<Eigen::MatrixXd>> blocks;  // in PartnersOf order
  const auto partners = PartnersOf(rank, P);
  {
    std::vector<float> held(static_cast<std::size_t>(maxRows * V), 0.0f);
    std::copy(rows.data.begin(), rows.data.end(), held.begin());
    blocks.emplace_back();
    kernels::RegionKernelBlocks(rows.data.data(), count, rows.data.data(), count, V, reference.data(), offsets, true, blocks.back());
    std::size_t next = 1;
    for (int s = 1; s <= P / 2; ++s) {
      RingShift(held, maxRows, V, rank, P);
      const int q = (rank - s + P) % P;
      if (next >= partners.size() || partners[next] != q) continue;
      ++next;
      blocks.emplace_back();
      kernels::RegionKernelBlocks(rows.data.data(), count, held.data(), BlockStart(n, q + 1, P) - BlockStart(n, q, P), V, reference.data(), offsets, false,
                                  blocks.back());
    }
  }
  rows.data = {};

  // 5. Rank 0 gathers the blocks (region by region), the intensity scales and the counts.
  std::vector<double> scales(in.options.intensity == kernels::IntensityScaling::None ? 0 : static_cast<std::size_t>(n));
  if (!scales.empty()) {
    std::vector<int> counts(static_cast<std::size_t>(P)), displs(static_cast<std::size_t>(P));
    for (int p = 0; p < P; ++p) {
      displs[static_cast<std::size_t>(p)] = static_cast<int>(BlockStart(n, p, P));
      counts[static_cast<std::size_t>(p)] = static_cast<int>(BlockStart(n, p + 1, P) - BlockStart(n, p, P));
    }
    MPI_Gatherv(rows.intensityScale.data(), static_cast<int>(count), MPI_DOUBLE, scales.data(), counts.data(), displs.data(), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  }
  if (rank != 0) {
    for (const auto& b : blocks)
      for (const auto& K : b) MPI_Send(K.data(), static_cast<int>(K.size()), MPI_DOUBLE, 0, kTagBlock, MPI_COMM_WORLD);
    return true;
  }
  set.kernels.resize(R);
  for (auto& K : set.kernels) K.resize(n, n);
  auto place = [&](int p, int q, std::size_t r, const Eigen::MatrixXd& block) {
    const auto ap = BlockStart(n, p, P), aq = BlockStart(n, q, P);
    set.kernels[r].block(ap, aq, block.rows(), block.cols()) = block;
    if (p != q) set.kernels[r].block(aq, ap, block.cols(), block.rows()) = block.transpose();
  };
  for (std::size_t k = 0; k < partners.size(); ++k)
    for (std::size_t r = 0; r < R; ++r) place(0, partners[k], r, blocks[k][r]);
  blocks.clear();
  Eigen::MatrixXd incoming;
  for (int p = 1; p < P; ++p)
    for (int q : PartnersOf(p, P)) {
      incoming.resize(BlockStart(n, p + 1, P) - BlockStart(n, p, P), BlockStart(n, q + 1, P) - BlockStart(n, q, P));
      for (std::size_t r = 0; r < R; ++r) {
        MPI_Recv(incoming.data(), static_cast<int>(incoming.size()), MPI_DOUBLE, p, kTagBlock, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        place(p, q, r, incoming);
      }
    }
  set.intensityScale = std::move(scales);
  set.nonZeroInsideAtlas = nonZero[0];
  set.nonZeroOutsideAtlas = nonZero[1];

  kernels::RegionKernelReport& rep = *report;
  rep = kernels::RegionKernelReport{};
  rep.readSeconds = readSeconds;
  rep.productSeconds = Since(t1);
  rep.subjectBlocks = static_cast<std::size_t>(P);
  rep.dataBytes = static_cast<std::uint64_t>(n * V) * sizeof(float);
  rep.peakDataBytes = static_cast<std::uint64_t>(2 * maxRows * V) * sizeof(float);
  rep.droppedVoxels = static_cast<std::int64_t>(std::count_if(rows.nonFiniteCount.begin(), rows.nonFiniteCount.end(), [](std::int32_t c) { return c > 0; }));
  rep.ranks = P;
  kernels::ExcludeEmptyRegions(set, rep);
  rep.totalSeconds = Since(start);
  *out = std::move(set);
  return true;
}

std::uint64_t Budget(const kernels::RegionKernelOptions& options) {
  return options.memoryBudgetBytes ? options.memoryBudgetBytes : kernels::PhysicalMemoryBytes() / 4;
}

}  // namespace

KernelRanks::KernelRanks() { gServing = MpiActive() && MpiRank() == 0; }

KernelRanks::~KernelRanks() {
  if (gServing && !gStopped) Instruct(kStop, 0);
  gServing = false;
  gStopped = true;
}

int ServeRunKernels(const std::string& studyPath, int threads) {
  std::optional<config::StudyConfig> study;
  std::exception_ptr studyFailure;
  try {
    study = config::LoadStudyConfig(studyPath);
    if (threads >= 0) study->threads = threads;
  } catch (...) {
    studyFailure = std::current_exception();  // reported by rank 0, which fails on the same file
  }
  const ThreadLimit limit(study ? study->threads : 0);
  // An images study: its inputs are rebuilt while rank 0 prepares the same (cohort, hashes), not
  // after it asks for the stage (kernels.sources: each source's when it is asked for).
  std::optional<StageInputs> prepared;
  std::exception_ptr preparedFailure;
  if (study && study->kernels.source == config::KernelSource::Images) {
    try {
      prepared = RebuildInputs(*study, -1);
    } catch (...) {
      preparedFailure = std::current_exception();
      prepared.emplace();
    }
  }
  for (;;) {
    int message[2] = {kStop, 0};
    MPI_Request request;
    MPI_Ibcast(message, 2, MPI_INT, 0, MPI_COMM_WORLD, &request);
    WaitIdle(request);
    if (message[0] == kStop) return kExitOk;
    try {
      const bool usePrepared = prepared && message[1] < 0;
      RunStage(nullptr, study ? &*study : nullptr, message[1], studyFailure, nullptr, nullptr, usePrepared ? &*prepared : nullptr, preparedFailure);
    } catch (const std::exception& e) {  // not expected: the stage reports failures through rank 0
      spdlog::error("kernels: {}", e.what());
    }
  }
}

bool DistributeKernels(std::size_t subjects, const atlas::RegionIndex& regions, const kernels::RegionKernelOptions& options) {
  if (!gServing || gStopped) return false;
  const auto columns = static_cast<std::uint64_t>(kernels::RegionColumnOffsets(regions).back());
  const std::uint64_t bytes = subjects * columns * sizeof(float);
  if (bytes <= Budget(options)) return false;
  if (subjects < static_cast<std::size_t>(Size())) {
    spdlog::warn("kernels: fewer subjects ({}) than MPI ranks ({}): the kernel stage runs on rank 0 alone", subjects, Size());
    return false;
  }
  return true;
}

kernels::KernelSet DistributedRegionKernels(int sourceIndex, const std::vector<std::string>& subjectIds, const std::vector<std::string>& imagePaths,
                                            const atlas::RegionIndex& regions, const kernels::RegionKernelOptions& options,
                                            kernels::RegionKernelReport* report) {
  const int P = Size();
  const auto n = static_cast<std::uint64_t>(imagePaths.size());
  if (n == 0) throw InputError("input:EmptyCohort", "kernels", "no subject to read: the cohort is empty");
  const auto V = static_cast<std::uint64_t>(kernels::RegionColumnOffsets(regions).back());
  const std::uint64_t budget = Budget(options), perRank = 2 * ((n + static_cast<std::uint64_t>(P) - 1) / static_cast<std::uint64_t>(P)) * V * sizeof(float);
  spdlog::info("kernels: {:.1f} MiB of subject data exceed the per-rank budget of {:.1f} MiB (kernels.memory_budget_mb); distributed over {} ranks "
               "(each decodes its own ~{} subjects; kernel blocks by a ring exchange, {:.1f} MiB of subject data per rank)",
               static_cast<double>(n * V * sizeof(float)) / 1048576.0, static_cast<double>(budget) / 1048576.0, P, n / static_cast<std::uint64_t>(P),
               static_cast<double>(perRank) / 1048576.0);
  if (perRank > budget)
    spdlog::warn("kernels: each rank holds two subject blocks ({:.1f} MiB), more than the budget of {:.1f} MiB; run with more ranks to stay within it",
                 static_cast<double>(perRank) / 1048576.0, static_cast<double>(budget) / 1048576.0);
  Instruct(kKernels, sourceIndex);
  StageInputs in{subjectIds, imagePaths, regions, options};
  kernels::RegionKernelReport local;
  kernels::RegionKernelReport& rep = report ? *report : local;
  kernels::KernelSet set;
  RunStage(&in, nullptr, sourceIndex, nullptr, &set, &rep);
  rep.rankBudgetBytes = budget;
  spdlog::info("kernels: distributed kernel stage on {} ranks: reading {:.2f} s, products and gathering {:.2f} s", P, rep.readSeconds, rep.productSeconds);
  return set;
}

#endif

}  // namespace neuromkl::pipeline
