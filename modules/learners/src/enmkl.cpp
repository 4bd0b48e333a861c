// Elastic-net MKL (Mourao-Miranda et al., Algorithms 1 and 2), with the reference system's defects fixed
// (ALGORITHMS.md section 3): scale-free stopping rule, iteration cap, warm starts, a matched
// (alpha, beta) pair, the LIBSVM bias rule, and no absolute thresholds on ||w_j||.
// The map on the weights and Newton's method on its fixed point are in enmkl_map.cpp; this file drives them.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "enmkl_map.hpp"
#include "inner.hpp"
#include "neuromkl/core/errors.hpp"
#include "single_kernel.hpp"
#include "timer.hpp"

namespace neuromkl::learners {

namespace {

constexpr double kMinDamping = 1.0 / 256;  ///< smallest water-filling step
constexpr int kWaterFillIterations = 100;  ///< then the multiplicative update takes over
constexpr double kMaxExponent = 256.0;     ///< largest exponent of the multiplicative step (mu = 1, or the fallback) ...
constexpr double kExponentGrowth = 1.5;    ///< ... which grows by this factor per step that did not overshoot
constexpr double kGrowthRise = 1.1;        ///< rise of the largest weight growth ratio over a step that counts as an overshoot
constexpr double kRatioTolerance = 1e-3;   ///< |F(beta)_j / beta_j - 1| that counts as settled
constexpr double kVanishingWeight = 1e-2;  ///< normalised weight below which a decaying weight may be set to 0
constexpr double kNewtonStart = 1e-2;      ///< (water-filling phase) step (max |delta beta|, normalised) below which Newton is tried
constexpr double kNewtonStartL1 = 1e-2;    ///< (multiplicative phase) largest weight growth ratio - 1 at which Newton is tried
constexpr double kNewtonStartWarm = 0.1;   ///< both thresholds above for a warm-started fit: it starts near its neighbour's optimum
constexpr int kNewtonSteps = 12;           ///< Newton steps on one support before giving up
constexpr int kOutsideCheck = 4;           ///< water-filling steps between looks at the kernels outside the support
constexpr double kDropWeight = 1e-4;       ///< normalised weight below which a kernel the water-filling dropped leaves
constexpr int kNewtonRounds = 4;           ///< support changes handled inside one Newton attempt
constexpr int kNewtonRetry = 3;            ///< iterations to wait after a failed Newton attempt
constexpr double kCarriedWeight = 1e-3;    ///< normalised weight Newton's start gives a kernel the damped steps still carry
constexpr int kHandOver = 150;             ///< (mu = 1) iterations after which a fit that has not converged goes on as SimpleMKL ...
constexpr double kHandOverGap = 1e-4;      ///< ... to this relative duality gap (SimpleMKL's default)

/// One ENMKL fit: the starting weights, damped water-filling (mu < 1), then ENMKL's multiplicative steps (mu = 1, or
/// where water-filling does not settle), each handing over to Newton's method on the support (EnmklMap::SolveOnSupport)
/// once its steps are small; finally the inner problem solved at the returned weights.
class EnmklFit {
 public:
  EnmklFit(std::string_view learner, const KernelList& train, const InnerSolver& solver, const EnmklSettings& s, const FitOptions& options)
      : train_(train), solver_(solver), s_(s), options_(options), m_(KernelCount(train, options)), info_(model_.info),
        map_(learner, train, options, solver, s.mu, info_), active_(ActiveKernels(train, options)) {
    if (active_.empty())
      throw InputError("learners:AllZeroKernels", "learner " + std::string(learner), "every training kernel is identically zero: nothing to learn from");
    Start();
  }

  Model Run() {
    info_.status = FitStatus::MaxIterReached;
    if (s_.mu < 1.0) WaterFillingPhase();
    if (!done_)
      if (std::optional<Model> handed = MultiplicativePhase()) return std::move(*handed);
    return Finish();
  }

