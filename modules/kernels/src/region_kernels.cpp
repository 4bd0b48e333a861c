#include "neuromkl/kernels/region_kernels.hpp"

#include <Eigen/Eigenvalues>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>

#include <cblas.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <tbb/global_control.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/progress.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/kernels/blas.hpp"
#include "neuromkl/core/system.hpp"

namespace neuromkl::kernels {

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Columns of a region are processed in chunks of this many voxels: float32 products of differences
// within a chunk, chunks summed in double (see AccumulateRegion), and the buffers stay small.
constexpr std::int64_t kVoxelChunk = 2048;

/// Scratch file holding the n x V float32 subject matrix when it exceeds the memory budget.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& dir) {
    std::string pattern = (dir.empty() ? std::filesystem::temp_directory_path().string() : dir) + "/neuromkl-scratch-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    fd_ = mkstemp(buf.data());
    if (fd_ < 0) throw IoError("kernels:ScratchFile", pattern, "cannot create the scratch file for out-of-core kernels");
    unlink(buf.data());  // gone when closed, even after a crash
    path_ = buf.data();
  }
  ~ScratchFile() {
    if (fd_ >= 0) close(fd_);
  }
  void Write(const float* data, std::size_t count, std::uint64_t offset) {
    const auto* p = reinterpret_cast<const char*>(data);
    std::size_t left = count * sizeof(float);
    while (left > 0) {
      const ssize_t w = pwrite(fd_, p, left, static_cast<off_t>(offset));
      if (w <= 0) throw IoError("kernels:ScratchWrite", path_, "writing the scratch file failed (disk full?)");
      p += w;
      offset += static_cast<std::uint64_t>(w);
      left -= static_cast<std::size_t>(w);
    }
  }
  void Read(float* data, std::size_t count, std::uint64_t offset) const {
    auto* p = reinterpret_cast<char*>(data);
    std::size_t left = count * sizeof(float);
    while (left > 0) {
      const ssize_t r = pread(fd_, p, left, static_cast<off_t>(offset));
      if (r <= 0) throw IoError("kernels:ScratchRead", path_, "reading the scratch file failed");
      p += r;
      offset += static_cast<std::uint64_t>(r);
      left -= static_cast<std::size_t>(r);
    }
  }

 private:
  int fd_ = -1;
  std::string path_;
};

struct Layout {
  std::vector<std::int64_t> offset;       ///< R + 1 column offsets
  std::vector<std::int64_t> columnVoxel;  ///< V voxel indices
  std::vector<std::int32_t> columnRegion; ///< V region slots
  /// Image voxels in memory order with their column: reading an image sequentially and scattering
  /// into the (L2-sized) row is ~30 % faster than gathering region by region from the whole image.
  std::vector<std::pair<std::int64_t, std::int64_t>> voxelColumn;
  /// Probabilistic regions: sqrt(p) per column, so that the region kernel is X diag(p) X'. Empty: all 1.
  std::vector<float> columnScale;
  std::int64_t Columns() const { return static_cast<std::int64_t>(columnVoxel.size()); }
};

Layout MakeLayout(const atlas::RegionIndex& regions) {
  Layout L;
  L.offset.push_back(0);
  const bool weighted = std::any_of(regions.regions.begin(), regions.regions.end(), [](const auto& r) { return !r.weights.empty(); });
  for (std::size_t r = 0; r < regions.regions.size(); ++r) {
    const auto& region = regions.regions[r];
    for (std::size_t k = 0; k < region.voxels.size(); ++k) {
      L.columnVoxel.push_back(region.voxels[k]);
      L.columnRegion.push_back(static_cast<std::int32_t>(r));
      if (weighted) L.columnScale.push_back(region.weights.empty() ? 1.0f : std::sqrt(region.weights[k]));
    }
    L.offset.push_back(L.Columns());
  }
  L.voxelColumn.reserve(L.columnVoxel.size());
  for (std::int64_t c = 0; c < L.Columns(); ++c) L.voxelColumn.emplace_back(L.columnVoxel[static_cast<std::size_t>(c)], c);
  std::sort(L.voxelColumn.begin(), L.voxelColumn.end());
  return L;
}

/// Non-zero finite values of data[begin, end): x - x is 0 only for a finite x (branch-free, so it vectorises).
std::int64_t CountNonZeroFinite(const float* data, std::int64_t begin, std::int64_t end) {
  std::int64_t count = 0;
  for (std::int64_t v = begin; v < end; ++v) count += (data[v] != 0.0f) & (data[v] - data[v] == 0.0f);
  return count;
}

