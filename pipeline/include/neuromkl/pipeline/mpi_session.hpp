#pragma once
// MPI for `neuromkl batch` when the binary was built with MPI (OpenMPI from Debian, found by
// CMake) and launched by mpirun: MPI is initialised only then, so a plain `neuromkl batch` (or a
// build without MPI) runs as one process.
namespace neuromkl::pipeline {

class MpiSession {
 public:
  MpiSession(int& argc, char**& argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

}  // namespace neuromkl::pipeline
