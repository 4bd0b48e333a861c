// Kernel-stage products benchmark (the kernel stage at large n): the product pass alone,
// on simulated PET-like subject rows in memory (mean 1, spatial pattern, subject effects 10 %, voxel
// noise 20 %) on the AAL grid at 2 mm (default) or 3 mm, 116 regions. Compared in one run, each
// repeated REPS times (default 2) alternately, minimum reported (this machine is shared):
//   region  one product per region, in voxel chunks of differences from a reference row (PerRegionProduct,
//           below; one region per task), the simple way the batched pass is measured against,
//   batched kernels::RegionProducts (what ComputeRegionKernels runs on in-memory data),
//   floor   one cblas_ssyrk over all n x V voxels (2 BLAS threads): the BLAS rate, the lower bound.
// Every measurement runs in a fresh forked process, so both product variants allocate their 116
// fresh n x n double kernels, as the stage does: on this (virtualised) machine first touch of that
// memory is a large part of the stage at large n (sys seconds and page faults are printed).
// Wall and CPU (user + sys) seconds are printed: under contention from other processes the CPU
// seconds are the steadier comparison. max|batched - region| is relative to each kernel's max entry
// (0 = bitwise identical).
// Usage: bench_kernel_products [--3mm] [n ...] (default 400 1000 1600)
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cblas.h>

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <tbb/parallel_for.h>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/kernels/region_kernels.hpp"

using namespace neuromkl;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::int64_t kVoxelChunk = 2048;

struct Times {
  double wall = 1e300, cpu = 1e300, sys = 1e300;
  long faults = 0;
};

double CpuSeconds(const rusage& u, bool sysOnly) {
  const double sys = static_cast<double>(u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_stime.tv_usec);
  return sysOnly ? sys : sys + static_cast<double>(u.ru_utime.tv_sec) + 1e-6 * static_cast<double>(u.ru_utime.tv_usec);
}

template <class F>
void Time(Times& t, F&& f) {
  rusage u0{}, u1{};
  getrusage(RUSAGE_SELF, &u0);
  const auto start = Clock::now();
  f();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  getrusage(RUSAGE_SELF, &u1);
  t.wall = std::min(t.wall, wall);
  t.cpu = std::min(t.cpu, CpuSeconds(u1, false) - CpuSeconds(u0, false));
  t.sys = std::min(t.sys, CpuSeconds(u1, true) - CpuSeconds(u0, true));
  t.faults = std::max(t.faults, u1.ru_minflt - u0.ru_minflt);
}

// One region's product on its own: voxel chunks of kVoxelChunk, differences from `ref` summed in float by
// ssyrk/sgemm, then in double, and the reference's terms added back.
void PerRegionProduct(const float* xa, std::int64_t na, const float* xb, std::int64_t nb, std::int64_t ldx, const float* ref, std::int64_t col0,
                         std::int64_t col1, bool same, Eigen::MatrixXd& out, std::vector<float>& bufA, std::vector<float>& bufB,
                         std::vector<float>& prod) {
  out.setZero(na, nb);
  Eigen::VectorXd ua = Eigen::VectorXd::Zero(na), ub = Eigen::VectorXd::Zero(nb);
  double rr = 0;
  auto difference = [&](const float* x, std::int64_t rows, std::int64_t c, std::int64_t w, std::vector<float>& buf, Eigen::VectorXd& u) {
    buf.resize(static_cast<std::size_t>(rows * w));
    for (std::int64_t i = 0; i < rows; ++i) {
      double dot = 0;
      for (std::int64_t j = 0; j < w; ++j) {
        const float d = x[i * ldx + c + j] - ref[c + j];
        buf[static_cast<std::size_t>(i * w + j)] = d;
        dot += static_cast<double>(d) * ref[c + j];
      }
      u[i] += dot;
    }
  };
  for (std::int64_t c = col0; c < col1; c += kVoxelChunk) {
    const std::int64_t w = std::min(kVoxelChunk, col1 - c);
    for (std::int64_t j = 0; j < w; ++j) rr += static_cast<double>(ref[c + j]) * ref[c + j];
    difference(xa, na, c, w, bufA, ua);
    prod.resize(static_cast<std::size_t>(na * nb));
    if (same) {
      cblas_ssyrk(CblasColMajor, CblasUpper, CblasTrans, static_cast<int>(na), static_cast<int>(w), 1.0f, bufA.data(), static_cast<int>(w), 0.0f,
                  prod.data(), static_cast<int>(na));
    } else {
      difference(xb, nb, c, w, bufB, ub);
      cblas_sgemm(CblasColMajor, CblasTrans, CblasNoTrans, static_cast<int>(na), static_cast<int>(nb), static_cast<int>(w), 1.0f, bufA.data(),
                  static_cast<int>(w), bufB.data(), static_cast<int>(w), 0.0f, prod.data(), static_cast<int>(na));
    }
    out += Eigen::Map<const Eigen::MatrixXf>(prod.data(), na, nb).cast<double>();
  }
  if (same) {
    out.triangularView<Eigen::StrictlyLower>() = out.transpose().triangularView<Eigen::StrictlyLower>();
    ub = ua;
  }
  out.colwise() += ua;
  out.rowwise() += ub.transpose();
  out.array() += rr;
}

