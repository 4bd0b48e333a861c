#pragma once
// Sequential minimal optimisation for LIBSVM's dual form
//     min 1/2 a'Qa + p'a  s.t.  y'a = 0, 0 <= a_i <= C_i,   Q_ij = y_i y_j K(i mod n, j mod n)
// with the second-order working-set selection of Fan, Chen & Lin (JMLR 2005). l = n for C-SVC and
// l = 2n for epsilon-SVR. Q columns are formed on the fly from the n x n kernel.
#include <Eigen/Core>

namespace neuromkl::learners {

struct SmoResult {
  Eigen::VectorXd alpha;  ///< size l
  double rho = 0;         ///< decision f(x) = sum_i y_i alpha_i K(x, x_i) - rho
  double objective = 0;   ///< 1/2 a'Qa + p'a at the solution
  double violation = 0;   ///< final maximal KKT violation (m(a) - M(a))
  long iterations = 0;
  bool converged = false;
};

/// Labels y_t are -1 or +1. `warmStart` (size l) is used when it is feasible for these bounds (else the solve starts at 0).
/// `shrinking` (LIBSVM's heuristic) only changes the cost of the path: the stopping rule is always
/// checked on every variable.
SmoResult SolveSmo(const Eigen::MatrixXd& K, const Eigen::VectorXd& y, const Eigen::VectorXd& p, double C,
                   const Eigen::VectorXd* warmStart, double tolerance, long maxIterations, bool shrinking = true);
/// The same with one upper bound per variable (0 <= a_t <= upper_t, LIBSVM's per-class C): class
/// weights give each class its own C.
SmoResult SolveSmo(const Eigen::MatrixXd& K, const Eigen::VectorXd& y, const Eigen::VectorXd& p, const Eigen::VectorXd& upper,
                   const Eigen::VectorXd* warmStart, double tolerance, long maxIterations, bool shrinking = true);

}  // namespace neuromkl::learners
