"""The mathematics of Niu et al. (2024), implemented in float64/log space and checked independently.

Modules: energy (Props. 1-3), global_energy (eqs. 7-8), partition (eq. 12, Lemma 5, Z_t), radius (r*),
loss_bound (Prop. 4), params (App. D, N vs D^2), landscapes (Fig. 1). No file I/O happens here.
"""
