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
#include "neuromkl/gram/owners.hpp"
#include "neuromkl/gram/compact.hpp"
#include "neuromkl/pipeline/batch_run.hpp"
#include "neuromkl/pipeline/kernel_stage.hpp"
#include "neuromkl/pipeline/study_context.hpp"
#endif

namespace neuromkl::pipeline {

#ifndef NEUROMKL_HAVE_MPI
KernelRanks::KernelRanks() = default;
KernelRanks::~KernelRanks() = default;
int ServeRunKernels(const std::string&, int) { return 0; }
int ServeStudyKernels(const config::StudyConfig&) { return 0; }
bool KernelsExceedRankBudget(const config::StudyConfig&, const Cohort&, std::size_t) { return false; }
int KernelHoldingRanks(const config::StudyConfig&, const Cohort&, std::size_t) { return 1; }
std::uint64_t RankMemoryBudget(const kernels::RegionKernelOptions& options) { return options.memoryBudgetBytes; }
bool HandKernelsToRanks(kernels::KernelSet&, double, const std::string&, std::shared_ptr<gram::KernelOwners>*, std::uint64_t*) { return false; }
struct HeldSources::Collected {};
std::unique_ptr<HeldSources> HeldSources::Begin(const config::StudyConfig&, const Cohort&, std::size_t) { return nullptr; }
HeldSources::~HeldSources() = default;
void HeldSources::Add(kernels::KernelSet&, std::shared_ptr<gram::KernelOwners>&) { throw std::logic_error("HeldSources: built without MPI"); }
std::shared_ptr<gram::KernelOwners> HeldSources::Finish(Eigen::Index, bool, bool) { throw std::logic_error("HeldSources: built without MPI"); }
bool DistributeKernels(std::size_t, const atlas::RegionIndex&, const kernels::RegionKernelOptions&) { return false; }
bool OwnKernels(std::size_t, const atlas::RegionIndex&, const kernels::RegionKernelOptions&) { return false; }
kernels::KernelSet DistributedRegionKernels(int, const std::vector<std::string>&, const std::vector<std::string>&, const atlas::RegionIndex&,
                                            const kernels::RegionKernelOptions&, kernels::RegionKernelReport*, std::shared_ptr<gram::KernelOwners>*) {
  throw std::logic_error("DistributedRegionKernels: built without MPI");
}
kernels::KernelSet OwnedKernelsFromStore(const exporting::KernelStoreIndex&, bool, bool, const std::string&, std::shared_ptr<gram::KernelOwners>*) {
  throw std::logic_error("OwnedKernelsFromStore: built without MPI");
}
#else

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr int kTagFailure = 31, kTagBlock = 32, kTagRing = 33, kTagReply = 34, kTagOwned = 35;
/// Rank 0's instructions: stop; a kernel stage gathered on rank 0; a kernel stage whose kernels stay on their owners
/// (every P-th kernel on each rank), after which the ranks answer kernel requests until rank 0 releases them; kernels
/// loaded from a store by their owners; kernels rank 0 formed, handed to their owners (HandKernelsToRanks).
/// A study of several sources held by the ranks: begin collecting each source's share, finish (serve them as one set),
/// abandon (drop them: rank 0 failed on the way).
constexpr int kStop = 0, kKernels = 1, kOwnKernels = 2, kLoadOwnKernels = 3, kHandedKernels = 4, kBeginHeldSources = 5, kFinishHeldSources = 6,
              kAbandonHeldSources = 7;
constexpr std::int64_t kRelease = -1;  ///< the request that ends the kernel requests of a study
bool gServing = false;  // rank 0: a KernelRanks is alive (a run, not a batch unit)
bool gStopped = false;

int Size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

/// Waits for a request. It spins (yielding the core) for 2 ms first: while a study's fits run, the next kernel
/// request or reply usually comes within that. Then it sleeps with a pause that grows to 1 ms, so that a rank
/// waiting long (for rank 0 running a study) uses next to no core and answers within a millisecond.
void Await(MPI_Request& request) {
  const auto start = Clock::now();
  auto pause = std::chrono::microseconds(20);
  for (int done = 0;;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (Clock::now() - start < std::chrono::milliseconds(2)) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(2 * pause, std::chrono::microseconds(1000));
  }
}

/// Rank 0's instruction to the others: {kStop}, or {kKernels or kOwnKernels, source index}.
void Instruct(int kind, int sourceIndex) {
  int message[2] = {kind, sourceIndex};
  MPI_Request request;
  MPI_Ibcast(message, 2, MPI_INT, 0, MPI_COMM_WORLD, &request);
  Await(request);
}

// Messages of any size, in pieces MPI's int counts can hold.
constexpr std::int64_t kPiece = std::int64_t{1} << 26;  // bytes (64 MiB: also the scratch of a request that cannot be held)

void BcastBytes(void* data, std::int64_t bytes) {
  auto* p = static_cast<char*>(data);
  for (std::int64_t at = 0; at < bytes; at += kPiece) {
    MPI_Request request;
    MPI_Ibcast(p + at, static_cast<int>(std::min(kPiece, bytes - at)), MPI_BYTE, 0, MPI_COMM_WORLD, &request);
    Await(request);
  }
}

void SendBytes(const void* data, std::int64_t bytes, int to, int tag) {
  const auto* p = static_cast<const char*>(data);
  for (std::int64_t at = 0; at < bytes; at += kPiece) {
    MPI_Request request;
    MPI_Isend(p + at, static_cast<int>(std::min(kPiece, bytes - at)), MPI_BYTE, to, tag, MPI_COMM_WORLD, &request);
    Await(request);
  }
}

void RecvBytes(void* data, std::int64_t bytes, int from, int tag) {
  auto* p = static_cast<char*>(data);
  for (std::int64_t at = 0; at < bytes; at += kPiece) {
    MPI_Request request;
    MPI_Irecv(p + at, static_cast<int>(std::min(kPiece, bytes - at)), MPI_BYTE, from, tag, MPI_COMM_WORLD, &request);
    Await(request);
  }
}

template <typename T>
std::int64_t Bytes(const std::vector<T>& v) {
  return static_cast<std::int64_t>(v.size() * sizeof(T));
}

// ---- kernel requests (kernels held by their owners: cv/kernel_owners.hpp) ----

/// Rank 0: a request to every rank. {op, fold, ints, reals, text bytes}, then the three payloads.
void SendRequest(const gram::OwnerRequest& request) {
  std::int64_t header[5] = {request.op, request.fold, static_cast<std::int64_t>(request.ints.size()), static_cast<std::int64_t>(request.reals.size()),
                            static_cast<std::int64_t>(request.text.size())};
  BcastBytes(header, sizeof header);
  BcastBytes(const_cast<std::int64_t*>(request.ints.data()), Bytes(request.ints));
  BcastBytes(const_cast<double*>(request.reals.data()), Bytes(request.reals));
  BcastBytes(const_cast<char*>(request.text.data()), static_cast<std::int64_t>(request.text.size()));
}

/// The other ranks: the next request, false when rank 0 released the kernels. A request this rank cannot hold (no
/// memory for its payload) is still received, piece by piece into a scratch buffer, so that every rank stays in step;
/// `failure` then says why, and the caller replies with it.
bool ReceiveRequest(gram::OwnerRequest& request, std::exception_ptr& failure) {
  std::int64_t header[5] = {};
  BcastBytes(header, sizeof header);
  if (header[0] == kRelease) return false;
  request.op = static_cast<int>(header[0]);
  request.fold = header[1];
  failure = nullptr;
  try {
    request.ints.resize(static_cast<std::size_t>(header[2]));
    request.reals.resize(static_cast<std::size_t>(header[3]));
    request.text.resize(static_cast<std::size_t>(header[4]));
  } catch (...) {
    failure = std::current_exception();
    std::vector<char> scratch(static_cast<std::size_t>(kPiece));
    for (const std::int64_t bytes : {header[2] * 8, header[3] * 8, header[4]})
      for (std::int64_t at = 0; at < bytes; at += kPiece) BcastBytes(scratch.data(), std::min(kPiece, bytes - at));
    return true;
  }
  BcastBytes(request.ints.data(), Bytes(request.ints));
  BcastBytes(request.reals.data(), Bytes(request.reals));
  BcastBytes(request.text.data(), static_cast<std::int64_t>(request.text.size()));
  return true;
}

void SendReply(const gram::OwnerReply& reply) {
  std::int64_t header[3] = {static_cast<std::int64_t>(reply.values.size()), static_cast<std::int64_t>(reply.text.size()),
                            static_cast<std::int64_t>(reply.error.size())};
  SendBytes(header, sizeof header, 0, kTagReply);
  SendBytes(reply.values.data(), Bytes(reply.values), 0, kTagReply);
  SendBytes(reply.text.data(), static_cast<std::int64_t>(reply.text.size()), 0, kTagReply);
  SendBytes(reply.error.data(), static_cast<std::int64_t>(reply.error.size()), 0, kTagReply);
}

gram::OwnerReply ReceiveReply(int from) {
  std::int64_t header[3] = {};
  RecvBytes(header, sizeof header, from, kTagReply);
  gram::OwnerReply reply;
  reply.values.resize(static_cast<std::size_t>(header[0]));
  reply.text.resize(static_cast<std::size_t>(header[1]));
  reply.error.resize(static_cast<std::size_t>(header[2]));
  RecvBytes(reply.values.data(), Bytes(reply.values), from, kTagReply);
  RecvBytes(reply.text.data(), static_cast<std::int64_t>(reply.text.size()), from, kTagReply);
  RecvBytes(reply.error.data(), static_cast<std::int64_t>(reply.error.size()), from, kTagReply);
  return reply;
}

/// Rank 0's side of kernels held by every rank: a request goes to all, rank 0 answers its own share while the others
/// answer theirs, then their replies are received in rank order. Released (the other ranks go back to waiting for
/// instructions) when the last user of the kernels lets go.
class MpiKernelOwners final : public gram::KernelOwners {
 public:
  MpiKernelOwners(std::unique_ptr<gram::KernelShard> local, std::size_t count, Eigen::Index subjects, bool compact, bool centred,
                  std::vector<int> ownerOf)
      : KernelOwners(Size(), count, subjects, compact, centred, std::move(ownerOf)), local_(std::move(local)) {}
  /// Rank 0's share, taken before the owners are released (HeldSources); no request may follow.
  std::unique_ptr<gram::KernelShard> TakeLocal() {
    taken_ = true;
    return std::move(local_);
  }
  ~MpiKernelOwners() override {
    // No request is in flight: every fold handle (which refers to this object) is gone.
    std::int64_t header[5] = {kRelease, 0, 0, 0, 0};
    BcastBytes(header, sizeof header);
    // (A source's kernels, kept by the ranks for the study: the study's handle reports its own requests.)
    spdlog::log(taken_ ? spdlog::level::debug : spdlog::level::info, "kernels: {} requests to the {} ranks holding the kernels took {:.2f} s (rank 0's share of the work included)",
                requests(), Owners(), requestSeconds());
    for (const auto& [kind, v] : requestsByKind()) spdlog::debug("kernels: {} {} requests, {:.3f} s", v.first, kind, v.second);
  }