 private:
  /// The multiplicative phase's state between steps.
  struct MultiplicativeSteps {
    Eigen::VectorXd vanishing;      ///< 1 where this step's weight is clearly vanishing
    double eta = 1.0;               ///< the steps' exponent
    double prevGrowth = std::numeric_limits<double>::infinity();
    Eigen::VectorXd prevDirection;  ///< log(F(beta)_j / beta_j) of the last step (empty: none yet)
    bool first = true;              ///< no objective change known yet
    double prevStep = 1.0;
  };
  /// One multiplicative step's target: F(beta), the weights from and to (normalised), their largest growth ratio - 1
  /// and the largest change of the weights that do not vanish.
  struct WeightStep {
    Eigen::VectorXd next, from, to;
    double growth = -1, change = 0;
  };

  void Start();
  EnmklMap::Newton Polish(Eigen::VectorXd& b);
  void WaterFillingPhase();
  std::optional<Model> MultiplicativePhase();
  Model HandOverToSimpleMkl();
  WeightStep MultiplicativeTarget(MultiplicativeSteps& st);
  enum class Settled { No, Converged, Restarted };
  Settled SettleMultiplicative(const WeightStep& w, const Eigen::VectorXd& kept, bool small, MultiplicativeSteps& st);
  void StepWithExponent(const WeightStep& w, MultiplicativeSteps& st);
  Model Finish();