/// Pass 1 for one decoded subject image, in one walk over it (the atlas voxels in memory order, the others between them):
/// checks its grid, gathers the region columns into `row` (non-finite values as 0, their columns into `bad`), counts
/// non-zero values inside and outside the atlas (so a reader learns how much of the signal, e.g. of lesion maps, no
/// region sees), and applies intensity scaling; returns the subject's divisor (1 without scaling).
double FillRow(const io::Volume& vol, const std::string& subject, const atlas::RegionIndex& regions, const Layout& layout,
               const RegionKernelOptions& options, float* row, std::vector<std::int64_t>& bad, std::int64_t& inside, std::int64_t& outside) {
  const std::int64_t V = layout.Columns();
  if (const auto diff = vol.geometry.DifferenceFrom(regions.grid); !diff.empty())
    throw GeometryMismatch("input:GridMismatch", "subject " + subject,
                           "image grid differs from the cohort grid (" + regions.grid.Describe() + "): " + diff +
                               "; every image of a cohort must be on one grid");
  const float* data = vol.data.data();
  double atlasSum = 0;  // the global mean for intensity scaling: raw values of the atlas voxels, each once
  std::int64_t finite = 0, atlasFinite = 0, next = 0;  // next: the first voxel not yet counted
  const bool scaled = !layout.columnScale.empty();
  for (const auto& [voxel, c] : layout.voxelColumn) {
    const float v = data[voxel];
    if (voxel >= next) {  // the voxel's first column (a voxel of several probabilistic regions has several)
      outside += CountNonZeroFinite(data, next, voxel);
      next = voxel + 1;
      if (std::isfinite(v)) atlasSum += v, ++atlasFinite, inside += v != 0.0f;
    }
    if (std::isfinite(v)) {
      row[c] = scaled ? v * layout.columnScale[static_cast<std::size_t>(c)] : v;
      ++finite;
    } else {
      row[c] = 0.0f;
      bad.push_back(c);
    }
  }
  outside += CountNonZeroFinite(data, next, static_cast<std::int64_t>(vol.data.size()));
  std::sort(bad.begin(), bad.end());
  if (finite == 0)
    throw InputError("input:AllNonFinite", "subject " + subject,
                     fmt::format("all {} voxels inside the atlas regions are NaN or infinite; the image holds no data", V));
  if (options.intensity != IntensityScaling::None) {
    // The subject's own mean of its raw finite values (before any probabilistic weighting).
    double sum = atlasSum;
    std::int64_t count = atlasFinite;
    if (options.intensity == IntensityScaling::ReferenceRegions) {
      sum = 0, count = 0;
      for (auto v : options.referenceVoxels)
        if (const float x = vol.data[static_cast<std::size_t>(v)]; std::isfinite(x)) sum += x, ++count;
    }
    const double mean = count > 0 ? sum / static_cast<double>(count) : 0.0;
    if (!(mean > 0) || !std::isfinite(mean))
      throw InputError("input:IntensityScale", "subject " + subject,
                       fmt::format("intensity scaling needs a positive mean, found {} over the {}", mean,
                                   options.intensity == IntensityScaling::GlobalMean ? "atlas voxels" : "reference region voxels"));
    const float inverse = static_cast<float>(1.0 / mean);
    for (std::int64_t c = 0; c < V; ++c) row[c] *= inverse;
    return mean;
  }
  return 1.0;
}

