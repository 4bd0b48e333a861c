// Semi-supervised deformed-kernel ELM (Zhang, Xia & Liu). The training set holds labelled
// subjects and unlabelled ones (NaN targets). A symmetric kNN graph over all of them (distances
// from the summed kernel, d^2 = K_ii + K_jj - 2 K_ij) gives the Laplacian L = D - W and
// M = deformation x L; the deformed kernel (Zhang, Xia & Liu, eq. 17)
//     k~(x, z) = k(x, z) - k_x' (I + M K)^-1 M k_z
// is a valid kernel, and KELM is trained on it over the labelled subjects only. Prediction needs
// only kernel values against the training set: f(x) = k_x' c with
//     c = E_L alpha - (I + M K)^-1 M K_{.,L} alpha,
// so the model's coefficients cover labelled and unlabelled training subjects alike.
//
// For large training sets the paper replaces K by random features H H'. Our kernels arrive as
// matrices, not as input vectors, so the analogous approximation is Nystroem's: phi(x) =
// k(x, S) U Lambda^-1/2 on L random landmarks S (K_SS = U Lambda U'), Q = Phi' M Phi, and
//     k~(x, z) = k(x, z) - phi(x) (I + Q)^-1 Q phi(z)'       (their eq. 24 with H = Phi),
// which costs O(n L^2 + n k L) instead of O(n^3).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <Eigen/Eigenvalues>
#include <Eigen/LU>

#include "elm.hpp"
#include "inner.hpp"
#include "neuromkl/core/errors.hpp"
#include "single_kernel.hpp"
#include "timer.hpp"

namespace neuromkl::learners {

namespace {

/// Symmetric kNN graph as adjacency lists (i, j, w), each undirected edge once per direction.
struct Graph {
  std::vector<std::vector<std::pair<Eigen::Index, double>>> adj;
  Eigen::VectorXd degree;
};

Graph KnnGraph(const Eigen::MatrixXd& K, int k, bool heat) {
  const Eigen::Index n = K.rows();
  const auto kk = static_cast<Eigen::Index>(std::min<long>(k, n - 1));
  std::vector<std::vector<Eigen::Index>> nearest(static_cast<std::size_t>(n));
  double sumD2 = 0;
  long edges = 0;
  std::vector<Eigen::Index> order(static_cast<std::size_t>(n));
  for (Eigen::Index i = 0; i < n; ++i) {
    std::iota(order.begin(), order.end(), 0);
    auto d2 = [&](Eigen::Index j) { return std::max(0.0, K(i, i) + K(j, j) - 2 * K(i, j)); };
    order.erase(order.begin() + i);
    std::partial_sort(order.begin(), order.begin() + kk, order.end(), [&](Eigen::Index a, Eigen::Index b) {
      const double da = d2(a), db = d2(b);
      return da < db || (da == db && a < b);  // ties by index: deterministic
    });
    nearest[static_cast<std::size_t>(i)].assign(order.begin(), order.begin() + kk);
    for (Eigen::Index r = 0; r < kk; ++r) sumD2 += d2(order[static_cast<std::size_t>(r)]), ++edges;
    order.resize(static_cast<std::size_t>(n));
  }
  const double fourT = edges > 0 && sumD2 > 0 ? sumD2 / static_cast<double>(edges) : 1.0;  // heat: 4t = mean kNN d^2
  // W = max(W, W'): an edge if either end lists the other.
  std::vector<std::vector<Eigen::Index>> undirected(static_cast<std::size_t>(n));
  for (Eigen::Index i = 0; i < n; ++i)
    for (auto j : nearest[static_cast<std::size_t>(i)]) {
      undirected[static_cast<std::size_t>(i)].push_back(j);
      undirected[static_cast<std::size_t>(j)].push_back(i);
    }
  Graph g;
  g.adj.resize(static_cast<std::size_t>(n));
  g.degree = Eigen::VectorXd::Zero(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    auto& list = undirected[static_cast<std::size_t>(i)];
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
    for (auto j : list) {
      const double w = heat ? std::exp(-std::max(0.0, K(i, i) + K(j, j) - 2 * K(i, j)) / fourT) : 1.0;
      g.adj[static_cast<std::size_t>(i)].emplace_back(j, w);
      g.degree[i] += w;
    }
  }
  return g;
}

/// M X = deformation (D - W) X, using the sparse graph.
Eigen::MatrixXd ApplyM(const Graph& g, double deformation, const Eigen::MatrixXd& X) {
  Eigen::MatrixXd out = g.degree.asDiagonal() * X;
  for (std::size_t i = 0; i < g.adj.size(); ++i)
    for (const auto& [j, w] : g.adj[i]) out.row(static_cast<Eigen::Index>(i)) -= w * X.row(j);
  return deformation * out;
}

class Dkelm final : public Learner {
 public:
  explicit Dkelm(const ParamMap& p)
      : c_(p.at("c")), bias_(p.at("bias") != 0), deformation_(p.at("deformation")), k_(static_cast<int>(p.at("neighbours"))),
        heat_(p.at("heat_weights") != 0), landmarks_(static_cast<Eigen::Index>(p.at("landmarks"))), seed_(static_cast<std::uint64_t>(p.at("seed"))) {}