  Stopwatch clock_;
  const KernelList& train_;
  const InnerSolver& solver_;
  const EnmklSettings& s_;
  const FitOptions& options_;
  const Eigen::Index m_;
  Model model_;
  FitInfo& info_;
  EnmklMap map_;  ///< first to read the kernels: its stack checks their values
  const std::vector<Eigen::Index> active_;
  Eigen::VectorXd beta_;
  InnerSolution sol_;
  bool haveSol_ = false;
  double newtonStart_ = kNewtonStart, newtonStartL1_ = kNewtonStartL1;
  double prevObjective_ = 0, objective_ = 0;
  bool done_ = false;
  bool newtonAvailable_ = true;
  int newtonAfter_ = 0;  ///< iteration before which Newton is not tried again (after a failure)
};

/// Uniform weights on the kernels that are not zero, or a warm start's.
void EnmklFit::Start() {
  beta_ = Eigen::VectorXd::Zero(m_);
  for (auto j : active_) beta_[j] = 1.0 / static_cast<double>(active_.size());
  const bool warmed = options_.warmStart && options_.warmStart->beta.size() == m_ && options_.warmStart->beta.sum() > 0;
  if (const Model* w = options_.warmStart; warmed) {
    // The neighbour's weights. At mu = 1 mixed with 10 % uniform weight: a multiplicative step cannot revive a weight
    // at 0. For mu < 1 the first water-filling step looks at every kernel (the outside check), so a kernel the
    // neighbour had at 0 comes back there, and the first combination reads the neighbour's support only (a uniform
    // share would make every warm fit start with all kernels).
    const Eigen::VectorXd uniform = beta_;
    const double mix = s_.mu < 1.0 ? 0.0 : 0.1;
    for (auto j : active_) beta_[j] = (1.0 - mix) * w->beta[j] / w->beta.sum() + mix * uniform[j];
    if (w->solverState.size() > 0) {
      sol_.alpha = w->solverState;
      haveSol_ = true;
    }
  }
  newtonStart_ = warmed ? kNewtonStartWarm : kNewtonStart;
  newtonStartL1_ = warmed ? kNewtonStartWarm : kNewtonStartL1;
}

/// Newton on the frozen support, then the full check; on success `b` is the certified fixed point.
EnmklMap::Newton EnmklFit::Polish(Eigen::VectorXd& b) {
  if (!newtonAvailable_ || info_.iterations < newtonAfter_) return EnmklMap::Newton::Failed;
  auto r = EnmklMap::Newton::SupportChanged;
  for (int round = 0; round < kNewtonRounds && r == EnmklMap::Newton::SupportChanged; ++round)
    r = map_.SolveOnSupport(b, sol_, haveSol_, objective_, s_.betaTolerance, s_.maxIterations, kNewtonSteps);
  if (r == EnmklMap::Newton::Failed) newtonAfter_ = info_.iterations + kNewtonRetry;
  if (map_.NoCurvature()) newtonAvailable_ = false;
  return r;
}

void EnmklFit::WaterFillingPhase() {
  // Phase 1, damped water-filling: beta <- (1 - w) beta + w WaterFill(c(beta)). Same fixed points
  // as ENMKL's published update (the optimum), usually reached in tens of steps instead of thousands: the
  // plain update contracts at a rate near 1, the water-filling step only waits for the inner
  // solution to settle. w halves when a step is larger than the previous one and grows back
  // otherwise. Once a step is below 1e-2 (normalised; 0.1 for a warm-started fit), Newton's method on the water-filled support finds
  // the fixed point and the full optimality check certifies it (EnmklMap::SolveOnSupport); a kernel that
  // must enter does so at a small weight and Newton goes on from its own weights (docs/learners.md,
  // "Newton's restarts keep its weights"). The step size alone does not bound the distance to the fixed point.
  double omega = 1.0, prevChange = std::numeric_limits<double>::infinity();
  bool lookOutside = false;
  const int phaseOne = std::min(s_.maxIterations, kWaterFillIterations);
  while (info_.iterations < phaseOne && !done_) {
    const int it = ++info_.iterations;
    // Inexact inner solves while the weights still move a lot (the tolerance follows the last step);
    // Newton's steps and the certification use the full tolerance.
    const double loose = std::min(kLoosest, kLooseFactor * prevChange);
    if (!map_.Solve(beta_, sol_, haveSol_, objective_, loose)) {  // the solution uses no kernel (e.g. constant targets)
      done_ = true;
      break;
    }
    haveSol_ = true;
    // Kernels outside the support are looked at every kOutsideCheck steps, after a Newton attempt,
    // and always when there is no Newton step (then the step-size rule below is the stopping rule).
    const Eigen::VectorXd target = map_.ScreenedWaterFill(beta_, it % kOutsideCheck == 1 || lookOutside || !newtonAvailable_);
    lookOutside = false;
    if (!(target.sum() > 0)) {
      done_ = true;
      break;
    }
    const double change = (target / target.sum() - beta_ / beta_.sum()).cwiseAbs().maxCoeff();
    const double objChange = it == 1 ? 1.0 : std::abs(objective_ - prevObjective_) / std::max(std::abs(objective_), 1e-300);
    prevObjective_ = objective_;
    info_.gap = change;
    const bool small = change < s_.betaTolerance && objChange < s_.objectiveTolerance;
    if (small || change < newtonStart_) {
      // Newton starts from the water-filled weights and, at a small weight, the kernels the damped iterate still
      // carries but this target drops: while the damping is small the target's support swings from step to step (seen
      // at mu = 0.9 warm-started from mu = 1: 22, 5, 9, 11, 7, 15, 11 kernels), and a kernel of the optimum missing
      // from it would enter one certification round at a time. Newton's first step drops those that do not belong
      // (a weight it sends below 0 leaves).
      Eigen::VectorXd b = target;
      const double carried = kCarriedWeight * target.sum();
      for (Eigen::Index j = 0; j < m_; ++j)
        if (beta_[j] > 0 && !(target[j] > 0)) b[j] = carried;
      const auto r = Polish(b);
      if (r == EnmklMap::Newton::Converged) {
        beta_ = b;
        done_ = true;
        break;
      }
      if (r == EnmklMap::Newton::SupportChanged) {
        beta_ = b;  // go on from Newton's iterate (after kNewtonRounds support changes: the entering kernels are in it)
        lookOutside = true;
        continue;
      }
      lookOutside = true;
      if (small && !newtonAvailable_) {  // no Newton step for this solver: the step-size rule (every kernel was looked at)
        beta_ = target;
        done_ = true;
        break;
      }
    }
    omega = change > prevChange ? std::max(omega * 0.5, kMinDamping) : std::min(1.0, omega * 1.25);
    prevChange = change;
    beta_ = (1.0 - omega) * beta_ + omega * target;
    // A kernel the water-filling dropped leaves the active set once its damped weight is small.
    const double total = beta_.sum();
    for (Eigen::Index j = 0; j < m_; ++j)
      if (target[j] == 0.0 && beta_[j] < kDropWeight * total) beta_[j] = 0.0;
  }
  if (done_) {
    info_.status = FitStatus::Converged;
  } else {
    // The water-filled support kept changing (strongly coupled inner solutions, e.g. KRR): go on
    // with the multiplicative update below, which lowers the objective at every step. A multiplicative
    // step cannot revive a weight at exactly 0, so 1 % of uniform weight is mixed back in first.
    const double share = 0.01 * beta_.sum() / static_cast<double>(active_.size());
    for (auto j : active_) beta_[j] += share;
  }
}

/// The model of the SimpleMKL fit the multiplicative phase handed over to, if it did.
std::optional<Model> EnmklFit::MultiplicativePhase() {
  // ENMKL's multiplicative update (the only option for mu = 1, where the frozen problem is
  // degenerate: all weight on the largest c_j), raised to an adaptive power eta: beta_j <- beta_j
  // (F(beta)_j / beta_j)^eta, eta = 1 being the published step; same fixed points, faster
  // contraction; eta grows while the steps go on in one direction and falls back towards 1 when one overshoots.
  // Weights that are clearly vanishing (ratio F(beta)_j / beta_j < 1 - 1e-3 and below 1e-2 of the total) mark the
  // support of the limit; once no weight grows by more than 1 % in a step (10 % warm-started), Newton's method on it finds the
  // fixed point and the full check certifies it (as in phase 1). Without a Newton step (a solver
  // without Curvature) the stopping rule is the step-size rule: no weight may still grow (ratio <= 1 + 1e-3),
  // the others moved less than `tolerance`, and the primal objective changed by less than
  // `objective_tolerance`; the vanishing weights are then set to exactly 0.
  MultiplicativeSteps st;
  st.vanishing = Eigen::VectorXd::Zero(m_);
  while (info_.iterations < s_.maxIterations) {
    if (s_.mu == 1.0 && info_.iterations >= kHandOver && haveSol_) return HandOverToSimpleMkl();
    ++info_.iterations;
    if (!map_.Solve(beta_, sol_, haveSol_, objective_, std::min(kLoosest, kLooseFactor * st.prevStep))) {
      info_.status = FitStatus::Converged;
      break;
    }
    haveSol_ = true;
    const WeightStep w = MultiplicativeTarget(st);
    const double objChange = st.first ? 1.0 : std::abs(objective_ - prevObjective_) / std::max(std::abs(objective_), 1e-300);
    st.first = false;
    prevObjective_ = objective_;
    info_.gap = w.change;
    Eigen::VectorXd kept = w.next;
    for (Eigen::Index j = 0; j < m_; ++j)
      if (st.vanishing[j] > 0) kept[j] = 0.0;
    const bool small = w.growth <= kRatioTolerance && w.change < s_.betaTolerance && objChange < s_.objectiveTolerance;
    st.prevStep = std::max(w.change, w.growth);
    // A solution with no free variable is also handed to Newton at once (mu = 1): its frozen optimum is known (SolveOnSupport).
    const bool frozen = s_.mu == 1.0 && solver_.Frozen(sol_);
    if (small || (newtonAvailable_ && info_.iterations >= newtonAfter_ && (w.growth <= newtonStartL1_ || frozen))) {
      const Settled settled = SettleMultiplicative(w, kept, small, st);
      if (settled == Settled::Converged) break;
      if (settled == Settled::Restarted) continue;
    }
    StepWithExponent(w, st);
  }
  return std::nullopt;
}

/// l1-MKL whose multiplicative steps and Newton attempts have not settled (at small C on a real cohort of
/// ~19 subjects, 15 of 175 warm-started fits would run to the 500-iteration cap). There the SVM's solution changes its
/// active set within the iterates' range: c_j jumps with the weights and the steps oscillate around a kink that
/// Newton's equations (equal c_j on the support) cannot express. SimpleMKL's descent on J, certified by the duality
/// gap, has the same optimum and does not need c to be smooth: it goes on from here.
Model EnmklFit::HandOverToSimpleMkl() {
  const double total = beta_.sum();
  Model handed = FitSimpleMklFrom(train_, map_.Stack(), solver_, kHandOverGap, s_.maxIterations - info_.iterations, beta_ / total, sol_.alpha, options_);
  handed.info.iterations += info_.iterations;
  handed.info.innerSolves += info_.innerSolves;
  handed.info.innerIterations += info_.innerIterations;
  handed.info.seconds = clock_.Seconds();
  return handed;
}

/// F(beta) after the solve, and which weights vanish (st.vanishing).
EnmklFit::WeightStep EnmklFit::MultiplicativeTarget(MultiplicativeSteps& st) {
  WeightStep w;
  w.next = map_.Update(beta_);
  w.from = beta_ / beta_.sum();
  w.to = w.next / w.next.sum();
  st.vanishing.setZero();
  for (Eigen::Index j = 0; j < m_; ++j) {
    if (w.from[j] <= 0) continue;
    const double ratio = w.to[j] / w.from[j];
    w.growth = std::max(w.growth, ratio - 1.0);
    if (ratio < 1.0 - kRatioTolerance && w.to[j] < kVanishingWeight) st.vanishing[j] = 1;
    else w.change = std::max(w.change, std::abs(w.to[j] - w.from[j]));
  }
  return w;
}

/// Newton from the kept weights (the vanishing ones at 0): Converged with beta_ at the certified fixed point (or, without
/// Newton, at the kept weights when the step is small); Restarted when a kernel outside the support wants in (every zero
/// weight revived a little, the step's state reset); No to go on with a multiplicative step.
EnmklFit::Settled EnmklFit::SettleMultiplicative(const WeightStep& w, const Eigen::VectorXd& kept, bool small, MultiplicativeSteps& st) {
  Eigen::VectorXd b = kept / kept.sum() * w.next.sum();
  const auto r = Polish(b);
  if (r == EnmklMap::Newton::Converged) {
    beta_ = b;
    info_.status = FitStatus::Converged;
    return Settled::Converged;
  }
  if (small && !newtonAvailable_) {
    beta_ = kept;
    info_.status = FitStatus::Converged;
    return Settled::Converged;
  }
  if (r != EnmklMap::Newton::SupportChanged) return Settled::No;
  // A kernel outside the support wants in: revive every zero weight a little and go on.
  const double share = 0.01 * b.sum() / static_cast<double>(active_.size());
  beta_ = b;
  for (auto j : active_) beta_[j] += share;
  st.first = true;
  st.prevGrowth = std::numeric_limits<double>::infinity();
  st.prevDirection.resize(0);
  st.eta = 1.0;
  return Settled::Restarted;
}

/// The multiplicative step beta_j <- from_j (to_j / from_j)^eta, rescaled to sum(F(beta)).
void EnmklFit::StepWithExponent(const WeightStep& w, MultiplicativeSteps& st) {
  // eta halves when the last step overshot: it turned back (its log-ratios at an obtuse angle to the previous
  // step's) or the largest growth rose by more than kGrowthRise; else it grows by kExponentGrowth, up to kMaxExponent.
  // The step's size alone is no sign of overshoot: on a large support the steps grow for tens of iterations while the
  // weights concentrate (mu = 1 fits at n = 192, m = 116: 17-25 iterations with this rule, 27-48 with "halve when the
  // step grew"). A kernel whose c_j is 0.1 % below the others' decays by (1 - 1e-3)^eta per step: a tenfold decay takes
  // ~140 steps at eta = 16 and 9 at eta = 256.
  const Eigen::VectorXd& from = w.from;
  const Eigen::VectorXd& to = w.to;
  Eigen::VectorXd direction = Eigen::VectorXd::Zero(m_);
  for (Eigen::Index j = 0; j < m_; ++j)
    if (from[j] > 0 && to[j] > 0) direction[j] = std::log(to[j] / from[j]);
  const bool turnedBack = st.prevDirection.size() == m_ && direction.dot(st.prevDirection) < 0;
  const bool overshot = turnedBack || w.growth > kGrowthRise * st.prevGrowth;
  st.eta = overshot ? std::max(1.0, st.eta * 0.5) : std::min(kMaxExponent, st.eta * kExponentGrowth);
  st.prevDirection = direction;
  st.prevGrowth = w.growth;
  Eigen::VectorXd stepped = Eigen::VectorXd::Zero(m_);
  for (Eigen::Index j = 0; j < m_; ++j)
    if (from[j] > 0 && to[j] > 0) stepped[j] = from[j] * std::pow(to[j] / from[j], st.eta);
  beta_ = stepped.sum() > 0 ? Eigen::VectorXd(stepped * (w.next.sum() / stepped.sum())) : w.next;
  // Vanishing weights leave the active set (the certification brings back any kernel that must enter).
  if (newtonAvailable_)
    for (Eigen::Index j = 0; j < m_; ++j)
      if (st.vanishing[j] > 0) beta_[j] = 0.0;
}

/// The inner problem solved at the final weights, and the model.
Model EnmklFit::Finish() {
  // Subnormal weights (e.g. 4.9e-324 left by an underflowing multiplicative step) are exactly 0.
  {
    const double total = beta_.sum();
    for (Eigen::Index j = 0; j < m_; ++j)
      if (!(beta_[j] / total >= std::numeric_limits<double>::min())) beta_[j] = 0.0;
  }
  // Return a matched pair: the solution trained with exactly the weights returned.
  sol_ = solver_.Solve(map_.Stack().Combine(beta_), haveSol_ ? &sol_ : nullptr);
  ++info_.innerSolves;
  info_.innerIterations += sol_.iterations;
  if (!sol_.converged) info_.status = FitStatus::MaxIterReached;
  // Normalise sum(beta) = 1; scaling coef by the same factor leaves the decision function unchanged.
  const double sum = beta_.sum();
  model_.beta = beta_ / sum;
  for (Eigen::Index j = 0; j < m_; ++j)
    if (!(model_.beta[j] >= std::numeric_limits<double>::min())) model_.beta[j] = 0.0;
  StoreSolution(sol_, sum, model_);
  model_.alpha = sol_.alpha * sum;
  model_.solverState = sol_.alpha;
  info_.objective = objective_;  // primal objective of ENMKL's Definition 4
  // The weights' fixed point depends on the solution only, and the solution meets every larger C's conditions.
  info_.solvesLargerC = info_.status == FitStatus::Converged && solver_.BoxInactive(sol_);
  info_.seconds = clock_.Seconds();
  return std::move(model_);
}

}  // namespace

Model FitEnmkl(std::string_view learner, const KernelList& train, const InnerSolver& solver, const EnmklSettings& s, const FitOptions& options) {
  return EnmklFit(learner, train, solver, s, options).Run();
}

namespace {

EnmklSettings Settings(const ParamMap& p) {
  return {p.at("mu"), static_cast<int>(p.at("max_iterations")), p.at("tolerance"), p.at("objective_tolerance")};
}

class EnmklSvm final : public Learner {
 public:
  explicit EnmklSvm(const ParamMap& p)
      : c_(p.at("c")), svmTol_(p.at("svm_tolerance")), settings_(Settings(p)) {}
  Model Fit(const KernelList& train, const Targets& t, const FitOptions& o) const override {
    ValidateFitInputExceptValues(Name(), train, t, o);
    if (t.task == Task::Regression)
      throw InputError("learners:TaskUnsupported", "learner enmkl_svm", "enmkl_svm is a classifier; for regression use enmkl_krr");
    auto svc = [&](const Eigen::VectorXd& y) { return MakeSvcSolver(y, c_, svmTol_, 10'000'000, t.sampleWeights); };
    // Multiclass: one beta for all one-vs-rest SVMs (docs/learners.md, "Multiclass").
    return FitEnmkl(Name(), train, *(t.task == Task::Multiclass ? MakeOneVsRestSolver(t, svc) : svc(t.y)), settings_, o);
  }
  std::string_view Name() const override { return "enmkl_svm"; }

 private:
  double c_, svmTol_;
  EnmklSettings settings_;
};

class EnmklKrr final : public Learner {
 public:
  explicit EnmklKrr(const ParamMap& p) : lambda_(p.at("lambda")), settings_(Settings(p)) {}
  Model Fit(const KernelList& train, const Targets& t, const FitOptions& o) const override {
    ValidateFitInputExceptValues(Name(), train, t, o);
    auto krr = [&](const Eigen::VectorXd& y) { return MakeKrrSolver(y, lambda_, t.sampleWeights); };
    return FitEnmkl(Name(), train, *(t.task == Task::Multiclass ? MakeOneVsRestSolver(t, krr) : krr(t.y)), settings_, o);
  }
  std::string_view Name() const override { return "enmkl_krr"; }

 private:
  double lambda_;
  EnmklSettings settings_;
};

}  // namespace

std::unique_ptr<Learner> MakeEnmklSvm(const ParamMap& p) { return std::make_unique<EnmklSvm>(p); }
std::unique_ptr<Learner> MakeEnmklKrr(const ParamMap& p) { return std::make_unique<EnmklKrr>(p); }

}  // namespace neuromkl::learners