/// out = X_a[:, cols] X_b[:, cols]^T for one region (rows of a x rows of b), computed as
///   (X_a - 1 r')(X_b - 1 r')' + u_a 1' + 1 u_b' + r'r,   u = (X - 1 r') r,
/// with r a reference subject's row. The products of the differences run in float32 BLAS
/// (ssyrk/sgemm) on 2048-voxel chunks whose results are summed in double; u and r'r are summed in
/// double. Float rounding then scales with the spread of the data around the reference, not with
/// its mean: what per-fold centring keeps is accurate to ~1e-6 relative even for data with a large
/// mean (PET, raw intensities), at float speed. (Plain float products of X would lose the centred
/// signal to rounding of the mean; double products cost 2-3x more.)
/// Passes over the n x n output are few: with `same` only ssyrk's upper triangle is converted and
/// summed (regions of one chunk are read straight from the float product), and the corrections and
/// the mirrored lower triangle are written in one blocked pass. Every sum is formed in the same order
/// as by the plain version (out += chunk in double, then ((sum + u_i) + u_j) + r'r; u row by row),
/// so the result is bitwise the same. (Measured: this saves only ~1-5 % of the pass; the BLAS calls
/// on 2048-voxel chunks run at the rate of one whole-matrix SSYRK, and the rest of the cost at large
/// n is the first touch of the fresh kernels, see below.)
void AccumulateRegion(const float* xa, std::int64_t na, const float* xb, std::int64_t nb, std::int64_t ldx, const float* ref, std::int64_t col0,
                      std::int64_t col1, bool same, Eigen::MatrixXd& out, std::vector<float>& bufA, std::vector<float>& bufB,
                      std::vector<float>& prod) {
  if (out.rows() != na || out.cols() != nb) {
    out.resize(na, nb);  // every entry is written below: no zeroing
    // A fresh kernel is first touched here: with huge pages the product pass takes ~20 % less CPU on
    // this virtualised machine (bench_kernel_products, fresh processes: 13.4-14.9 s vs 16.7-17.8 s at n = 1,600).
    AdviseHugePages(out.data(), static_cast<std::size_t>(na * nb) * sizeof(double));
  }
  Eigen::VectorXd ua = Eigen::VectorXd::Zero(na), ub = Eigen::VectorXd::Zero(nb);
  double rr = 0;
  // buf = X[:, c..c+w) - r (row-major rows x w) and u += buf r. Four rows at a time: each row's dot
  // is still one sequential double sum (the same value as row by row), the four chains overlap.
  auto difference = [&](const float* x, std::int64_t rows, std::int64_t c, std::int64_t w, std::vector<float>& buf, Eigen::VectorXd& u) {
    buf.resize(static_cast<std::size_t>(rows * w));
    const float* rc = ref + c;
    std::int64_t i = 0;
    for (; i + 4 <= rows; i += 4) {
      const float* x0 = x + i * ldx + c;
      float* b0 = buf.data() + i * w;
      double d0 = 0, d1 = 0, d2 = 0, d3 = 0;
      for (std::int64_t j = 0; j < w; ++j) {
        const float r = rc[j];
        const float e0 = x0[j] - r, e1 = x0[ldx + j] - r, e2 = x0[2 * ldx + j] - r, e3 = x0[3 * ldx + j] - r;
        b0[j] = e0, b0[w + j] = e1, b0[2 * w + j] = e2, b0[3 * w + j] = e3;
        d0 += static_cast<double>(e0) * r, d1 += static_cast<double>(e1) * r, d2 += static_cast<double>(e2) * r, d3 += static_cast<double>(e3) * r;
      }
      u[i] += d0, u[i + 1] += d1, u[i + 2] += d2, u[i + 3] += d3;
    }
    for (; i < rows; ++i) {
      const float* xi = x + i * ldx + c;
      float* bi = buf.data() + i * w;
      double dot = 0;
      for (std::int64_t j = 0; j < w; ++j) {
        const float d = xi[j] - rc[j];
        bi[j] = d;
        dot += static_cast<double>(d) * rc[j];
      }
      u[i] += dot;
    }
  };
  const bool oneChunk = col1 - col0 <= kVoxelChunk;
  prod.resize(static_cast<std::size_t>(na * nb));
  for (std::int64_t c = col0; c < col1; c += kVoxelChunk) {
    const std::int64_t w = std::min(kVoxelChunk, col1 - c);
    for (std::int64_t j = 0; j < w; ++j) rr += static_cast<double>(ref[c + j]) * ref[c + j];
    difference(xa, na, c, w, bufA, ua);
    // Column-major na x nb result; the row-major (rows x w) buffers are their transposes.
    if (same) {
      cblas_ssyrk(CblasColMajor, CblasUpper, CblasTrans, static_cast<int>(na), static_cast<int>(w), 1.0f, bufA.data(), static_cast<int>(w), 0.0f,
                  prod.data(), static_cast<int>(na));
    } else {
      difference(xb, nb, c, w, bufB, ub);
      cblas_sgemm(CblasColMajor, CblasTrans, CblasNoTrans, static_cast<int>(na), static_cast<int>(nb), static_cast<int>(w), 1.0f, bufA.data(),
                  static_cast<int>(w), bufB.data(), static_cast<int>(w), 0.0f, prod.data(), static_cast<int>(na));
    }
    if (oneChunk) break;  // the corrections below read the float product directly
    const bool first = c == col0;
    for (std::int64_t j = 0; j < nb; ++j) {  // only the triangle ssyrk wrote
      double* o = out.data() + j * na;
      const float* p = prod.data() + j * na;
      const std::int64_t rows = same ? j + 1 : na;
      if (first)
        for (std::int64_t i = 0; i < rows; ++i) o[i] = 0.0 + static_cast<double>(p[i]);
      else
        for (std::int64_t i = 0; i < rows; ++i) o[i] += static_cast<double>(p[i]);
    }
  }
  // out(i, j) = ((sum(i, j) + ua_i) + ub_j) + r'r, sum read from the float product (one chunk) or
  // from out; with `same` the sum is symmetric and both triangles come from the upper one. Blocks of
  // 64 x 64 keep the transposed writes in cache.
  if (same) ub = ua;
  constexpr std::int64_t kBlock = 64;
  auto sum = [&](std::int64_t i, std::int64_t j) { return oneChunk ? 0.0 + static_cast<double>(prod[static_cast<std::size_t>(j * na + i)]) : out(i, j); };
  for (std::int64_t jb = 0; jb < nb; jb += kBlock) {
    const std::int64_t je = std::min(jb + kBlock, nb);
    for (std::int64_t ib = 0; ib < (same ? je : na); ib += kBlock) {
      const std::int64_t ie = std::min(ib + kBlock, na);
      if (!same) {
        for (std::int64_t j = jb; j < je; ++j)
          for (std::int64_t i = ib; i < ie; ++i) out(i, j) = ((sum(i, j) + ua[i]) + ub[j]) + rr;
        continue;
      }
      // Lower triangle first (from the upper sums, before they are overwritten), then the upper.
      for (std::int64_t j = jb; j < je; ++j)
        for (std::int64_t i = ib; i < std::min(ie, j); ++i) out(j, i) = ((sum(i, j) + ua[j]) + ua[i]) + rr;
      for (std::int64_t j = jb; j < je; ++j)
        for (std::int64_t i = ib; i < std::min(ie, j + 1); ++i) out(i, j) = ((sum(i, j) + ua[i]) + ua[j]) + rr;
    }
  }
}

}  // namespace

