"""scikit-learn's estimator contract (check_estimator) on every estimator, in the feature-group form."""
from sklearn.utils.estimator_checks import parametrize_with_checks

import neuromkl

# Checks that cannot pass, with the reason (also listed in docs/python.md). Keyed by (estimator, check).
SKIPPED = {}


def _instances():
    return [cls() for cls in neuromkl.ESTIMATORS]


@parametrize_with_checks(_instances())
def test_sklearn_contract(estimator, check):
    check(estimator)
