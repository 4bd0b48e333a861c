// playground (temporary)
#include <cblas.h>

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <sys/mman.h>
#include <sys/resource.h>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/kernels/region_kernels.hpp"

using namespace neuromkl;
using Clock = std::chrono::steady_clock;
static double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

namespace {
constexpr std::int64_t kVoxelChunk = 2048;

// The product of main before this branch (copied verbatim).
void OldAccumulateRegion(const float* xa, std::int64_t na, const float* xb, std::int64_t nb, std::int64_t ldx, const float* ref, std::int64_t col0,
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

struct Timing {
  double diff = 0, blas = 0, convert = 0, finish = 0;
};

// Candidate: chunk of `chunk` voxels, optional float accumulation across chunks, fused upper-only conversion and finish.
void NewRegion(const float* x, std::int64_t n, std::int64_t ldx, const float* ref, std::int64_t col0, std::int64_t col1, Eigen::MatrixXd& out,
               std::vector<float>& buf, std::vector<float>& prod, std::int64_t chunk, bool floatAcc, Timing* tm) {
  out.resize(n, n);
  std::vector<double> u(static_cast<std::size_t>(n), 0.0);
  double rr = 0;
  const std::int64_t chunks = (col1 - col0 + chunk - 1) / chunk;
  prod.resize(static_cast<std::size_t>(n * n));
  std::int64_t k = 0;
  for (std::int64_t c = col0; c < col1; c += chunk, ++k) {
    auto t = Clock::now();
    const std::int64_t w = std::min(chunk, col1 - c);
    for (std::int64_t j = 0; j < w; ++j) rr += static_cast<double>(ref[c + j]) * ref[c + j];
    buf.resize(static_cast<std::size_t>(n * w));
    for (std::int64_t i = 0; i < n; ++i) {
      const float* xi = x + i * ldx + c;
      const float* rc = ref + c;
      float* bi = buf.data() + i * w;
      double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      std::int64_t j = 0;
      for (; j + 8 <= w; j += 8)
        for (int l = 0; l < 8; ++l) {
          const float d = xi[j + l] - rc[j + l];
          bi[j + l] = d;
          s[l] += static_cast<double>(d) * rc[j + l];
        }
      for (; j < w; ++j) {
        const float d = xi[j] - rc[j];
        bi[j] = d;
        s[0] += static_cast<double>(d) * rc[j];
      }
      u[static_cast<std::size_t>(i)] += ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    }
    if (tm) tm->diff += Since(t), t = Clock::now();
    const bool accumulateInBlas = floatAcc && k > 0;
    cblas_ssyrk(CblasColMajor, CblasUpper, CblasTrans, static_cast<int>(n), static_cast<int>(w), 1.0f, buf.data(), static_cast<int>(w),
                accumulateInBlas ? 1.0f : 0.0f, prod.data(), static_cast<int>(n));
    if (tm) tm->blas += Since(t), t = Clock::now();
    if (!floatAcc && chunks > 1) {
      for (std::int64_t j = 0; j < n; ++j) {
        double* o = out.data() + j * n;
        const float* p = prod.data() + j * n;
        if (k == 0)
          for (std::int64_t i = 0; i <= j; ++i) o[i] = p[i];
        else
          for (std::int64_t i = 0; i <= j; ++i) o[i] += p[i];
      }
    }
    if (tm) tm->convert += Since(t);
  }
  auto t = Clock::now();
  const bool fromFloat = floatAcc || chunks == 1;
  constexpr std::int64_t B = 64;
  for (std::int64_t jb = 0; jb < n; jb += B)
    for (std::int64_t ib = 0; ib <= jb; ib += B) {
      const std::int64_t je = std::min(jb + B, n), ie = std::min(ib + B, n);
      for (std::int64_t j = jb; j < je; ++j) {
        const double uj = u[static_cast<std::size_t>(j)] + rr;
        const std::int64_t last = std::min(ie, j + 1);
        double* o = out.data() + j * n;
        if (fromFloat) {
          const float* p = prod.data() + j * n;
          for (std::int64_t i = ib; i < last; ++i) o[i] = static_cast<double>(p[i]) + u[static_cast<std::size_t>(i)] + uj;
        } else {
          for (std::int64_t i = ib; i < last; ++i) o[i] = o[i] + u[static_cast<std::size_t>(i)] + uj;
        }
      }
      for (std::int64_t j = jb; j < je; ++j)
        for (std::int64_t i = ib; i < std::min(ie, j); ++i) out(j, i) = out(i, j);
    }
  if (tm) tm->finish += Since(t);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes;
  int mm = 2;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--3mm") mm = 3;
    else sizes.push_back(std::stoi(a));
  }
  if (sizes.empty()) sizes = {400};
  const auto files = atlas::BuiltinAtlas("aal");
  const atlas::Atlas aal = atlas::LoadAtlas(files->image, files->table);
  io::Geometry grid = aal.geometry;
  if (mm == 3) {
    grid.dims = {61, 73, 61};
    grid.spacing = {3, 3, 3};
  }
  const atlas::RegionIndex index = atlas::BuildRegionIndex(aal, grid, nullptr);
  std::vector<std::int64_t> off{0};
  for (const auto& r : index.regions) off.push_back(off.back() + static_cast<std::int64_t>(r.voxels.size()));
  const std::int64_t V = off.back();
  const std::size_t R = index.regions.size();
  {
    std::vector<std::int64_t> w;
    for (std::size_t r = 0; r < R; ++r) w.push_back(off[r + 1] - off[r]);
    std::sort(w.begin(), w.end());
    std::printf("grid %s: %zu regions, %lld voxels, region voxels min %lld median %lld max %lld\n", grid.Describe().c_str(), R,
                static_cast<long long>(V), static_cast<long long>(w.front()), static_cast<long long>(w[R / 2]), static_cast<long long>(w.back()));
  }
  const char* which = std::getenv("VARIANTS");
  std::string variants = which ? which : "old,lib,fuse2048,syrk";
  for (int n : sizes) {
    // PET-like: mean 1 with a spatial pattern, subject effects of 10 %, voxel noise 20 %.
    std::vector<float> X(static_cast<std::size_t>(n) * static_cast<std::size_t>(V));
    tbb::parallel_for(0, n, [&](int s) {
      std::mt19937 rng(static_cast<unsigned>(s + 1));
      std::normal_distribution<float> nd;
      const float subj = 1.0f + 0.1f * nd(rng);
      for (std::int64_t v = 0; v < V; ++v) X[static_cast<std::size_t>(s * V + v)] = subj * (1.0f + 0.3f * std::sin(0.001f * v)) + 0.2f * nd(rng);
    });
    std::vector<Eigen::MatrixXd> K(R), K0;
    openblas_set_num_threads(1);
    auto run = [&](const std::string& name) {
      Timing tm;
      std::mutex mu;
      K.assign(R, Eigen::MatrixXd());  // every variant allocates its kernels, as the stage does
      rusage u0{}, u1{};
      getrusage(RUSAGE_SELF, &u0);
      auto t = Clock::now();
      if (name == "lib") {
        K = kernels::RegionProducts(X.data(), n, V, off);
      } else if (name == "old") {
        tbb::parallel_for(std::size_t{0}, R, [&](std::size_t r) {
          thread_local std::vector<float> a, b, p;
          OldAccumulateRegion(X.data(), n, X.data(), n, V, X.data(), off[r], off[r + 1], true, K[r], a, b, p);
        });
      } else {
        const std::int64_t chunk = name.find("8192") != std::string::npos ? 8192 : 2048;
        const bool facc = name.rfind("facc", 0) == 0;
        tbb::parallel_for(std::size_t{0}, R, [&](std::size_t r) {
          thread_local std::vector<float> a, p;
          Timing local;
          NewRegion(X.data(), n, V, X.data(), off[r], off[r + 1], K[r], a, p, chunk, facc, &local);
          std::lock_guard<std::mutex> g(mu);
          tm.diff += local.diff, tm.blas += local.blas, tm.convert += local.convert, tm.finish += local.finish;
        });
      }
      const double s = Since(t);
      getrusage(RUSAGE_SELF, &u1);
      const double cpu = (u1.ru_utime.tv_sec - u0.ru_utime.tv_sec) + 1e-6 * (u1.ru_utime.tv_usec - u0.ru_utime.tv_usec) +
                         (u1.ru_stime.tv_sec - u0.ru_stime.tv_sec) + 1e-6 * (u1.ru_stime.tv_usec - u0.ru_stime.tv_usec);
      double maxRel = 0;
      if (!K0.empty())
        for (std::size_t r = 0; r < R; ++r) maxRel = std::max(maxRel, (K[r] - K0[r]).cwiseAbs().maxCoeff() / K0[r].cwiseAbs().maxCoeff());
      const double sys = (u1.ru_stime.tv_sec - u0.ru_stime.tv_sec) + 1e-6 * (u1.ru_stime.tv_usec - u0.ru_stime.tv_usec);
      std::printf("n %5d %-10s %8.3f s cpu %7.2f s (sys %.2f, %ld faults) (thread-s: diff %.3f blas %.3f convert %.3f finish %.3f)  max rel diff vs old %.2e\n", n, name.c_str(), s, cpu, sys, u1.ru_minflt - u0.ru_minflt,
                  tm.diff, tm.blas, tm.convert, tm.finish, maxRel);
      std::fflush(stdout);
    };
    const int reps = std::getenv("REPS") ? std::atoi(std::getenv("REPS")) : 1;
    std::string all;
    for (int i = 0; i < reps; ++i) all += (i ? "," : "") + variants;
    std::size_t pos = 0;
    while (pos < all.size()) {
      std::size_t e = all.find(',', pos);
      if (e == std::string::npos) e = all.size();
      const std::string v = all.substr(pos, e - pos);
      pos = e + 1;
      if (v == "alloc" || v == "allochp") {
        K.assign(R, Eigen::MatrixXd());
        auto t = Clock::now();
        tbb::parallel_for(std::size_t{0}, R, [&](std::size_t r) {
          K[r].resize(n, n);
          if (v == "allochp") {
            const auto a = reinterpret_cast<std::uintptr_t>(K[r].data());
            const std::uintptr_t lo = (a + 4095) & ~std::uintptr_t{4095};
            madvise(reinterpret_cast<void*>(lo), static_cast<std::size_t>(n) * n * 8 - (lo - a), MADV_HUGEPAGE);
          }
          K[r].setZero();
        });
        std::printf("n %5d %-10s %8.3f s\n", n, v.c_str(), Since(t));
        continue;
      }
      if (v == "syrk") {
        std::vector<float> C(static_cast<std::size_t>(n) * n);
        openblas_set_num_threads(2);
        auto t = Clock::now();
        cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, n, static_cast<int>(V), 1.0f, X.data(), static_cast<int>(V), 0.0f, C.data(), n);
        std::printf("n %5d %-10s %8.3f s  (one whole-matrix ssyrk, 2 BLAS threads)\n", n, "syrk", Since(t));
        openblas_set_num_threads(1);
        continue;
      }
      run(v);
      if (v == "old" && n <= 1000 && K0.empty()) K0 = K;
    }
  }
  return 0;
}