std::vector<Eigen::MatrixXd> RegionProducts(const float* x, std::int64_t n, std::int64_t ldx, const std::vector<std::int64_t>& offsets) {
  UseSingleThreadedBlas();
  const std::size_t R = offsets.empty() ? 0 : offsets.size() - 1;
  std::vector<Eigen::MatrixXd> kernels(R);
  tbb::parallel_for(std::size_t{0}, R, [&](std::size_t r) {
    thread_local std::vector<float> bufA, bufB, prod;
    AccumulateRegion(x, n, x, n, ldx, x, offsets[r], offsets[r + 1], true, kernels[r], bufA, bufB, prod);
  });
  return kernels;
}

void EraseKernel(KernelSet& set, std::size_t r) {
  const auto at = static_cast<std::ptrdiff_t>(r);
  if (set.Compact()) {
    set.compact.kernels.erase(set.compact.kernels.begin() + at);
    set.rawDiagonals.erase(set.rawDiagonals.begin() + at);
  } else {
    set.kernels.erase(set.kernels.begin() + at);
  }
  set.info.erase(set.info.begin() + at);
}

std::vector<std::string> ExcludeZeroKernels(KernelSet& set) {
  std::vector<std::string> names;
  const bool compact = set.Compact();
  for (std::size_t r = set.Size(); r-- > 0;) {
    if (compact ? set.compact.kernels[r].size() == 0 : set.kernels[r].cwiseAbs().maxCoeff() == 0.0) {
      names.insert(names.begin(), set.info[r].name);
      set.excluded.push_back({set.info[r], "zero kernel (every subject's values are 0 in this region)"});
      EraseKernel(set, r);
    }
  }
  return names;
}

void CheckKernel(const Eigen::MatrixXd& K, const std::string& name, Eigen::Index n, const std::string& where) {
  if (K.rows() != n || K.cols() != n)
    throw InputError("kernels:Shape", where, fmt::format("kernel {} is {}x{}, expected {}x{} (= subjects)", name, K.rows(), K.cols(), n, n));
  for (Eigen::Index j = 0; j < n; ++j)
    for (Eigen::Index i = 0; i < n; ++i) {
      if (!std::isfinite(K(i, j)))
        throw InputError("kernels:NonFinite", where, fmt::format("kernel {} has a non-finite entry at ({}, {})", name, i, j));
      if (std::abs(K(i, j) - K(j, i)) > 1e-8 * (std::abs(K(i, j)) + std::abs(K(j, i)) + 1e-300) && std::abs(K(i, j) - K(j, i)) > 1e-12)
        throw InputError("kernels:NotSymmetric", where,
                         fmt::format("kernel {0} is not symmetric: K({1},{2}) = {3} but K({2},{1}) = {4}", name, i, j, K(i, j), K(j, i)));
    }
  // A kernel is a Gram matrix (positive semi-definite): the learners' problems are convex only then, and an MKL weight
  // of an indefinite kernel is meaningless (a negative-definite kernel ends with weight 0, silently). Eigenvalues above
  // -1e-6 n max|K_ij| are rounding (a text file's digits, a float32 store), below that the kernel is refused.
  if (n == 0) return;
  const double largest = K.cwiseAbs().maxCoeff();
  if (largest == 0.0) return;  // a zero kernel: excluded later, with its own note
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(K, Eigen::EigenvaluesOnly);
  const double smallest = eig.eigenvalues().minCoeff(), tolerance = 1e-6 * static_cast<double>(n) * largest;
  if (eig.info() != Eigen::Success || smallest < -tolerance)
    throw InputError("kernels:NotPsd", where,
                     fmt::format("kernel {} is not positive semi-definite: its smallest eigenvalue is {:.4g} (largest {:.4g}; rounding tolerated down "
                                 "to {:.3g}); a kernel must be a Gram matrix of similarities (e.g. X X', not distances or correlations "
                                 "with negative eigenvalues)",
                                 name, smallest, eig.eigenvalues().maxCoeff(), -tolerance));
}

void CheckKernelSet(const KernelSet& set, const std::string& where) {
  const auto n = static_cast<Eigen::Index>(set.subjects.size());
  for (std::size_t r = 0; r < set.kernels.size(); ++r)
    CheckKernel(set.kernels[r], r < set.info.size() ? set.info[r].name : std::to_string(r), n, where);
}