  Model Fit(const KernelList& train, const Targets& t, const FitOptions& options) const override {
    ValidateFitInput(Name(), train, t, options, /*allowUnlabelled=*/true);
    Stopwatch clock;
    const auto m = static_cast<Eigen::Index>(train.size());
    Eigen::MatrixXd summed;
    const Eigen::MatrixXd& K = SharedSum(options.cache, train, summed);
    const Eigen::Index n = K.rows();
    const ElmOutputs out = MakeElmOutputs(t, bias_);
    const auto l = static_cast<Eigen::Index>(out.rows.size());
    Eigen::VectorXi L(l);
    for (Eigen::Index r = 0; r < l; ++r) L[r] = static_cast<int>(out.rows[static_cast<std::size_t>(r)]);
    const Eigen::MatrixXd KGL = K(Eigen::all, L);

    Eigen::MatrixXd Kd = K(L, L);      // the deformed kernel over the labelled subjects
    Eigen::MatrixXd correction;        // n x l: c = E_L alpha - correction * alpha
    if (deformation_ > 0 && n > 1) {
      const Graph g = KnnGraph(K, k_, heat_);
      if (landmarks_ == 0 || landmarks_ >= n) {
        // B = (I + M K)^-1 M K_{.,L}; k~_LL = K_LL - K_L. B
        Eigen::MatrixXd IMK = ApplyM(g, deformation_, K);
        IMK.diagonal().array() += 1.0;
        correction = IMK.partialPivLu().solve(ApplyM(g, deformation_, KGL));
        Kd.noalias() -= KGL.transpose() * correction;
      } else {
        const std::vector<Eigen::Index> S = Landmarks(n);
        Eigen::VectorXi Si(static_cast<Eigen::Index>(S.size()));
        for (std::size_t i = 0; i < S.size(); ++i) Si[static_cast<Eigen::Index>(i)] = static_cast<int>(S[i]);
        Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(K(Si, Si));
        const Eigen::VectorXd lam = eig.eigenvalues();
        const double floor = 1e-10 * std::max(lam.maxCoeff(), 1e-300);
        std::vector<Eigen::Index> keep;
        for (Eigen::Index i = 0; i < lam.size(); ++i)
          if (lam[i] > floor) keep.push_back(i);
        Eigen::MatrixXd proj(Si.size(), static_cast<Eigen::Index>(keep.size()));  // U Lambda^-1/2
        for (std::size_t c = 0; c < keep.size(); ++c)
          proj.col(static_cast<Eigen::Index>(c)) = eig.eigenvectors().col(keep[c]) / std::sqrt(lam[keep[c]]);
        const Eigen::MatrixXd Phi = K(Eigen::all, Si) * proj;  // n x r
        const Eigen::MatrixXd Q = Phi.transpose() * ApplyM(g, deformation_, Phi);
        Eigen::MatrixXd IQ = Q;
        IQ.diagonal().array() += 1.0;
        const Eigen::MatrixXd R = IQ.partialPivLu().solve(Q);  // (I + Q)^-1 Q
        const Eigen::MatrixXd PhiL = Phi(L, Eigen::all);
        Kd.noalias() -= PhiL * R * PhiL.transpose();
        // f(x) correction: phi(x) R Phi_L' alpha = k(x, S) proj R Phi_L' alpha, on the landmark columns.
        const Eigen::MatrixXd onS = proj * R * PhiL.transpose();  // |S| x l
        correction = Eigen::MatrixXd::Zero(n, l);
        for (Eigen::Index i = 0; i < Si.size(); ++i) correction.row(Si[i]) = onS.row(i);
      }
    }
    const Eigen::MatrixXd alpha = SolveElm(Kd, out.T, c_, out.weights);
    Eigen::MatrixXd coefs = Eigen::MatrixXd::Zero(n, alpha.cols());
    coefs(L, Eigen::all) = alpha;
    if (correction.size() > 0) coefs.noalias() -= correction * alpha;
    Model model = SummedKernelElmModel(m, coefs, out, alpha, t.task);
    model.info.seconds = clock.Seconds();
    return model;
  }
  std::string_view Name() const override { return "dkelm"; }

 private:
  /// `landmarks_` distinct training positions, sorted; a seeded Fisher-Yates prefix.
  std::vector<Eigen::Index> Landmarks(Eigen::Index n) const {
    std::vector<Eigen::Index> all(static_cast<std::size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    std::mt19937_64 gen(seed_);
    for (Eigen::Index i = 0; i < landmarks_; ++i) {
      const auto j = i + static_cast<Eigen::Index>(gen() % static_cast<std::uint64_t>(n - i));
      std::swap(all[static_cast<std::size_t>(i)], all[static_cast<std::size_t>(j)]);
    }
    all.resize(static_cast<std::size_t>(landmarks_));
    std::sort(all.begin(), all.end());
    return all;
  }

  double c_;
  bool bias_;
  double deformation_;
  int k_;
  bool heat_;
  Eigen::Index landmarks_;
  std::uint64_t seed_;
};

}  // namespace

std::unique_ptr<Learner> MakeDkelm(const ParamMap& p) { return std::make_unique<Dkelm>(p); }

}  // namespace neuromkl::learners