/// Runs f in a forked child and records its times (measured in the child); f may return a double,
/// passed back in *value.
template <class F>
void InChild(Times& t, F&& f, double* value = nullptr) {
  int fd[2];
  if (pipe(fd) != 0) std::abort();
  const pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    Times mine;
    double result = 0;
    Time(mine, [&] {
      if constexpr (std::is_same_v<decltype(f()), double>)
        result = f();
      else
        f();
    });
    const double msg[5] = {mine.wall, mine.cpu, mine.sys, static_cast<double>(mine.faults), result};
    if (write(fd[1], msg, sizeof msg) != static_cast<ssize_t>(sizeof msg)) _exit(1);
    _exit(0);
  }
  close(fd[1]);
  double msg[5] = {0, 0, 0, 0, 0};
  const bool ok = read(fd[0], msg, sizeof msg) == static_cast<ssize_t>(sizeof msg);
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!ok || status != 0) {
    std::fprintf(stderr, "measurement child failed\n");
    std::exit(1);
  }
  t.wall = std::min(t.wall, msg[0]);
  t.cpu = std::min(t.cpu, msg[1]);
  t.sys = std::min(t.sys, msg[2]);
  t.faults = std::max(t.faults, static_cast<long>(msg[3]));
  if (value) *value = msg[4];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes;
  int mm = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--3mm")
      mm = 3;
    else
      sizes.push_back(std::stoi(a));
  }
  if (sizes.empty()) sizes = {400, 1000, 1600};
  const int reps = std::getenv("REPS") ? std::max(1, std::atoi(std::getenv("REPS"))) : 2;
  const auto files = atlas::BuiltinAtlas("aal");
  const atlas::Atlas aal = atlas::LoadAtlas(files->image, files->table);
  io::Geometry grid = aal.geometry;  // 91x109x91, 2 mm
  if (mm == 3) {
    grid.dims = {61, 73, 61};
    grid.spacing = {3, 3, 3};
  }
  const atlas::RegionIndex index = atlas::BuildRegionIndex(aal, grid, nullptr);
  std::vector<std::int64_t> offsets{0};
  for (const auto& r : index.regions) offsets.push_back(offsets.back() + static_cast<std::int64_t>(r.voxels.size()));
  const std::int64_t V = offsets.back();
  const std::size_t R = index.regions.size();
  std::vector<std::int64_t> widths;
  for (std::size_t r = 0; r < R; ++r) widths.push_back(offsets[r + 1] - offsets[r]);
  std::sort(widths.begin(), widths.end());
  std::printf("grid %s: %zu regions, %lld voxels (per region: min %lld, median %lld, max %lld); %d repetitions, minimum shown\n",
              grid.Describe().c_str(), R, static_cast<long long>(V), static_cast<long long>(widths.front()), static_cast<long long>(widths[R / 2]),
              static_cast<long long>(widths.back()), reps);
  std::printf("%6s | %16s | %16s | %16s | %11s %11s | %12s\n", "n", "region wall/cpu", "batch wall/cpu", "ssyrk wall/cpu", "region/batch",
              "batch/ssyrk", "max|a-b|");
  for (int n : sizes) {
    std::vector<float> X(static_cast<std::size_t>(n) * static_cast<std::size_t>(V));
    for (int s = 0; s < n; ++s) {  // serial: the parent forks the measurements and must not start TBB
      std::mt19937 rng(static_cast<unsigned>(s + 1));
      std::normal_distribution<float> nd;
      const float subject = 1.0f + 0.1f * nd(rng);
      for (std::int64_t v = 0; v < V; ++v)
        X[static_cast<std::size_t>(s) * static_cast<std::size_t>(V) + static_cast<std::size_t>(v)] =
            subject * (1.0f + 0.3f * std::sin(0.001f * static_cast<float>(v))) + 0.2f * nd(rng);
    }
    Times region, batched, floor;
    auto perRegionProducts = [&](std::vector<Eigen::MatrixXd>& out) {
      out.resize(R);
      openblas_set_num_threads(1);
      tbb::parallel_for(std::size_t{0}, R, [&](std::size_t r) {
        thread_local std::vector<float> a, b, p;
        PerRegionProduct(X.data(), n, X.data(), n, V, X.data(), offsets[r], offsets[r + 1], true, out[r], a, b, p);
      });
    };
    for (int rep = 0; rep < reps; ++rep) {
      // Each measurement in a fresh child process: its kernels are fresh memory, as in the stage
      // (in one process, freed kernels would be reused by the next variant without page faults).
      InChild(region, [&] {
        std::vector<Eigen::MatrixXd> perRegion;
        perRegionProducts(perRegion);
      });
      InChild(batched, [&] { (void)kernels::RegionProducts(X.data(), n, V, offsets); });
      InChild(floor, [&] {
        std::vector<float> C(static_cast<std::size_t>(n) * static_cast<std::size_t>(n));
        openblas_set_num_threads(2);
        cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, n, static_cast<int>(V), 1.0f, X.data(), static_cast<int>(V), 0.0f, C.data(), n);
      });
    }
    double maxDiff = 0;
    Times unused;
    InChild(unused, [&] {
      std::vector<Eigen::MatrixXd> perRegion;
      perRegionProducts(perRegion);
      const auto batch = kernels::RegionProducts(X.data(), n, V, offsets);
      double d = 0;
      for (std::size_t r = 0; r < R; ++r) d = std::max(d, (batch[r] - perRegion[r]).cwiseAbs().maxCoeff() / perRegion[r].cwiseAbs().maxCoeff());
      return d;
    }, &maxDiff);
    std::printf("%6d | %7.2f %7.2f  | %7.2f %7.2f  | %7.2f %7.2f  | %5.2f %5.2f %5.2f %5.2f | %12.1e\n", n, region.wall, region.cpu, batched.wall,
                batched.cpu, floor.wall, floor.cpu, region.wall / batched.wall, region.cpu / batched.cpu, batched.wall / floor.wall, batched.cpu / floor.cpu,
                maxDiff);
    std::printf("       first touch of the kernels: sys seconds region %.2f, batch %.2f; page faults region %ld, batch %ld\n", region.sys,
                batched.sys, region.faults, batched.faults);
    std::fflush(stdout);
  }
  return 0;
}
