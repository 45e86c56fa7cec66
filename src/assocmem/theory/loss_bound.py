"""Proposition 4: the cross-entropy 'bound' in terms of the layer partition function Z_t.

Forms implemented (Z_t is always passed as log Z_t, because it is astronomically large or small):

* printed (Sec. 5):  1 < L = log Z_t + 1/Z_t + log l - c <= log Z_t + 1/Z_t + log l, c in [0, log l);
  the remark after it: L(N, D) ~= log Z_t + 1/Z_t >= 1 (equality iff Z_t = 1).
* corrected:   following App. C.1 with E_t(rho) = g_t(rho) = 0 (the energy, not the density 1/Z_t),
               the same steps, its substitution (b) included, give L = log Z_t (a differential cross-entropy,
               unbounded below). (b) holds where one layer is nearest everywhere; layers that split far-apart
               patterns between them give L = log Z_t + log l (:func:`layered_cross_entropy_1d`).
"""

from __future__ import annotations

import numpy as np

from assocmem.theory.partition import log_partition

_EXP_LIMIT = 700.0  # exp(700) ~ 1e304: beyond it 1/Z_t is reported as infinite


def inverse_partition(log_z: float) -> float:
    """1/Z_t = exp(-log Z_t), inf when it overflows float64."""
    return float(np.exp(-log_z)) if -log_z < _EXP_LIMIT else float("inf")


def log_z_plus_inverse(log_z: float) -> float:
    """log Z + 1/Z (the remark after Prop. 4); inf when 1/Z overflows."""
    return float(log_z) + inverse_partition(log_z)


def log_of_log_z_plus_inverse(log_z: float) -> float:
    """Natural log of log Z + 1/Z, finite even when 1/Z overflows (then it is ~ -log Z)."""
    if -log_z < _EXP_LIMIT:
        return float(np.log(log_z_plus_inverse(log_z)))
    return float(-log_z + np.log1p(log_z * np.exp(log_z)))


def prop4_printed_upper(log_z: float, n_layers: int) -> float:
    """log Z_t + 1/Z_t + log l, the printed upper bound of Prop. 4; inf when 1/Z_t overflows."""
    return log_z_plus_inverse(log_z) + float(np.log(n_layers))


def prop4_corrected(log_z: float) -> float:
    """L = log Z_t: App. C.1 redone with the energy value g_t(rho) = 0 at a stored pattern, through its own
    substitution (b) for Z_theta (one layer nearest everywhere; see :func:`layered_cross_entropy_1d`)."""
    return float(log_z)


def prop4_from_radius(n: int, radius: float, n_patterns: int, n_layers: int) -> dict[str, float]:
    """Every Prop. 4 quantity for equal balls of the given radius, with the CORRECT ball integral."""
    log_z = log_partition(n, radius, n_patterns)
    return {"n": float(n), "radius": float(radius), "n_patterns": float(n_patterns),
            "n_layers": float(n_layers), "log_Z_t": log_z, "log10_Z_t": log_z / np.log(10.0),
            "inv_Z_t": inverse_partition(log_z), "log_z_plus_inv": log_z_plus_inverse(log_z),
            "log_of_log_z_plus_inv": log_of_log_z_plus_inverse(log_z),
            "printed_upper": prop4_printed_upper(log_z, n_layers), "corrected_L": prop4_corrected(log_z)}


def proof_steps(inv_z: float, n_layers: int, c: float) -> dict[str, float]:
    """The constant terms of App. C.1's chain, L = log Z_theta + (mean E_global at the patterns), per reading.

    As printed, (a) adds 1/Z_t + log l and (b) substitutes log Z_theta ~= log l - c + log Z_t, which yields
    log Z_t + 1/Z_t + 2 log l - c, not the printed (b) log Z_t + 1/Z_t + log l - c. Eq. (10) with the density
    typo E_t(rho) = 1/Z_t gives (a) = log Z_theta + 1/Z_t - log l + c and then L = log Z_t + 1/Z_t. Returned:
    each reading's L - log Z_t."""
    log_l = float(np.log(n_layers))
    return {"printed_a_then_b": inv_z + 2 * log_l - c, "printed_b": inv_z + log_l - c,
            "eq10_with_density_typo": inv_z, "with_the_energy": 0.0}