namespace {

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

/// Where the subjects' rows (V floats each) live while the kernels are formed: in memory, or, when they exceed the
/// memory budget, in a scratch file read back in blocks of rows (two blocks in memory at once).
struct SubjectData {
  std::int64_t n = 0, V = 0;
  std::uint64_t rowBytes = 0;
  bool inMemory = true;
  std::int64_t rowsPerBlock = 0, blocks = 0;
  std::unique_ptr<float[], FreeDeleter> data;  ///< in memory: n x V, row-major
  std::unique_ptr<ScratchFile> scratch;        ///< out of core
};

SubjectData PlaceSubjectData(std::int64_t n, std::int64_t V, const RegionKernelOptions& options, RegionKernelReport& rep) {
  SubjectData d;
  d.n = n;
  d.V = V;
  const std::uint64_t budget = options.memoryBudgetBytes ? options.memoryBudgetBytes : PhysicalMemoryBytes() / 4;
  d.rowBytes = static_cast<std::uint64_t>(V) * sizeof(float);
  rep.dataBytes = static_cast<std::uint64_t>(n) * d.rowBytes;
  d.inMemory = rep.dataBytes <= budget;
  d.rowsPerBlock = d.inMemory ? n : std::max<std::int64_t>(1, static_cast<std::int64_t>(budget / (2 * d.rowBytes)));
  d.blocks = (n + d.rowsPerBlock - 1) / d.rowsPerBlock;
  rep.subjectBlocks = static_cast<std::size_t>(d.blocks);
  rep.peakDataBytes = d.inMemory ? rep.dataBytes
                                 : std::min<std::uint64_t>(2, static_cast<std::uint64_t>(d.blocks)) * static_cast<std::uint64_t>(d.rowsPerBlock) * d.rowBytes;
  if (d.inMemory) {
    // Every element is written by the read pass: no zero-initialisation of n x V floats. Huge pages where the
    // kernel offers them: first-touch faults on hundreds of MB otherwise slow the decoding.
    constexpr std::size_t kHugePage = std::size_t{2} << 20;
    const std::size_t bytes = ((static_cast<std::size_t>(n * V) * sizeof(float) + kHugePage - 1) / kHugePage) * kHugePage;
    d.data.reset(static_cast<float*>(std::aligned_alloc(kHugePage, bytes)));
    if (!d.data) throw IoError("kernels:Memory", "kernels", fmt::format("cannot allocate {:.1f} MiB for the subject data", bytes / 1048576.0));
    madvise(d.data.get(), bytes, MADV_HUGEPAGE);
    return d;
  }
  d.scratch = std::make_unique<ScratchFile>(options.scratchDir);
  spdlog::info("kernels: {:.1f} MiB of subject data exceed the memory budget of {:.1f} MiB; processing {} subject blocks of {} from a scratch file",
               rep.dataBytes / 1048576.0, budget / 1048576.0, d.blocks, d.rowsPerBlock);
  return d;
}

/// What the read pass learns besides the rows: each subject's non-finite columns and intensity divisor, and the
/// non-zero values inside and outside the atlas.
struct ReadFacts {
  std::vector<std::vector<std::int64_t>> badColumns;
  std::vector<double> scales;
  std::int64_t nonZeroInside = 0, nonZeroOutside = 0;
};

/// Pass 1: every image read once, in parallel, into its row.
ReadFacts ReadEveryImage(SubjectData& d, const std::vector<std::string>& subjectIds, const std::vector<std::string>& imagePaths,
                         const atlas::RegionIndex& regions, const Layout& layout, const RegionKernelOptions& options, RegionKernelReport& rep) {
  ReadFacts facts;
  facts.badColumns.resize(static_cast<std::size_t>(d.n));
  facts.scales.assign(options.intensity == IntensityScaling::None ? 0 : static_cast<std::size_t>(d.n), 1.0);
  std::atomic<std::int64_t> nonZeroInside{0}, nonZeroOutside{0};
  Progress progress("reading images", static_cast<std::size_t>(d.n));
  const auto t0 = Clock::now();
  std::atomic<long> decodeNs{0}, restNs{0};
  const std::int64_t V = d.V;
  tbb::parallel_for(std::int64_t{0}, d.n, [&](std::int64_t s) {
    const auto tDecode = Clock::now();
    thread_local io::Volume vol;  // reused across subjects: no allocation per image
    io::ReadVolume(imagePaths[static_cast<std::size_t>(s)], vol);
    const auto tRest = Clock::now();
    decodeNs += std::chrono::duration_cast<std::chrono::nanoseconds>(tRest - tDecode).count();
    const std::string subject = subjectIds[static_cast<std::size_t>(s)] + " (" + imagePaths[static_cast<std::size_t>(s)] + ")";
    std::vector<float> localRow(d.inMemory ? 0 : static_cast<std::size_t>(V));
    float* row = d.inMemory ? d.data.get() + s * V : localRow.data();
    std::int64_t inside = 0, outside = 0;
    const double scale = FillRow(vol, subject, regions, layout, options, row, facts.badColumns[static_cast<std::size_t>(s)], inside, outside);
    nonZeroInside += inside;
    nonZeroOutside += outside;
    if (!facts.scales.empty()) facts.scales[static_cast<std::size_t>(s)] = scale;
    if (d.scratch) d.scratch->Write(row, static_cast<std::size_t>(V), static_cast<std::uint64_t>(s) * d.rowBytes);
    restNs += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - tRest).count();
    progress.Advance();
  });
  spdlog::debug("kernels: decode {:.3f} s, gather {:.3f} s (thread-seconds)", decodeNs * 1e-9, restNs * 1e-9);
  rep.readSeconds = Since(t0);
  facts.nonZeroInside = nonZeroInside;
  facts.nonZeroOutside = nonZeroOutside;
  return facts;
}

