#include <cblas.h>
#include <oneapi/tbb/version.h>

#include <Eigen/Core>
#include <fmt/format.h>
#include <spdlog/version.h>

#include "neuromkl/io/nifti.hpp"
#include "neuromkl/pipeline/study_run.hpp"

namespace neuromkl::pipeline {

std::string NeuromklVersion() { return NEUROMKL_VERSION; }

std::map<std::string, std::string> Versions() {
  std::string blas = openblas_get_config();
  return {{"neuromkl", NEUROMKL_VERSION},
          {"itk", io::ItkVersion()},
          {"eigen", fmt::format("{}.{}.{}", EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION)},
          {"tbb", TBB_runtime_version()},
          {"openblas", blas},
          // The instruction set neuromkl was compiled for (NEUROMKL_ARCH): results differ between sets at rounding level.
          {"arch", NEUROMKL_ARCH_NAME},
          {"spdlog", fmt::format("{}.{}.{}", SPDLOG_VER_MAJOR, SPDLOG_VER_MINOR, SPDLOG_VER_PATCH)},
          {"fmt", fmt::format("{}.{}.{}", FMT_VERSION / 10000, FMT_VERSION / 100 % 100, FMT_VERSION % 100)}};
}

}  // namespace neuromkl::pipeline
