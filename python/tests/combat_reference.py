"""Independent numpy reference for ComBat harmonisation (test oracle only).

Transcribed from the equations of Johnson, Li & Rabinovic, "Adjusting batch
effects in microarray expression data using empirical Bayes methods",
Biostatistics 8(1), 2007 (parametric EB), with biological covariates preserved
as in Fortin et al., "Harmonization of multi-site diffusion tensor imaging
data", NeuroImage 161, 2017 (and Fortin et al., NeuroImage 167, 2018).
Written plainly (per-feature loops) so each line maps onto one equation.

Convention for degenerate features (sigma2_v ~ 0): passed through unchanged,
excluded from the priors, and reported with gamma = 0 and delta2 = 1.
"""
import numpy as np


def _rel(new, old):
    num = abs(new - old)
    if old == 0.0:
        return 0.0 if num == 0.0 else np.inf
    return num / abs(old)


def combat_reference(x_fit, batch_fit, cov_fit, x_apply, batch_apply, cov_apply,
                     empirical_bayes=True, tol=1e-12, max_iter=10000):
    """returns (x_apply_harmonised, estimates_dict)"""
    x_fit = np.asarray(x_fit, dtype=np.float64)
    x_apply = np.asarray(x_apply, dtype=np.float64)
    batch_fit, batch_apply = np.asarray(batch_fit), np.asarray(batch_apply)
    n, V = x_fit.shape
    cov_fit = np.asarray(cov_fit, dtype=np.float64).reshape(n, -1)
    cov_apply = np.asarray(cov_apply, dtype=np.float64).reshape(x_apply.shape[0], -1)
    p = cov_fit.shape[1]
    batches = np.unique(batch_fit)
    B = len(batches)
    if not np.all(np.isin(batch_apply, batches)):
        raise ValueError("batch_apply contains a batch not present in batch_fit")
    idx = [np.flatnonzero(batch_fit == b) for b in batches]
    n_b = np.array([len(i) for i in idx], dtype=np.float64)
    if np.any(n_b < 2):
        raise ValueError("every batch needs at least 2 fit rows")

    # 1-3. per-feature least squares on D = [batch indicators | covariates]
    D = np.zeros((n, B + p))
    for k, i in enumerate(idx):
        D[i, k] = 1.0
    D[:, B:] = cov_fit
    alpha, sigma2 = np.zeros(V), np.zeros(V)
    beta = np.zeros((p, V))
    for v in range(V):
        coef = np.linalg.lstsq(D, x_fit[:, v], rcond=None)[0]
        alpha[v] = np.sum(n_b / n * coef[:B])
        beta[:, v] = coef[B:]
        sigma2[v] = np.sum((x_fit[:, v] - D @ coef) ** 2) / n
    sigma = np.sqrt(sigma2)
    ok = sigma2 > 1e-12 * sigma2.max() if sigma2.max() > 0 else np.zeros(V, bool)

    # 4-5. standardise and per-batch location / scale
    z = np.zeros((n, V))
    gamma_hat, delta2_hat = np.zeros((B, V)), np.ones((B, V))
    for v in np.flatnonzero(ok):
        z[:, v] = (x_fit[:, v] - alpha[v] - cov_fit @ beta[:, v]) / sigma[v]
        for k, i in enumerate(idx):
            gamma_hat[k, v] = np.mean(z[i, v])
            delta2_hat[k, v] = np.sum((z[i, v] - gamma_hat[k, v]) ** 2) / (n_b[k] - 1)

    # 6-7. shrinkage
    gamma_star, delta2_star = gamma_hat.copy(), delta2_hat.copy()
    if empirical_bayes:
        for k, i in enumerate(idx):
            g, d = gamma_hat[k, ok], delta2_hat[k, ok]
            gbar, tau2 = np.mean(g), np.var(g, ddof=1)
            m, s2 = np.mean(d), np.var(d, ddof=1)
            a_b = (2.0 * s2 + m ** 2) / s2
            b_b = (m * s2 + m ** 3) / s2
            for v in np.flatnonzero(ok):
                g_old, d_old = gamma_hat[k, v], delta2_hat[k, v]
                for _ in range(max_iter):
                    g_new = (n_b[k] * tau2 * gamma_hat[k, v] + d_old * gbar) / (n_b[k] * tau2 + d_old)
                    sum2 = np.sum((z[i, v] - g_new) ** 2)
                    d_new = (b_b + sum2 / 2.0) / (n_b[k] / 2.0 + a_b - 1.0)
                    done = max(_rel(g_new, g_old), _rel(d_new, d_old)) < tol
                    g_old, d_old = g_new, d_new
                    if done:
                        break
                gamma_star[k, v], delta2_star[k, v] = g_old, d_old

    # 8-9. harmonise apply rows with the fit estimates
    out = x_apply.copy()
    for j in range(x_apply.shape[0]):
        k = int(np.searchsorted(batches, batch_apply[j]))
        for v in np.flatnonzero(ok):
            mu = alpha[v] + cov_apply[j] @ beta[:, v]
            zj = (x_apply[j, v] - mu) / sigma[v]
            scale = np.sqrt(delta2_star[k, v]) if delta2_star[k, v] > 0 else 1.0
            out[j, v] = sigma[v] * (zj - gamma_star[k, v]) / scale + mu
    est = dict(alpha=alpha, beta=beta, sigma=sigma, gamma_hat=gamma_hat,
               delta2_hat=delta2_hat, gamma_star=gamma_star,
               delta2_star=delta2_star, batches=batches)
    return out, est


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    V, sizes, labels = 40, [8, 10, 12], [7, -2, 31]
    batch = np.repeat(labels, sizes)
    n = batch.size
    cov = rng.normal(size=(n, 1))
    x = 5.0 + rng.normal(size=V) + cov @ rng.normal(size=(1, V)) + rng.normal(size=(n, V))
    for lab, shift, scale in zip(labels, [-1.0, 0.5, 2.0], [0.5, 1.0, 2.0]):
        r = batch == lab
        x[r] = x[r].mean(0) + shift + scale * (x[r] - x[r].mean(0))
    xf, ef = combat_reference(x, batch, cov, x, batch, cov, empirical_bayes=False)
    res = (xf - ef["alpha"] - cov @ ef["beta"]) / ef["sigma"]
    worst_m = max(np.abs(res[batch == b].mean(0)).max() for b in labels)
    worst_v = max(np.abs(res[batch == b].var(0, ddof=1) - 1).max() for b in labels)
    print(f"(a) EB=False: max|batch mean| = {worst_m:.2e}, max|batch var - 1| = {worst_v:.2e}",
          "OK" if max(worst_m, worst_v) < 1e-10 else "FAIL")
    xt, et = combat_reference(x, batch, cov, x, batch, cov, empirical_bayes=True)
    d = np.abs(xt - xf).max()
    print(f"(b) EB=True vs False: max|diff| = {d:.3e}, mean|diff| = {np.abs(xt - xf).mean():.3e}"
          f" (data sd {x.std():.3f})",
          "OK" if 1e-6 < d < 0.5 * x.std() else "FAIL")
    z = (x - et["alpha"] - cov @ et["beta"]) / et["sigma"]
    worst = 0.0
    for k, b in enumerate(et["batches"]):
        r, nb = batch == b, np.sum(batch == b)
        g, dl = et["gamma_hat"][k], et["delta2_hat"][k]
        tau2, gbar, m, s2 = g.var(ddof=1), g.mean(), dl.mean(), dl.var(ddof=1)
        a, bb = (2 * s2 + m ** 2) / s2, (m * s2 + m ** 3) / s2
        gs, ds = et["gamma_star"][k], et["delta2_star"][k]
        e1 = gs - (nb * tau2 * g + ds * gbar) / (nb * tau2 + ds)
        e2 = ds - (bb + ((z[r] - gs) ** 2).sum(0) / 2) / (nb / 2 + a - 1)
        worst = max(worst, np.abs(e1).max(), np.abs(e2).max())
    print(f"(c) EB fixed-point residual max = {worst:.2e}", "OK" if worst < 1e-10 else "FAIL")
    try:
        combat_reference(x, batch, cov, x[:1], [99], cov[:1])
        print("(d) unknown batch: FAIL (no error)")
    except ValueError:
        print("(d) unknown batch raises ValueError: OK")