/// The voxels the non-finite rule drops ("drop_voxel"): written as 0 in every row read (the zero rule already
/// wrote 0 in place of each non-finite value).
struct DroppedVoxels {
  bool active = false;
  std::int64_t V = 0;
  std::vector<std::int64_t> columns;
  void Apply(float* rows, std::int64_t count) const {
    if (!active) return;
    for (std::int64_t i = 0; i < count; ++i)
      for (auto c : columns) rows[i * V + c] = 0.0f;
  }
};

/// Rows [first, first + count) of the subject data: in memory in place, else read from the scratch file into `buffer`.
const float* SubjectBlock(const SubjectData& d, std::int64_t first, std::int64_t count, const DroppedVoxels& drop, std::vector<float>& buffer) {
  if (d.inMemory) return d.data.get() + first * d.V;
  buffer.resize(static_cast<std::size_t>(count * d.V));
  d.scratch->Read(buffer.data(), buffer.size(), static_cast<std::uint64_t>(first) * d.rowBytes);
  drop.Apply(buffer.data(), count);
  return buffer.data();
}

/// Pass 2: the products, every region of every pair of subject blocks. In memory a float32 study's kernels are
/// rounded as they are formed (RegionKernelOptions::compact): each thread forms one float64 kernel at a time in its
/// own matrix, reused from region to region.
void FormProducts(const SubjectData& d, const std::vector<float>& reference, const Layout& layout, const DroppedVoxels& drop,
                  const RegionKernelOptions& options, KernelSet& set) {
  const std::size_t R = layout.offset.size() - 1;
  const std::int64_t n = d.n, V = d.V, blocks = d.blocks, rowsPerBlock = d.rowsPerBlock;
  const bool compactEach = options.compact && blocks == 1;
  tbb::enumerable_thread_specific<Eigen::MatrixXd> formed;
  std::vector<std::exception_ptr> roundingErrors(compactEach ? R : 0);
  if (compactEach) {
    set.compact.kernels.resize(R);
    set.compact.centred = options.compactCentre;
    set.rawDiagonals.resize(R);
  } else {
    set.kernels.resize(R);
  }
  if (blocks > 1)
    for (auto& K : set.kernels) K.setZero(n, n);
  Progress progress("region kernels", static_cast<std::size_t>(blocks * (blocks + 1) / 2));
  std::vector<float> blockA, blockB;
  for (std::int64_t bi = 0; bi < blocks; ++bi) {
    const std::int64_t ai = bi * rowsPerBlock, na = std::min(rowsPerBlock, n - ai);
    const float* xa = SubjectBlock(d, ai, na, drop, blockA);
    for (std::int64_t bj = bi; bj < blocks; ++bj) {
      const std::int64_t aj = bj * rowsPerBlock, nb = std::min(rowsPerBlock, n - aj);
      const float* xb = bj == bi ? xa : SubjectBlock(d, aj, nb, drop, blockB);
      tbb::parallel_for(std::size_t{0}, R, [&](std::size_t r) {
        thread_local std::vector<float> bufA, bufB, prod;
        if (compactEach) {
          Eigen::MatrixXd& K = formed.local();
          AccumulateRegion(xa, na, xb, nb, V, reference.data(), layout.offset[r], layout.offset[r + 1], true, K, bufA, bufB, prod);
          set.rawDiagonals[r] = K.diagonal();
          // A zero kernel is left unrounded (empty): ExcludeZeroKernels recognises it so (centred, it would
          // be zero in any case, but so would a constant non-zero kernel).
          if (K.cwiseAbs().maxCoeff() == 0.0) return;
          try {
            set.compact.kernels[r] = gram::CompactKernel(K, options.compactCentre, options.compactWhere + ": kernel \"" + set.info[r].name + "\"");
          } catch (...) {
            roundingErrors[r] = std::current_exception();
          }
          return;
        }
        if (blocks == 1) {  // everything in memory: straight into the kernel
          AccumulateRegion(xa, na, xb, nb, V, reference.data(), layout.offset[r], layout.offset[r + 1], true, set.kernels[r], bufA, bufB, prod);
          return;
        }
        Eigen::MatrixXd block;
        AccumulateRegion(xa, na, xb, nb, V, reference.data(), layout.offset[r], layout.offset[r + 1], bi == bj, block, bufA, bufB, prod);
        set.kernels[r].block(ai, aj, na, nb) = block;
        if (bi != bj) set.kernels[r].block(aj, ai, nb, na) = block.transpose();
      });
      progress.Advance();
    }
  }
  formed.clear();
  for (const auto& e : roundingErrors)  // the first bad kernel in region order, whatever the threads
    if (e) std::rethrow_exception(e);
  if (options.compact && !compactEach) CompactKernelSet(set, options.compactCentre, options.compactWhere);
}

}  // namespace

