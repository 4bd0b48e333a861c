#pragma once
// The MPI ranks of a job started by mpirun (OpenMPI from Debian, found by CMake; docs/batch.md): the session, and the
// messages that the distributed kernel stage, the kernels held by the ranks and the batch scheduler exchange. This is
// the only module that includes mpi.h or links MPI (a ctest checks it). Built without MPI, or not launched by mpirun,
// every process is rank 0 of 1: the collectives return at once and nothing is sent.
#include <array>
#include <cstdint>
#include <exception>
#include <optional>
#include <vector>

namespace neuromkl::ranks {

/// MPI for the life of the process: initialised (MPI_THREAD_SERIALIZED) only when launched by mpirun, finalised at
/// the end. Serialized: a run whose kernels the ranks hold sends its kernel requests from the fold tasks' threads, one
/// at a time; a batch calls MPI from rank 0's main thread only.
class Session {
 public:
  Session(int& argc, char**& argv);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
};

bool Active();             ///< launched by mpirun with more than one rank
int Rank();                ///< 0 without MPI
int Size();                ///< 1 without MPI
bool ThreadsSerialized();  ///< MPI calls allowed from several threads, one at a time

/// The kinds of messages: each has its own tag, so that they never mix.
enum Tag : int { kTagRequest = 1, kTagAssign = 2, kTagFailure = 31, kTagBlock = 32, kTagRing = 33, kTagReply = 34, kTagOwned = 35 };

/// Collective: rank 0's bytes to every rank, in pieces MPI's int counts can hold. A rank waiting for them spins for
/// 2 ms, then sleeps with a pause growing to 1 ms: it uses next to no core while rank 0 runs a study.
void Broadcast(void* data, std::int64_t bytes);
/// Point to point, in pieces, with the same wait.
void Send(const void* data, std::int64_t bytes, int to, int tag);
void Receive(void* data, std::int64_t bytes, int from, int tag);
/// Collective: the sums over every rank, in place.
void SumInPlace(std::int32_t* data, std::int64_t count);
void SumInPlace(std::int64_t* data, std::int64_t count);
/// Collective: rank p's `counts[p]` doubles (`mine`) placed at `displs[p]` of `all`, on every rank (AllGather) or on
/// rank 0 only (Gather).
void AllGather(const double* mine, int count, double* all, const std::vector<int>& counts, const std::vector<int>& displs);
void Gather(const double* mine, int count, double* all, const std::vector<int>& counts, const std::vector<int>& displs);
/// Collective: `rows` rows of `columns` floats go to the next rank and as many come from the previous one, in place
/// (a ring; messages of at most 2^28 floats).
void RingShift(std::vector<float>& held, std::int64_t rows, std::int64_t columns);
/// Collective: every rank says whether its share of a step failed. Rank 0 throws the failure of the lowest failing rank
/// (its own exception as it is; another rank's rebuilt with the same kind, code, place and message, so that the exit
/// code and the message are those of a single-process run); the other ranks return true when any rank failed.
bool AnyFailure(std::exception_ptr mine);
/// Collective: rank 0's instruction {kind, argument} to the others, who wait for it.
void Instruct(int kind, int argument);
std::array<int, 2> AwaitInstruction();
/// Small integer messages (the batch scheduler): a blocking send and receive, and the rank whose message with `tag`
/// is waiting, if any.
void SendInts(const int* data, int count, int to, int tag);
void ReceiveInts(int* data, int count, int from, int tag);
std::optional<int> Waiting(int tag);

}  // namespace neuromkl::ranks
