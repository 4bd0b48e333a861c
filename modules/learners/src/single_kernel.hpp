#pragma once
#include <memory>

#include "neuromkl/learners/learner.hpp"

namespace neuromkl::learners {
/// "svm": C-SVC on the unweighted sum of the kernels.
std::unique_ptr<Learner> MakeSvm(const ParamMap& p);
/// "krr": kernel ridge regression on the unweighted sum of the kernels.
std::unique_ptr<Learner> MakeKrr(const ParamMap& p);
/// "enmkl_svm" / "enmkl_krr": elastic-net MKL (Mourao-Miranda et al., Algorithms 1 and 2).
std::unique_ptr<Learner> MakeEnmklSvm(const ParamMap& p);
std::unique_ptr<Learner> MakeEnmklKrr(const ParamMap& p);
/// "simplemkl": SimpleMKL (Rakotomamonjy et al. 2008); C-SVC for classification, epsilon-SVR for regression.
std::unique_ptr<Learner> MakeSimpleMkl(const ParamMap& p);
/// "kelm" / "mkelm": kernel ELM (Huang et al. 2012) and multiple kernel ELM (Liu et al. 2015).
std::unique_ptr<Learner> MakeKelm(const ParamMap& p);
std::unique_ptr<Learner> MakeMkelm(const ParamMap& p);
/// "mkl_bp": MKL with an L1 + Lp constraint (MKL-BP, Qi, Liang & Xu 2018).
std::unique_ptr<Learner> MakeMklBp(const ParamMap& p);
/// "bsadmm_kelm": hinge-loss KELM by two-operator ADMM (Su, Xu & Qin 2021).
std::unique_ptr<Learner> MakeBsadmmKelm(const ParamMap& p);
/// "dkelm": semi-supervised deformed-kernel ELM (Zhang, Xia & Liu).
std::unique_ptr<Learner> MakeDkelm(const ParamMap& p);
/// Wraps a classification learner so that it also fits multiclass targets (multiclass.cpp).
std::unique_ptr<Learner> WithMulticlass(std::unique_ptr<Learner> learner, std::string_view name, MulticlassWeights mode);
}  // namespace neuromkl::learners