KernelSet ComputeRegionKernels(const std::vector<std::string>& subjectIds, const std::vector<std::string>& imagePaths,
                               const atlas::RegionIndex& regions, const RegionKernelOptions& options, RegionKernelReport* report) {
  const auto start = Clock::now();
  const auto n = static_cast<std::int64_t>(imagePaths.size());
  if (n == 0) throw InputError("input:EmptyCohort", "kernels", "no subject to read: the cohort is empty");
  const Layout layout = MakeLayout(regions);
  const std::int64_t V = layout.Columns();
  RegionKernelReport local;
  RegionKernelReport& rep = report ? *report : local;
  rep = RegionKernelReport{};
  SubjectData d = PlaceSubjectData(n, V, options, rep);
  std::unique_ptr<tbb::global_control> limit;
  if (options.threads > 0) limit = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, options.threads);
  UseSingleThreadedBlas();

  ReadFacts facts = ReadEveryImage(d, subjectIds, imagePaths, regions, layout, options, rep);
  spdlog::debug("kernels: read pass {:.3f} s", rep.readSeconds);
  const auto tRule = Clock::now();
  // The non-finite rule over the whole cohort.
  std::vector<std::int32_t> nonFiniteCount(static_cast<std::size_t>(V), 0);
  for (const auto& bad : facts.badColumns)
    for (auto c : bad) ++nonFiniteCount[static_cast<std::size_t>(c)];
  DroppedVoxels drop{options.nanPolicy == NanPolicy::DropVoxel, V, {}};
  KernelSet set = RegionKernelHeader(subjectIds, regions, nonFiniteCount, options.nanPolicy, drop.columns);
  set.intensityScale = std::move(facts.scales);
  set.nonZeroInsideAtlas = facts.nonZeroInside;
  set.nonZeroOutsideAtlas = facts.nonZeroOutside;
  rep.droppedVoxels = static_cast<std::int64_t>(std::count_if(nonFiniteCount.begin(), nonFiniteCount.end(), [](std::int32_t k) { return k > 0; }));
  if (d.inMemory) drop.Apply(d.data.get(), n);
  spdlog::debug("kernels: non-finite rule {:.3f} s", Since(tRule));
  // The reference row of the products: subject 0 after the non-finite rule.
  std::vector<float> reference(static_cast<std::size_t>(V));
  if (d.inMemory) {
    std::copy(d.data.get(), d.data.get() + V, reference.begin());
  } else {
    d.scratch->Read(reference.data(), reference.size(), 0);
    drop.Apply(reference.data(), 1);
  }
  const auto t1 = Clock::now();
  FormProducts(d, reference, layout, drop, options, set);
  rep.productSeconds = Since(t1);
  spdlog::debug("kernels: products {:.3f} s", rep.productSeconds);
  const auto tTail = Clock::now();
  ExcludeEmptyRegions(set, rep);
  spdlog::debug("kernels: exclusions {:.3f} s", Since(tTail));
  rep.totalSeconds = Since(start);
  spdlog::debug("kernels: total {:.3f} s", rep.totalSeconds);
  return set;
}

// ---- the pieces of ComputeRegionKernels that a kernel stage spread over processes uses ----

std::vector<std::int64_t> RegionColumnOffsets(const atlas::RegionIndex& regions) { return MakeLayout(regions).offset; }

SubjectRows ReadSubjectRows(const std::vector<std::string>& subjectIds, const std::vector<std::string>& imagePaths, const atlas::RegionIndex& regions,
                            const RegionKernelOptions& options) {
  std::vector<float> data(static_cast<std::size_t>(static_cast<std::int64_t>(imagePaths.size()) * MakeLayout(regions).Columns()));
  SubjectRows out = ReadSubjectRowsInto(subjectIds, imagePaths, regions, options, data.data());
  out.data = std::move(data);
  return out;
}

/// The read pass: subject s's row is filled at rowOf(s), then handed to done(s, row, its intensity divisor) if given.
static SubjectRows ReadRows(const std::vector<std::string>& subjectIds, const std::vector<std::string>& imagePaths, const atlas::RegionIndex& regions,
                     const RegionKernelOptions& options, const std::function<float*(std::int64_t)>& rowOf,
                     const std::function<void(std::int64_t, const float*, double)>& done) {
  const Layout layout = MakeLayout(regions);
  const auto n = static_cast<std::int64_t>(imagePaths.size());
  SubjectRows out;
  out.columns = layout.Columns();
  out.nonFiniteCount.assign(static_cast<std::size_t>(out.columns), 0);
  out.intensityScale.assign(options.intensity == IntensityScaling::None ? 0 : static_cast<std::size_t>(n), 1.0);
  std::vector<std::vector<std::int64_t>> badColumns(static_cast<std::size_t>(n));
  std::atomic<std::int64_t> nonZeroInside{0}, nonZeroOutside{0};
  std::unique_ptr<tbb::global_control> limit;
  if (options.threads > 0) limit = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, options.threads);
  Progress progress("reading images", static_cast<std::size_t>(n));
  tbb::parallel_for(std::int64_t{0}, n, [&](std::int64_t s) {
    thread_local io::Volume vol;
    const auto i = static_cast<std::size_t>(s);
    io::ReadVolume(imagePaths[i], vol);
    std::int64_t inside = 0, outside = 0;
    float* row = rowOf(s);
    const double scale = FillRow(vol, subjectIds[i] + " (" + imagePaths[i] + ")", regions, layout, options, row, badColumns[i], inside, outside);
    if (done) done(s, row, scale);
    nonZeroInside += inside, nonZeroOutside += outside;
    if (!out.intensityScale.empty()) out.intensityScale[i] = scale;
    progress.Advance();
  });
  for (const auto& bad : badColumns)
    for (auto c : bad) ++out.nonFiniteCount[static_cast<std::size_t>(c)];
  out.nonZeroInsideAtlas = nonZeroInside;
  out.nonZeroOutsideAtlas = nonZeroOutside;
  return out;
}