def toy_cross_entropy_1d(pattern_positions: np.ndarray, radius: float, n_layers: int = 2) -> dict[str, float]:
    """Exact App. C.1 quantities for ``n_layers`` identical layers in n = 1, by quadrature.

    Every layer stores the same patterns, so E_global = -LSE(-E_1, ..., -E_l) = E - log l exactly and eq. (10)'s
    offset c(x) = E_global - E_t + log l is 0 everywhere: constant and inside [0, log l) as Prop. 4 assumes, which
    needs l >= 2 (for l = 1 that interval is empty). p(x) = exp(-E_global(x)) / Z_theta on Omega = union of
    [rho_i - r, rho_i + r] (disjoint), E the LogSumExp energy (4); the target puts mass 1/d on each rho_i, so
    L = log Z_theta + mean_i E_global(rho_i) exactly. Returned next to the paper's log Z_t + 1/Z_t + log l - c and
    the corrected log Z_t (which drops the mean energy, ~0 for separated patterns).
    """
    from scipy import integrate

    from assocmem.theory.energy import distance_energy

    if n_layers < 2:
        raise ValueError(f"Prop. 4 assumes c in [0, log l), which is empty for l = {n_layers}: use l >= 2")
    centres = np.sort(np.asarray(pattern_positions, dtype=np.float64).ravel())
    if centres.size > 1 and np.diff(centres).min() < 2 * radius:
        raise ValueError("intervals overlap: need spacing >= 2 * radius")
    patterns = centres[:, None]
    log_l = float(np.log(n_layers))

    def layer_density(x: float) -> float:
        return float(np.exp(-distance_energy(np.array([[x]]), patterns)[0]))

    z_t = sum(integrate.quad(layer_density, c - radius, c + radius, epsabs=0, epsrel=1e-12)[0] for c in centres)
    z_theta = sum(integrate.quad(lambda x: n_layers * layer_density(x), c - radius, c + radius, epsabs=0,
                                 epsrel=1e-12)[0] for c in centres)
    mean_global_energy = float(distance_energy(patterns, patterns).mean()) - log_l
    log_z = float(np.log(z_t))
    return {"log_Z": log_z, "log_Z_theta": float(np.log(z_theta)), "n_layers": float(n_layers), "c": 0.0,
            "exact_L": float(np.log(z_theta)) + mean_global_energy,
            "paper_L": log_z_plus_inverse(log_z) + log_l, "corrected_L": prop4_corrected(log_z),
            "mean_energy_at_patterns": mean_global_energy + log_l}


def layered_cross_entropy_1d(layers: list[np.ndarray], radius: float) -> dict[str, float]:
    """Exact App. C.1 quantities in n = 1 for layers that each store their own patterns, by quadrature.

    E_t is layer t's LogSumExp energy (4) over its patterns, E_global = -LSE(-E_1, ..., -E_l) (7), p_theta =
    exp(-E_global) / Z_theta on Omega = the union of [rho - r, rho + r] over every stored pattern (disjoint), Z_t =
    int_Omega exp(-g_t) (eq. 12), and the target puts equal mass on every distinct stored pattern, so L = log Z_theta +
    mean E_global(rho) exactly. Where the layers split far-apart patterns between them, E_global(rho) ~= 0 and
    Z_theta ~= sum_t Z_t, so L ~= log Z_t + log l: App. C.1's substitution (b), log Z_theta ~= log l - c + log Z_t,
    holds only where one layer is nearest everywhere (identical layers: :func:`toy_cross_entropy_1d`). Returned with
    eq. (10)'s offset c(x) = E_global - min_t E_t + log l at the patterns.
    """
    from scipy import integrate
    from scipy.special import logsumexp

    from assocmem.theory.energy import distance_energy

    stored = [np.asarray(layer, dtype=np.float64).ravel()[:, None] for layer in layers]
    centres = np.unique(np.concatenate([layer.ravel() for layer in stored]))  # a pattern two layers store: one ball
    if centres.size > 1 and np.diff(centres).min() < 2 * radius:
        raise ValueError("intervals overlap: need spacing >= 2 * radius")

    def layer_energies(x: np.ndarray) -> np.ndarray:  # (l, m)
        return np.stack([distance_energy(x[:, None], layer) for layer in stored])

    def global_energy(x: np.ndarray) -> np.ndarray:
        return -logsumexp(-layer_energies(x), axis=0)

    def over_omega(f) -> float:
        return sum(integrate.quad(lambda x: float(f(np.array([x]))[0]), c - radius, c + radius, epsabs=0,
                                  epsrel=1e-12)[0] for c in centres)

    z_theta = over_omega(lambda x: np.exp(-global_energy(x)))
    z_t = [over_omega(lambda x, layer=layer: np.exp(-((x[:, None] - layer.T) ** 2).min(axis=1))) for layer in stored]
    at_patterns = global_energy(centres)
    offsets = at_patterns - layer_energies(centres).min(axis=0) + np.log(len(stored))
    return {"n_layers": float(len(stored)), "log_Z_theta": float(np.log(z_theta)),
            "log_Z_t": [float(np.log(z)) for z in z_t], "log_sum_Z_t": float(np.log(sum(z_t))),
            "exact_L": float(np.log(z_theta) + at_patterns.mean()),
            "c_min": float(offsets.min()), "c_max": float(offsets.max())}
