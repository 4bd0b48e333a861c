"""ComBat as each fold of a harmonised study runs it (gram::FitComBat / gram::ApplyComBat through neuromkl._core.combat),
against combat_reference.py, an independent numpy transcription of the published equations (Johnson et al. 2007;
Fortin et al. 2017).

Tolerance: both sides iterate the empirical-Bayes fixed point until the relative change is below 1e-13, so each is
within ~1e-12 of the fixed point; the remaining differences are rounding in two different least-squares solvers
(complete orthogonal decomposition vs numpy's lstsq) on data of unit scale, ~1e-13. The check is the 1e-8 of the
harmonised values (relative to the data's scale) that the specification asks for, with a large margin."""
import numpy as np
import pytest

from neuromkl import _core
from combat_reference import combat_reference

TOL = 1e-13


def _cohort(seed, sizes=(9, 12, 7), features=60, covariates=2):
    """Sites with additive and multiplicative effects per feature, a numeric covariate (age-like) and a 0/1 one."""
    rng = np.random.default_rng(seed)
    sites = np.repeat([4, 1, 9][: len(sizes)], sizes)
    n = len(sites)
    cov = np.column_stack([rng.normal(50, 10, n), rng.integers(0, 2, n)])[:, :covariates].astype(float)
    beta = rng.normal(0, 0.05, (covariates, features))
    shift = {s: rng.normal(0, 1.0, features) for s in np.unique(sites)}
    scale = {s: rng.uniform(0.5, 2.0, features) for s in np.unique(sites)}
    x = np.empty((n, features))
    for i in range(n):
        x[i] = 3.0 + cov[i] @ beta + shift[sites[i]] + scale[sites[i]] * rng.normal(0, 1, features)
    return x, sites, cov


def _agree(x_fit, s_fit, c_fit, x_apply, s_apply, c_apply, eb):
    ours, est = _core.combat(x_fit, list(s_fit), c_fit, x_apply, list(s_apply), c_apply, empirical_bayes=eb, tolerance=TOL)
    ref, ref_est = combat_reference(x_fit, s_fit, c_fit, x_apply, s_apply, c_apply, empirical_bayes=eb, tol=TOL)
    scale = np.abs(x_apply).max()
    assert np.abs(ours - ref).max() <= 1e-8 * scale
    for key in ("alpha", "sigma", "gamma_hat", "delta2_hat", "gamma_star", "delta2_star"):
        np.testing.assert_allclose(est[key], ref_est[key], rtol=1e-8, atol=1e-10, err_msg=key)
    np.testing.assert_allclose(est["beta"], ref_est["beta"], rtol=1e-8, atol=1e-10)
    assert list(est["sites"]) == list(ref_est["batches"])
    return ours, est


@pytest.mark.parametrize("eb", [False, True])
def test_matches_the_published_equations_with_covariates(eb):
    x, sites, cov = _cohort(1)
    ours, est = _agree(x, sites, cov, x, sites, cov, eb)
    if eb:
        assert est["iterations"] > 1
        # Shrinkage moved the site effects towards their prior: not the unshrunk estimates.
        assert np.abs(est["gamma_star"] - est["gamma_hat"]).max() > 1e-4
    else:
        # Unshrunk: every site's standardised residuals have mean 0 and variance 1 afterwards.
        resid = (ours - est["alpha"] - cov @ est["beta"]) / est["sigma"]
        for s in np.unique(sites):
            r = resid[sites == s]
            np.testing.assert_allclose(r.mean(axis=0), 0, atol=1e-10)
            np.testing.assert_allclose(r.var(axis=0, ddof=1), 1, atol=1e-10)


@pytest.mark.parametrize("eb", [False, True])
def test_matches_without_covariates(eb):
    x, sites, _ = _cohort(2)
    empty = np.zeros((len(sites), 0))
    _agree(x, sites, empty, x, sites, empty, eb)


@pytest.mark.parametrize("eb", [False, True])
def test_held_out_rows_use_the_training_estimates(eb):
    x, sites, cov = _cohort(3)
    rng = np.random.default_rng(3)
    held = np.zeros(len(sites), bool)
    for s in np.unique(sites):  # two held-out subjects per site
        held[rng.choice(np.flatnonzero(sites == s), 2, replace=False)] = True
    ours, est = _agree(x[~held], sites[~held], cov[~held], x[held], sites[held], cov[held], eb)
    # Changing a held-out subject's data changes only that subject's harmonised row: nothing fitted moves.
    changed = x[held].copy()
    changed[0] += 5.0
    again, est2 = _core.combat(x[~held], list(sites[~held]), cov[~held], changed, list(sites[held]), cov[held], empirical_bayes=eb, tolerance=TOL)
    for key in ("alpha", "sigma", "gamma_star", "delta2_star"):
        np.testing.assert_array_equal(est[key], est2[key])
    np.testing.assert_array_equal(again[1:], ours[1:])
    assert np.abs(again[0] - ours[0]).min() > 0


@pytest.mark.parametrize("eb", [False, True])
def test_reference_group_fits_on_its_subjects_and_applies_to_everyone(eb):
    """fit_on (e.g. the controls): every estimate from that group alone, then applied to the whole training set."""
    x, sites, cov = _cohort(4, sizes=(14, 16, 12))
    controls = np.arange(len(sites)) % 2 == 0
    _agree(x[controls], sites[controls], cov[controls], x, sites, cov, eb)


def test_constant_feature_passes_through_and_is_left_out_of_the_priors():
    x, sites, cov = _cohort(5)
    x[:, 7] = 2.5
    ours, est = _agree(x, sites, cov, x, sites, cov, True)
    np.testing.assert_array_equal(ours[:, 7], x[:, 7])
    assert np.all(est["delta2_star"][:, 7] == 1) and np.all(est["gamma_star"][:, 7] == 0)


def test_unknown_site_and_small_site_are_input_errors():
    x, sites, cov = _cohort(6)
    with pytest.raises(_core.InputError, match="site 77"):
        _core.combat(x, list(sites), cov, x[:1], [77], cov[:1])
    one = sites.copy()
    one[0] = 55  # a site with a single fitting subject
    with pytest.raises(_core.InputError, match="site 55 has 1 subject"):
        _core.combat(x, list(one), cov, x, list(one), cov)
    with pytest.raises(_core.InputError, match="rank"):
        # A covariate that is the site itself: the site effects cannot be told apart from it.
        _core.combat(x, list(sites), (sites == 4).astype(float)[:, None], x, list(sites), (sites == 4).astype(float)[:, None])