SubjectRows ReadSubjectRowsInto(const std::vector<std::string>& subjectIds, const std::vector<std::string>& imagePaths, const atlas::RegionIndex& regions,
                                const RegionKernelOptions& options, float* rows) {
  const std::int64_t columns = MakeLayout(regions).Columns();
  return ReadRows(subjectIds, imagePaths, regions, options, [&](std::int64_t s) { return rows + s * columns; }, {});
}

SubjectRows ReadSubjectRowsWith(const std::vector<std::string>& subjectIds, const std::vector<std::string>& imagePaths, const atlas::RegionIndex& regions,
                                const RegionKernelOptions& options, const std::function<void(std::int64_t, const float*, double)>& store) {
  const auto columns = static_cast<std::size_t>(MakeLayout(regions).Columns());
  return ReadRows(subjectIds, imagePaths, regions, options,
                  [&](std::int64_t) {  // FillRow writes every column
                    thread_local std::vector<float> row;
                    row.resize(columns);
                    return row.data();
                  }, store);
}

KernelSet RegionKernelHeader(const std::vector<std::string>& subjectIds, const atlas::RegionIndex& regions, const std::vector<std::int32_t>& nonFiniteCount,
                             NanPolicy nanPolicy, std::vector<std::int64_t>& droppedColumns) {
  const Layout layout = MakeLayout(regions);
  const std::int64_t V = layout.Columns();
  const std::size_t R = regions.regions.size();
  KernelSet set;
  set.subjects = subjectIds;
  set.info.resize(R);
  for (std::size_t r = 0; r < R; ++r) {
    set.info[r].name = regions.regions[r].name;
    set.info[r].label = regions.regions[r].label;
    set.info[r].atlasVoxels = regions.regions[r].atlasVoxels;
  }
  droppedColumns.clear();
  for (std::int64_t c = 0; c < V; ++c) {
    const auto count = nonFiniteCount[static_cast<std::size_t>(c)];
    if (count == 0) continue;
    auto& info = set.info[static_cast<std::size_t>(layout.columnRegion[static_cast<std::size_t>(c)])];
    info.zeroedValues += count;
    ++info.nonFiniteVoxels;
    if (nanPolicy == NanPolicy::DropVoxel) droppedColumns.push_back(c);
  }
  const bool dropVoxels = nanPolicy == NanPolicy::DropVoxel;
  for (std::size_t r = 0; r < R; ++r) {
    auto& info = set.info[r];
    const std::int64_t regionVoxels = layout.offset[r + 1] - layout.offset[r];
    info.features = dropVoxels ? regionVoxels - info.nonFiniteVoxels : regionVoxels;
    if (dropVoxels) info.zeroedValues = 0;  // nothing is zeroed: whole voxels are dropped
  }
  return set;
}

void RegionKernelBlocks(const float* xa, std::int64_t na, const float* xb, std::int64_t nb, std::int64_t columns, const float* reference,
                        const std::vector<std::int64_t>& offsets, bool same, std::vector<Eigen::MatrixXd>& out) {
  UseSingleThreadedBlas();
  const std::size_t R = offsets.size() - 1;
  out.resize(R);
  tbb::parallel_for(std::size_t{0}, R, [&](std::size_t r) {
    thread_local std::vector<float> bufA, bufB, prod;
    AccumulateRegion(xa, na, xb, nb, columns, reference, offsets[r], offsets[r + 1], same, out[r], bufA, bufB, prod);
  });
}

void ExcludeEmptyRegions(KernelSet& set, RegionKernelReport& rep) {
  for (std::size_t r = set.info.size(); r-- > 0;) {
    if (set.info[r].features == 0) {
      set.excluded.push_back({set.info[r], "no voxel left: every voxel is non-finite in at least one subject"});
      EraseKernel(set, r);
    }
  }
  for (const auto& name : ExcludeZeroKernels(set)) rep.warnings.push_back("region " + name + " excluded: its kernel is all zeros");
  for (const auto& e : set.excluded)
    if (e.info.features == 0) rep.warnings.push_back("region " + e.info.name + " excluded: " + e.reason);
  for (const auto& w : rep.warnings) spdlog::warn("{}", w);
}

}  // namespace neuromkl::kernels