 protected:
  void Exchange(const gram::OwnerRequest& request, const std::function<void(int, gram::OwnerReply&)>& consume) const override {
    SendRequest(request);
    gram::OwnerReply mine = local_->Execute(request);
    consume(0, mine);
    for (int p = 1; p < Owners(); ++p) {
      gram::OwnerReply theirs = ReceiveReply(p);
      consume(p, theirs);
    }
  }

 private:
  std::unique_ptr<gram::KernelShard> local_;
  bool taken_ = false;
};

/// The other ranks: answer kernel requests with this rank's share until rank 0 releases the kernels. Every request is
/// answered, a failure with its error (KernelShard::Execute never throws).
void ServeKernelRequests(gram::KernelShard& shard) {
  long served = 0;
  gram::OwnerRequest request;
  for (std::exception_ptr failure; ReceiveRequest(request, failure); ++served) {
    if (!failure) {
      SendReply(shard.Execute(request));
      continue;
    }
    gram::OwnerReply refused;
    refused.error = SerialiseError(failure);
    SendReply(refused);
  }
  spdlog::debug("kernels: {} kernel requests answered", served);
}

/// Rank 0's handle to the kernels the ranks hold once they serve requests. If it cannot be made, the ranks are
/// released before the failure goes on, so that they wait for instructions again.
std::shared_ptr<gram::KernelOwners> MakeOwners(std::unique_ptr<gram::KernelShard> local, std::size_t count, Eigen::Index subjects, bool compact,
                                             bool centred, std::vector<int> ownerOf = {}) {
  try {
    return std::make_shared<MpiKernelOwners>(std::move(local), count, subjects, compact, centred, std::move(ownerOf));
  } catch (...) {
    std::int64_t header[5] = {kRelease, 0, 0, 0, 0};
    BcastBytes(header, sizeof header);
    throw;
  }
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
    const std::string text = SerialiseError(mine);
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
    ThrowSerialisedError(text, fmt::format("rank {}", culprit));
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

/// The kernels that stay on their owners (`own`): every kernel's diagonal is agreed (each rank has its rows' in its
/// block (p, p)), rank 0 decides which regions stay with the one-process stage's rules and broadcasts them, and kept
/// kernel k is assembled on rank k mod P from every rank's blocks (rounded into the compact store there for a float32
/// study). Rank 0 gets the set's metadata (names, exclusions, diagonals) in `out`; every rank gets its share in `shard`.
bool KeepKernelsOnOwners(const StageInputs& in, std::int64_t n, std::int64_t count, const std::vector<int>& partners,
                         std::vector<std::vector<Eigen::MatrixXd>>& blocks, kernels::KernelSet& set, kernels::RegionKernelReport* report,
                         std::unique_ptr<gram::KernelShard>& shard) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int P = Size();
  const std::size_t R = blocks.empty() ? 0 : blocks[0].size();
  // 1. Every kernel's diagonal on every rank: rank p's rows, region by region.
  std::vector<double> mine(R * static_cast<std::size_t>(count));
  for (std::size_t r = 0; r < R; ++r)
    for (std::int64_t i = 0; i < count; ++i) mine[r * static_cast<std::size_t>(count) + static_cast<std::size_t>(i)] = blocks[0][r](i, i);
  std::vector<int> counts(static_cast<std::size_t>(P)), displs(static_cast<std::size_t>(P));
  for (int p = 0; p < P; ++p) {
    counts[static_cast<std::size_t>(p)] = static_cast<int>(static_cast<std::int64_t>(R) * (BlockStart(n, p + 1, P) - BlockStart(n, p, P)));
    displs[static_cast<std::size_t>(p)] = static_cast<int>(static_cast<std::int64_t>(R) * BlockStart(n, p, P));
  }
  std::vector<double> gathered(R * static_cast<std::size_t>(n));
  MPI_Allgatherv(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, gathered.data(), counts.data(), displs.data(), MPI_DOUBLE, MPI_COMM_WORLD);
  std::vector<std::string> names;  // every region's, as every rank's header lists them
  for (const auto& info : set.info) names.push_back(info.name);
  std::vector<Eigen::VectorXd> diagonals(R, Eigen::VectorXd(n));
  for (int p = 0; p < P; ++p) {
    const std::int64_t first = BlockStart(n, p, P), rows = BlockStart(n, p + 1, P) - first;
    for (std::size_t r = 0; r < R; ++r)
      for (std::int64_t i = 0; i < rows; ++i)
        diagonals[r][first + i] = gathered[static_cast<std::size_t>(displs[static_cast<std::size_t>(p)]) + r * static_cast<std::size_t>(rows) + static_cast<std::size_t>(i)];
  }
  gathered = {};
  // 2. Which regions stay: as ExcludeEmptyRegions decides (no voxel left, or a zero kernel: a Gram matrix is zero
  // exactly when its diagonal is). Rank 0 runs that function on a stand-in set whose 1 x 1 "kernels" are zero exactly
  // when the kernels are, so its exclusions, warnings and their order are the one-process stage's.
  std::vector<std::int64_t> kept;
  std::int64_t keptCount = 0;
  std::exception_ptr disagreement;
  if (rank == 0) {
    kernels::KernelSet standIn;
    standIn.subjects = set.subjects;
    standIn.info = set.info;
    standIn.excluded = set.excluded;
    for (std::size_t r = 0; r < R; ++r) {
      standIn.kernels.push_back(Eigen::MatrixXd::Constant(1, 1, diagonals[r].cwiseAbs().sum()));
      if (set.info[r].features > 0 && diagonals[r].cwiseAbs().sum() > 0) kept.push_back(static_cast<std::int64_t>(r));
    }
    kernels::ExcludeEmptyRegions(standIn, *report);
    if (standIn.info.size() != kept.size())
      disagreement = std::make_exception_ptr(std::logic_error("kernels: the exclusions of the kernels kept on their owners disagree"));
    set.info = std::move(standIn.info);
    set.excluded = std::move(standIn.excluded);
    keptCount = static_cast<std::int64_t>(kept.size());
  }
  MPI_Bcast(&keptCount, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  kept.resize(static_cast<std::size_t>(keptCount));
  MPI_Bcast(kept.data(), static_cast<int>(keptCount), MPI_INT64_T, 0, MPI_COMM_WORLD);
  if (AnyFailure(disagreement)) return false;
  // 3. Kernel k to rank k mod P, assembled from every rank's blocks; each block is freed once sent.
  learners::KernelList own;
  gram::CompactKernelList ownCompact;
  ownCompact.centred = in.options.compact && in.options.compactCentre;
  std::exception_ptr failure;
  // A failure on the owner (memory for the kernel, the float32 range) is kept for the agreement below while the owner
  // goes on receiving every block (into `incoming`), so the messages of every rank stay in step.
  Eigen::MatrixXd incoming;
  for (std::int64_t k = 0; k < keptCount; ++k) {
    const auto r = static_cast<std::size_t>(kept[static_cast<std::size_t>(k)]);
    const int owner = static_cast<int>(k % P);
    if (rank == owner) {
      Eigen::MatrixXd K;
      if (!failure) {
        try {
          K.resize(n, n);
        } catch (...) {
          failure = std::current_exception();
        }
      }
      const auto place = [&](int p, int q, const Eigen::MatrixXd& block) {
        if (failure) return;
        const auto ap = BlockStart(n, p, P), aq = BlockStart(n, q, P);
        K.block(ap, aq, block.rows(), block.cols()) = block;
        if (p != q) K.block(aq, ap, block.cols(), block.rows()) = block.transpose();
      };
      for (std::size_t b = 0; b < partners.size(); ++b) place(rank, partners[b], blocks[b][r]);
      for (int p = 0; p < P; ++p) {
        if (p == rank) continue;
        for (int q : PartnersOf(p, P)) {
          incoming.resize(BlockStart(n, p + 1, P) - BlockStart(n, p, P), BlockStart(n, q + 1, P) - BlockStart(n, q, P));
          RecvBytes(incoming.data(), static_cast<std::int64_t>(incoming.size()) * 8, p, kTagOwned);
          place(p, q, incoming);
        }
      }
      if (!failure) {
        try {
          if (!in.options.compact) own.push_back(std::move(K));
          else  // rounded as the one-process stage rounds each kernel as it is formed
            ownCompact.kernels.push_back(gram::CompactKernel(K, in.options.compactCentre, in.options.compactWhere + ": kernel \"" + names[r] + "\""));
        } catch (...) {
          failure = std::current_exception();
        }
      }
    } else {
      for (std::size_t b = 0; b < partners.size(); ++b) SendBytes(blocks[b][r].data(), static_cast<std::int64_t>(blocks[b][r].size()) * 8, owner, kTagOwned);
    }
    for (auto& b : blocks) b[r] = Eigen::MatrixXd();
  }
  if (AnyFailure(failure)) return false;
  if (in.options.compact) shard = std::make_unique<gram::KernelShard>(rank, P, std::move(ownCompact));
  else shard = std::make_unique<gram::KernelShard>(rank, P, std::move(own));
  if (rank == 0) {
    for (const auto r : kept) set.rawDiagonals.push_back(std::move(diagonals[static_cast<std::size_t>(r)]));
    set.distributed = true;
    set.ownedCompact = in.options.compact;
    set.compact.centred = ownCompact.centred;
  }
  return true;
}

/// Every rank's part of loading a kernel store into the ranks that hold its kernels (OwnedKernelsFromStore). The
/// description is text from rank 0 (every rank sees the store's folder): "float32 files, round, centre" flags, the
/// subjects, `where`, then one "file \t checksum \t name" line per kernel. Rank 0 gets each kernel's float64 diagonal
/// in `diagonals` for float64 files (a float32 store's are in its index). False on the other ranks when some rank
/// failed (rank 0 throws).
bool LoadOwnedKernels(std::string description, std::unique_ptr<gram::KernelShard>& shard, std::vector<Eigen::VectorXd>* diagonals) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int P = Size();
  std::int64_t bytes = static_cast<std::int64_t>(description.size());
  BcastBytes(&bytes, sizeof bytes);
  description.resize(static_cast<std::size_t>(bytes));
  BcastBytes(description.data(), bytes);
  std::vector<std::vector<std::string>> lines;
  {
    std::string line;
    std::vector<std::string> fields(1);
    for (const char c : description) {
      if (c == '\n') {
        lines.push_back(std::move(fields));
        fields.assign(1, "");
      } else if (c == '\t') {
        fields.emplace_back();
      } else {
        fields.back() += c;
      }
    }
  }
  const bool float32Files = lines.at(0).at(0) == "1", round = lines.at(0).at(1) == "1", centre = lines.at(0).at(2) == "1";
  const auto n = static_cast<Eigen::Index>(std::stoll(lines.at(1).at(0)));
  const std::string& where = lines.at(2).at(0);
  const std::size_t R = lines.size() - 3;
  learners::KernelList own;
  gram::CompactKernelList ownCompact;
  ownCompact.centred = float32Files ? centre : round && centre;
  std::vector<Eigen::VectorXd> mine;
  std::exception_ptr failure;
  for (std::size_t k = static_cast<std::size_t>(rank); k < R && !failure; k += static_cast<std::size_t>(P)) {
    const auto& e = lines[3 + k];
    try {
      if (float32Files) {
        ownCompact.kernels.push_back(exporting::ReadStoreKernelFloat32(e.at(0), e.at(1), n));
        continue;
      }
      Eigen::MatrixXd K = exporting::ReadStoreKernel(e.at(0), e.at(1));
      if (K.rows() != n || K.cols() != n)
        throw InputError("store:Corrupt", e.at(0), fmt::format("expected a {0} x {0} kernel (= subjects), found {1} x {2}", n, K.rows(), K.cols()));
      mine.push_back(K.diagonal());
      if (round) ownCompact.kernels.push_back(gram::CompactKernel(K, centre, where + ": kernel \"" + e.at(2) + "\""));
      else own.push_back(std::move(K));
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (AnyFailure(failure)) return false;
  if (float32Files || round) shard = std::make_unique<gram::KernelShard>(rank, P, std::move(ownCompact));
  else shard = std::make_unique<gram::KernelShard>(rank, P, std::move(own));
  if (!float32Files) {  // each kernel's diagonal to rank 0, in kernel order
    for (std::size_t k = 0; k < R; ++k) {
      const int owner = static_cast<int>(k % static_cast<std::size_t>(P));
      if (rank == 0 && owner == 0) diagonals->push_back(mine[k / static_cast<std::size_t>(P)]);
      else if (rank == owner) SendBytes(mine[k / static_cast<std::size_t>(P)].data(), n * 8, 0, kTagOwned);
      else if (rank == 0) {
        diagonals->emplace_back(n);
        RecvBytes(diagonals->back().data(), n * 8, owner, kTagOwned);
      }
    }
  }
  return true;
}

/// Every rank's part of one distributed kernel stage. Rank 0 passes its inputs and gets the kernel
/// set; the other ranks pass nullptr (they rebuild the inputs from `study`) and get nothing.
/// With `own` the kernels stay on their owners (KeepKernelsOnOwners): each rank gets its share in `shard`.
/// Returns false on the other ranks when some rank failed (rank 0 throws instead).
bool RunStage(const StageInputs* given, const config::StudyConfig* study, int sourceIndex, std::exception_ptr studyFailure, kernels::KernelSet* out,
              kernels::RegionKernelReport* report, const StageInputs* prepared = nullptr, std::exception_ptr preparedFailure = nullptr, bool own = false,
              std::unique_ptr<gram::KernelShard>* shard = nullptr) {
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

  // 5. Rank 0 gathers the intensity scales and the counts, and the blocks (region by region) unless the kernels
  // stay on their owners.
  std::vector<double> scales(in.options.intensity == kernels::IntensityScaling::None ? 0 : static_cast<std::size_t>(n));
  if (!scales.empty()) {
    std::vector<int> counts(static_cast<std::size_t>(P)), displs(static_cast<std::size_t>(P));
    for (int p = 0; p < P; ++p) {
      displs[static_cast<std::size_t>(p)] = static_cast<int>(BlockStart(n, p, P));
      counts[static_cast<std::size_t>(p)] = static_cast<int>(BlockStart(n, p + 1, P) - BlockStart(n, p, P));
    }
    MPI_Gatherv(rows.intensityScale.data(), static_cast<int>(count), MPI_DOUBLE, scales.data(), counts.data(), displs.data(), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  }
  // Rank 0's set and report, once the kernels are where they stay (the exclusions are in the report already).
  const auto finish = [&](kernels::RegionKernelReport& rep) {
    set.intensityScale = std::move(scales);
    set.nonZeroInsideAtlas = nonZero[0];
    set.nonZeroOutsideAtlas = nonZero[1];
    rep.readSeconds = readSeconds;
    rep.productSeconds = Since(t1);
    rep.subjectBlocks = static_cast<std::size_t>(P);
    rep.dataBytes = static_cast<std::uint64_t>(n * V) * sizeof(float);
    rep.peakDataBytes = static_cast<std::uint64_t>(2 * maxRows * V) * sizeof(float);
    rep.droppedVoxels = static_cast<std::int64_t>(std::count_if(rows.nonFiniteCount.begin(), rows.nonFiniteCount.end(), [](std::int32_t c) { return c > 0; }));
    rep.ranks = P;
    rep.totalSeconds = Since(start);
    *out = std::move(set);
  };
  if (own) {
    kernels::RegionKernelReport unused;
    kernels::RegionKernelReport& rep = report ? *report : unused;
    rep = kernels::RegionKernelReport{};
    const bool ok = KeepKernelsOnOwners(in, n, count, partners, blocks, set, &rep, *shard);  // rank 0 throws a failure instead
    if (rank != 0) return ok;
    finish(rep);
    return true;
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
  kernels::RegionKernelReport& rep = *report;
  rep = kernels::RegionKernelReport{};
  kernels::ExcludeEmptyRegions(set, rep);
  finish(rep);
  return true;
}

std::uint64_t Budget(const kernels::RegionKernelOptions& options) {
  return options.memoryBudgetBytes ? options.memoryBudgetBytes : PhysicalMemoryBytes() / 4;
}

/// Whether kernels of `bytes` over `subjects` subjects are held by the ranks of this job: over the per-rank budget,
/// at least one subject per rank, and MPI calls allowed from the fold tasks' threads. `why`: the reason they are
/// not, when they exceed the budget.
bool HeldByRanks(std::uint64_t bytes, std::size_t subjects, std::uint64_t budget, std::string* why = nullptr) {
  if (Size() < 2 || bytes <= budget) return false;
  if (subjects < static_cast<std::size_t>(Size())) {
    if (why) *why = fmt::format("fewer subjects ({}) than ranks ({})", subjects, Size());
    return false;
  }
  if (!MpiThreadsSerialized()) {
    if (why) *why = "this MPI library does not allow calls from several threads (MPI_THREAD_SERIALIZED)";
    return false;
  }
  return true;
}

/// HeldByRanks, with a warning when the kernels exceed the budget but the ranks cannot hold them (`what`, if not empty,
/// says which kernels: "tabular", "several sources").
bool HeldByRanksOrWarn(std::uint64_t bytes, std::size_t subjects, std::uint64_t budget, const std::string& what) {
  std::string why;
  if (HeldByRanks(bytes, subjects, budget, &why)) return true;
  if (!why.empty())
    spdlog::warn("kernels: the study's kernels ({}{:.3g} MiB) exceed the per-rank budget, but {}: rank 0 holds them alone", what.empty() ? "" : what + ", ",
                 static_cast<double>(bytes) / 1048576.0, why);
  return false;
}

/// Budget of a study's kernels.memory_budget_mb (0: a quarter of the memory).
std::uint64_t BudgetOfMb(double budgetMb) {
  kernels::RegionKernelOptions options;
  options.memoryBudgetBytes = static_cast<std::uint64_t>(budgetMb * 1048576.0);
  return Budget(options);
}

std::uint64_t KernelBytes(std::size_t regions, std::size_t subjects, bool compact) {
  return static_cast<std::uint64_t>(regions) * subjects * subjects * (compact ? sizeof(float) : sizeof(double));
}

}  // namespace

KernelRanks::KernelRanks() {
  gServing = MpiActive() && MpiRank() == 0;
  gStopped = false;
}

KernelRanks::~KernelRanks() {
  if (gServing && !gStopped) Instruct(kStop, 0);
  gServing = false;
  gStopped = true;
}

/// Each rank's share of a study of several sources, collected source by source (rank 0's and the others').
struct HeldSources::Collected {
  learners::KernelList own;
  gram::CompactKernelList ownCompact;
};

namespace {
/// The global indices of rank `rank`'s kernels when the sources' kernels (`counts` per source, in order) are dealt
/// source by source from rank 0 (gram::BlockOwners).
std::vector<Eigen::Index> HeldGlobals(const std::vector<std::int64_t>& counts, int rank, int P) {
  std::vector<Eigen::Index> globals;
  std::int64_t start = 0;
  for (const std::int64_t c : counts) {
    for (std::int64_t k = rank; k < c; k += P) globals.push_back(start + k);
    start += c;
  }
  return globals;
}

/// Every rank's part of HeldSources::Finish: the kernels per source (`counts`) and the store's flags, given on rank 0 and
/// received by the others, then this rank's collected share as one shard. False on the other ranks when some rank
/// failed (rank 0 throws instead).
bool FinishCollected(HeldSources::Collected& collected, std::vector<std::int64_t>& counts, bool& compact, bool& centred,
                     std::unique_ptr<gram::KernelShard>& shard) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int P = Size();
  std::int64_t header[3] = {static_cast<std::int64_t>(counts.size()), compact ? 1 : 0, centred ? 1 : 0};  // rank 0's
  BcastBytes(header, sizeof header);
  counts.resize(static_cast<std::size_t>(header[0]));
  BcastBytes(counts.data(), Bytes(counts));
  compact = header[1] != 0;
  centred = header[2] != 0;
  std::vector<Eigen::Index> globals = HeldGlobals(counts, rank, P);
  std::exception_ptr failure;
  const std::size_t held = compact ? collected.ownCompact.size() : collected.own.size();
  if (held != globals.size())
    failure = std::make_exception_ptr(std::logic_error(fmt::format("rank {} holds {} kernels of the sources, expected {}", rank, held, globals.size())));
  if (AnyFailure(failure)) return false;
  collected.ownCompact.centred = centred;
  if (compact) shard = std::make_unique<gram::KernelShard>(rank, P, std::move(collected.ownCompact), std::move(globals));
  else shard = std::make_unique<gram::KernelShard>(rank, P, std::move(collected.own), std::move(globals));
  return true;
}

/// The other ranks' side of HandKernelsToRanks: receive this rank's share (kernel k for k mod P = rank). A share this
/// rank cannot hold is still received (into a scratch kernel) so that the messages stay in step; the failure is then
/// agreed on. False when some rank failed.
bool ReceiveHandedKernels(std::unique_ptr<gram::KernelShard>& shard) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int P = Size();
  std::int64_t header[4] = {};
  BcastBytes(header, sizeof header);
  const auto R = static_cast<std::size_t>(header[0]);
  const auto n = static_cast<Eigen::Index>(header[1]);
  const bool compact = header[2] != 0;
  learners::KernelList own;
  gram::CompactKernelList ownCompact;
  ownCompact.centred = header[3] != 0;
  std::exception_ptr failure;
  Eigen::MatrixXd scratch;
  Eigen::MatrixXf scratchCompact;
  for (std::size_t k = static_cast<std::size_t>(rank); k < R; k += static_cast<std::size_t>(P)) {
    if (!failure) {
      try {
        if (compact) ownCompact.kernels.emplace_back(n, n);
        else own.emplace_back(n, n);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    if (compact) {
      if (failure) scratchCompact.resize(n, n);
      float* into = failure ? scratchCompact.data() : ownCompact.kernels.back().data();
      RecvBytes(into, static_cast<std::int64_t>(n) * n * 4, 0, kTagOwned);
    } else {
      if (failure) scratch.resize(n, n);
      double* into = failure ? scratch.data() : own.back().data();
      RecvBytes(into, static_cast<std::int64_t>(n) * n * 8, 0, kTagOwned);
    }
  }
  if (AnyFailure(failure)) return false;
  if (compact) shard = std::make_unique<gram::KernelShard>(rank, P, std::move(ownCompact));
  else shard = std::make_unique<gram::KernelShard>(rank, P, std::move(own));
  return true;
}

/// The other ranks' side of one study: take part in its kernel stages and answer requests on the kernels they hold,
/// until rank 0 says stop. `study` is null when it could not be read here (`studyFailure`).
int ServeStudy(const std::optional<config::StudyConfig>& study, std::exception_ptr studyFailure) {
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
  std::unique_ptr<HeldSources::Collected> collected;
  for (;;) {
    int message[2] = {kStop, 0};
    MPI_Request request;
    MPI_Ibcast(message, 2, MPI_INT, 0, MPI_COMM_WORLD, &request);
    Await(request);
    if (message[0] == kStop) return kExitOk;
    if (message[0] == kBeginHeldSources) {
      collected = std::make_unique<HeldSources::Collected>();
      continue;
    }
    if (message[0] == kAbandonHeldSources) {
      collected.reset();
      continue;
    }
    std::unique_ptr<gram::KernelShard> shard;
    bool ok = false;
    const bool finish = message[0] == kFinishHeldSources;
    try {
      if (finish) {
        std::vector<std::int64_t> counts;
        bool compact = false, centred = false;
        ok = collected && FinishCollected(*collected, counts, compact, centred, shard);
      } else if (message[0] == kHandedKernels) {
        ok = ReceiveHandedKernels(shard);
      } else if (message[0] == kLoadOwnKernels) {
        ok = LoadOwnedKernels("", shard, nullptr);
      } else {
        const bool usePrepared = prepared && message[1] < 0;
        ok = RunStage(nullptr, study ? &*study : nullptr, message[1], studyFailure, nullptr, nullptr, usePrepared ? &*prepared : nullptr, preparedFailure,
                      message[0] == kOwnKernels, &shard);
      }
    } catch (const std::exception& e) {  // not expected: failures are reported through rank 0
      spdlog::error("kernels: {}", e.what());
    }
    // The kernels stay here: this rank answers rank 0's requests on its share until rank 0 lets go of them. In a study
    // of several sources held by the ranks, each source's share is then kept in `collected` until rank 0 finishes (the
    // study's kernels as one set, served here) or abandons it.
    if (ok && shard) ServeKernelRequests(*shard);
    if (finish) collected.reset();
    else if (collected && ok && shard) shard->TakeKernels(collected->own, collected->ownCompact);
  }
}
}  // namespace

int ServeRunKernels(const std::string& studyPath, int threads) {
  std::optional<config::StudyConfig> study;
  std::exception_ptr studyFailure;
  try {
    study = config::LoadStudyConfig(studyPath);
    if (threads >= 0) study->threads = threads;
  } catch (...) {
    studyFailure = std::current_exception();  // reported by rank 0, which fails on the same file
  }
  return ServeStudy(study, studyFailure);
}

int ServeStudyKernels(const config::StudyConfig& study) { return ServeStudy(study, nullptr); }


int KernelHoldingRanks(const config::StudyConfig& study, const Cohort& cohort, std::size_t kernelCount) {
  return gServing && !gStopped && KernelsExceedRankBudget(study, cohort, kernelCount) ? Size() : 1;
}

bool KernelsExceedRankBudget(const config::StudyConfig& study, const Cohort& cohort, std::size_t kernelCount) {
  const std::size_t subjects = cohort.ids.size();
  const bool compact = study.kernels.precision == config::KernelPrecision::Float32;
  return HeldByRanks(KernelBytes(kernelCount, subjects, compact), subjects, BudgetOfMb(study.kernels.memoryBudgetMb));
}

std::uint64_t RankMemoryBudget(const kernels::RegionKernelOptions& options) { return Budget(options); }

namespace {
/// Rank 0: kernel k of `set` (rank 0's, in memory) to rank k mod P, which takes it (kHandedKernels); `set` then lists
/// them (KernelSet::distributed) and `owners` receives rank 0's handle. Rank 0 keeps every kernel until each rank holds
/// its share: a rank's failure (memory) is thrown here, and nothing rank 0 formed is lost before that.
void HandOutKernels(kernels::KernelSet& set, std::shared_ptr<gram::KernelOwners>* owners) {
  const int P = Size();
  const std::size_t R = set.Size();
  const bool compact = set.Compact();
  const auto n = static_cast<Eigen::Index>(set.subjects.size());
  Instruct(kHandedKernels, 0);
  std::int64_t header[4] = {static_cast<std::int64_t>(R), n, compact ? 1 : 0, set.compact.centred ? 1 : 0};
  BcastBytes(header, sizeof header);
  learners::KernelList own;
  gram::CompactKernelList ownCompact;
  ownCompact.centred = set.compact.centred;
  for (std::size_t k = 0; k < R; ++k) {
    const int owner = static_cast<int>(k % static_cast<std::size_t>(P));
    if (owner != 0) {
      if (compact) SendBytes(set.compact.kernels[k].data(), static_cast<std::int64_t>(set.compact.kernels[k].size()) * 4, owner, kTagOwned);
      else SendBytes(set.kernels[k].data(), static_cast<std::int64_t>(set.kernels[k].size()) * 8, owner, kTagOwned);
    }
  }
  AnyFailure(nullptr);  // throws the first failing rank's error
  std::vector<Eigen::VectorXd> diagonals;
  for (std::size_t k = 0; k < R; ++k) {
    const bool mine = k % static_cast<std::size_t>(P) == 0;
    if (compact) {
      if (mine) ownCompact.kernels.push_back(std::move(set.compact.kernels[k]));
      set.compact.kernels[k] = Eigen::MatrixXf();
    } else {
      diagonals.push_back(set.kernels[k].diagonal());
      if (mine) own.push_back(std::move(set.kernels[k]));
      set.kernels[k] = Eigen::MatrixXd();
    }
  }
  std::unique_ptr<gram::KernelShard> shard = compact ? std::make_unique<gram::KernelShard>(0, P, std::move(ownCompact))
                                                   : std::make_unique<gram::KernelShard>(0, P, std::move(own));
  // The set lists the kernels the ranks hold (kernels::KernelSet::distributed); a float32 set keeps its diagonals.
  const bool centred = set.compact.centred;
  set.kernels.clear();
  set.compact = {};
  set.compact.centred = centred;
  if (!compact) set.rawDiagonals = std::move(diagonals);
  set.distributed = true;
  set.ownedCompact = compact;
  *owners = MakeOwners(std::move(shard), R, n, compact, centred);
}
}  // namespace

bool HandKernelsToRanks(kernels::KernelSet& set, double budgetMb, const std::string& what, std::shared_ptr<gram::KernelOwners>* owners,
                        std::uint64_t* budgetBytes) {
  if (!gServing || gStopped || set.distributed || set.Size() == 0) return false;
  const std::uint64_t budget = BudgetOfMb(budgetMb);
  const std::size_t R = set.Size(), subjects = set.subjects.size();
  const std::uint64_t bytes = KernelBytes(R, subjects, set.Compact());
  if (!HeldByRanksOrWarn(bytes, subjects, budget, what)) return false;
  const int P = Size();
  spdlog::info("kernels: the study's {} kernels ({}, {:.3g} MiB) exceed the per-rank budget of {:.3g} MiB (kernels.memory_budget_mb): rank 0 hands "
               "each of the {} ranks its share (kernel k on rank k mod {}), which it computes with; rank 0 runs the study and receives results only",
               R, what, static_cast<double>(bytes) / 1048576.0, static_cast<double>(budget) / 1048576.0, P, P);
  HandOutKernels(set, owners);
  if (budgetBytes) *budgetBytes = budget;
  return true;
}

std::unique_ptr<HeldSources> HeldSources::Begin(const config::StudyConfig& study, const Cohort& cohort, std::size_t kernelCount) {
  if (!gServing || gStopped || study.kernels.source != config::KernelSource::Sources) return nullptr;
  const std::uint64_t budget = BudgetOfMb(study.kernels.memoryBudgetMb);
  const std::size_t count = kernelCount, subjects = cohort.ids.size();
  const std::uint64_t bytes = KernelBytes(count, subjects, study.kernels.precision == config::KernelPrecision::Float32);
  if (!HeldByRanksOrWarn(bytes, subjects, budget, "several sources")) return nullptr;
  const int P = Size();
  spdlog::info("kernels: the study's {} kernels (several sources, {:.3g} MiB, counted before they are formed) exceed the per-rank budget of {:.3g} MiB "
               "(kernels.memory_budget_mb): every source's kernels stay on the {} ranks as they are formed or read (kernel k of a source on rank k mod "
               "{}), each rank computes with its share; rank 0 runs the study and receives results only",
               count, static_cast<double>(bytes) / 1048576.0, static_cast<double>(budget) / 1048576.0, P, P);
  Instruct(kBeginHeldSources, 0);
  std::unique_ptr<HeldSources> held(new HeldSources);
  held->collected_ = std::make_unique<Collected>();
  held->budgetBytes_ = budget;
  return held;
}

HeldSources::~HeldSources() {
  if (!finished_) Instruct(kAbandonHeldSources, 0);
}

void HeldSources::Add(kernels::KernelSet& set, std::shared_ptr<gram::KernelOwners>& owners) {
  if (!owners) HandOutKernels(set, &owners);  // a source rank 0 formed (or read) itself
  auto* mpi = dynamic_cast<MpiKernelOwners*>(owners.get());
  if (!mpi || owners.use_count() != 1) throw std::logic_error("HeldSources::Add: the source's kernels must be held by the ranks, and by this handle only");
  const std::size_t count = owners->Count();
  std::unique_ptr<gram::KernelShard> local = mpi->TakeLocal();
  owners.reset();  // released: every rank keeps its share of this source for the study
  local->TakeKernels(collected_->own, collected_->ownCompact);
  counts_.push_back(static_cast<std::int64_t>(count));
}

std::shared_ptr<gram::KernelOwners> HeldSources::Finish(Eigen::Index subjects, bool compact, bool centred) {
  finished_ = true;
  Instruct(kFinishHeldSources, 0);
  std::unique_ptr<gram::KernelShard> shard;
  FinishCollected(*collected_, counts_, compact, centred, shard);  // throws the first failing rank's error
  std::vector<std::size_t> starts;
  std::size_t total = 0;
  for (const std::int64_t c : counts_) {
    starts.push_back(total);
    total += static_cast<std::size_t>(c);
  }
  return MakeOwners(std::move(shard), total, subjects, compact, centred, gram::BlockOwners(total, Size(), starts));
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

kernels::KernelSet OwnedKernelsFromStore(const exporting::KernelStoreIndex& index, bool round, bool centre, const std::string& where,
                                         std::shared_ptr<gram::KernelOwners>* owners) {
  const auto n = static_cast<Eigen::Index>(index.set.subjects.size());
  std::string description = fmt::format("{}\t{}\t{}\n{}\n{}\n", index.float32 ? 1 : 0, round ? 1 : 0, (index.float32 ? index.set.compact.centred : centre) ? 1 : 0, n, where);
  for (std::size_t k = 0; k < index.files.size(); ++k) description += index.files[k] + "\t" + index.hashes[k] + "\t" + index.set.info[k].name + "\n";
  Instruct(kLoadOwnKernels, 0);
  std::unique_ptr<gram::KernelShard> shard;
  std::vector<Eigen::VectorXd> diagonals;
  LoadOwnedKernels(description, shard, &diagonals);
  kernels::KernelSet set = index.set;
  if (!index.float32) set.rawDiagonals = std::move(diagonals);
  set.distributed = true;
  set.ownedCompact = index.float32 || round;
  set.compact.centred = index.float32 ? index.set.compact.centred : round && centre;
  *owners = MakeOwners(std::move(shard), set.Size(), n, set.ownedCompact, set.compact.centred);
  return set;
}

bool OwnKernels(std::size_t subjects, const atlas::RegionIndex& regions, const kernels::RegionKernelOptions& options) {
  if (!gServing || gStopped) return false;
  const std::uint64_t kernelsBytes = KernelBytes(regions.regions.size(), subjects, options.compact);
  if (!HeldByRanksOrWarn(kernelsBytes, subjects, Budget(options), "")) return false;
  spdlog::info("kernels: the study's {} kernels ({:.1f} MiB) exceed the per-rank budget of {:.1f} MiB (kernels.memory_budget_mb): each of the {} "
               "ranks keeps its share (kernel k on rank k mod {}) and computes with it; rank 0 runs the study and receives results only",
               regions.regions.size(), static_cast<double>(kernelsBytes) / 1048576.0, static_cast<double>(Budget(options)) / 1048576.0, Size(), Size());
  return true;
}

kernels::KernelSet DistributedRegionKernels(int sourceIndex, const std::vector<std::string>& subjectIds, const std::vector<std::string>& imagePaths,
                                            const atlas::RegionIndex& regions, const kernels::RegionKernelOptions& options,
                                            kernels::RegionKernelReport* report, std::shared_ptr<gram::KernelOwners>* owners) {
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
  Instruct(owners ? kOwnKernels : kKernels, sourceIndex);
  StageInputs in{subjectIds, imagePaths, regions, options};
  kernels::RegionKernelReport local;
  kernels::RegionKernelReport& rep = report ? *report : local;
  kernels::KernelSet set;
  std::unique_ptr<gram::KernelShard> shard;
  RunStage(&in, nullptr, sourceIndex, nullptr, &set, &rep, nullptr, nullptr, owners != nullptr, &shard);
  rep.rankBudgetBytes = budget;
  if (owners)
    *owners = MakeOwners(std::move(shard), set.Size(), static_cast<Eigen::Index>(n), set.ownedCompact, set.compact.centred);
  spdlog::info("kernels: distributed kernel stage on {} ranks: reading {:.2f} s, products and {} {:.2f} s", P, rep.readSeconds,
               owners ? "handing each kernel to its owner" : "gathering", rep.productSeconds);
  return set;
}

#endif

}  // namespace neuromkl::pipeline
