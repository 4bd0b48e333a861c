#include "neuromkl/ranks/ranks.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "neuromkl/core/errors.hpp"

#ifdef NEUROMKL_HAVE_MPI
// The C API only: OpenMPI would otherwise pull in its deprecated C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <thread>
#endif

namespace neuromkl::ranks {

#ifndef NEUROMKL_HAVE_MPI
Session::Session(int&, char**&) {}
Session::~Session() = default;
bool Active() { return false; }
int Rank() { return 0; }
int Size() { return 1; }
bool ThreadsSerialized() { return false; }
void Broadcast(void*, std::int64_t) {}
void Send(const void*, std::int64_t, int, int) {}
void Receive(void*, std::int64_t, int, int) {}
void SumInPlace(std::int32_t*, std::int64_t) {}
void SumInPlace(std::int64_t*, std::int64_t) {}
void AllGather(const double* mine, int count, double* all, const std::vector<int>&, const std::vector<int>& displs) {
  std::copy(mine, mine + count, all + (displs.empty() ? 0 : displs[0]));
}
void Gather(const double* mine, int count, double* all, const std::vector<int>& counts, const std::vector<int>& displs) {
  AllGather(mine, count, all, counts, displs);
}
void RingShift(std::vector<float>&, std::int64_t, std::int64_t) {}
bool AnyFailure(std::exception_ptr mine) {
  if (mine) std::rethrow_exception(mine);
  return false;
}
void Instruct(int, int) {}
std::array<int, 2> AwaitInstruction() { return {0, 0}; }
void SendInts(const int*, int, int, int) {}
void ReceiveInts(int*, int, int, int) {}
std::optional<int> Waiting(int) { return std::nullopt; }
#else

namespace {
bool gInitialised = false;
int gRank = 0, gSize = 1;
int gThreadLevel = 0;

bool LaunchedByMpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK"); }

/// Waits for a request. It spins (yielding the core) for 2 ms first: while a study's fits run, the next kernel request
/// or reply usually comes within that. Then it sleeps with a pause that grows to 1 ms, so that a rank waiting long (for
/// rank 0 running a study) uses next to no core and answers within a millisecond.
void Await(MPI_Request& request) {
  using Clock = std::chrono::steady_clock;
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

constexpr std::int64_t kPiece = std::int64_t{1} << 26;  // bytes (64 MiB)
}  // namespace

Session::Session(int& argc, char**& argv) {
  if (!LaunchedByMpirun()) return;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  gThreadLevel = provided;
  gInitialised = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &gSize);
  if (gSize > 1) spdlog::set_pattern(fmt::format("[%H:%M:%S] [rank {}] %^%l%$ %v", gRank));
}

Session::~Session() {
  if (gInitialised) MPI_Finalize();
}

bool Active() { return gInitialised && gSize > 1; }
int Rank() { return gRank; }
int Size() { return gSize; }
bool ThreadsSerialized() { return gInitialised && gThreadLevel >= MPI_THREAD_SERIALIZED; }

void Broadcast(void* data, std::int64_t bytes) {
  auto* p = static_cast<char*>(data);
  for (std::int64_t at = 0; at < bytes; at += kPiece) {
    MPI_Request request;
    MPI_Ibcast(p + at, static_cast<int>(std::min(kPiece, bytes - at)), MPI_BYTE, 0, MPI_COMM_WORLD, &request);
    Await(request);
  }
}

void Send(const void* data, std::int64_t bytes, int to, int tag) {
  const auto* p = static_cast<const char*>(data);
  for (std::int64_t at = 0; at < bytes; at += kPiece) {
    MPI_Request request;
    MPI_Isend(p + at, static_cast<int>(std::min(kPiece, bytes - at)), MPI_BYTE, to, tag, MPI_COMM_WORLD, &request);
    Await(request);
  }
}

void Receive(void* data, std::int64_t bytes, int from, int tag) {
  auto* p = static_cast<char*>(data);
  for (std::int64_t at = 0; at < bytes; at += kPiece) {
    MPI_Request request;
    MPI_Irecv(p + at, static_cast<int>(std::min(kPiece, bytes - at)), MPI_BYTE, from, tag, MPI_COMM_WORLD, &request);
    Await(request);
  }
}

void SumInPlace(std::int32_t* data, std::int64_t count) { MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD); }
void SumInPlace(std::int64_t* data, std::int64_t count) { MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD); }

void AllGather(const double* mine, int count, double* all, const std::vector<int>& counts, const std::vector<int>& displs) {
  MPI_Allgatherv(mine, count, MPI_DOUBLE, all, counts.data(), displs.data(), MPI_DOUBLE, MPI_COMM_WORLD);
}

void Gather(const double* mine, int count, double* all, const std::vector<int>& counts, const std::vector<int>& displs) {
  MPI_Gatherv(mine, count, MPI_DOUBLE, all, counts.data(), displs.data(), MPI_DOUBLE, 0, MPI_COMM_WORLD);
}

void RingShift(std::vector<float>& held, std::int64_t rows, std::int64_t columns) {
  const int rank = gRank, P = gSize;
  const std::int64_t chunkRows = std::max<std::int64_t>(1, (std::int64_t{1} << 28) / std::max<std::int64_t>(1, columns));
  for (std::int64_t r = 0; r < rows; r += chunkRows) {
    const std::int64_t count = std::min(chunkRows, rows - r) * columns;
    MPI_Sendrecv_replace(held.data() + r * columns, static_cast<int>(count), MPI_FLOAT, (rank + 1) % P, kTagRing, (rank + P - 1) % P, kTagRing,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
}

bool AnyFailure(std::exception_ptr mine) {
  const int rank = gRank, P = gSize;
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

void Instruct(int kind, int argument) {
  int message[2] = {kind, argument};
  MPI_Request request;
  MPI_Ibcast(message, 2, MPI_INT, 0, MPI_COMM_WORLD, &request);
  Await(request);
}

std::array<int, 2> AwaitInstruction() {
  std::array<int, 2> message{0, 0};
  MPI_Request request;
  MPI_Ibcast(message.data(), 2, MPI_INT, 0, MPI_COMM_WORLD, &request);
  Await(request);
  return message;
}

void SendInts(const int* data, int count, int to, int tag) { MPI_Send(data, count, MPI_INT, to, tag, MPI_COMM_WORLD); }
void ReceiveInts(int* data, int count, int from, int tag) { MPI_Recv(data, count, MPI_INT, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }

std::optional<int> Waiting(int tag) {
  int flag = 0;
  MPI_Status status;
  MPI_Iprobe(MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &flag, &status);
  if (!flag) return std::nullopt;
  return status.MPI_SOURCE;
}
#endif

}  // namespace neuromkl::ranks
