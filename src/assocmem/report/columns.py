"""Human column headers for the report's tables, in one place.

Claims report their numbers under snake_case keys (checks.json keeps them: they are the machine-readable names).
A table shows each key as :func:`human_header` words: a whole-name entry of ``HEADERS`` when there is one, else the
key's parts joined by spaces, each part through ``WORDS`` (abbreviations upper-cased, a leading count ``n`` dropped:
``n_patterns`` is "patterns"). Math (``$...$``) is typeset by the report, so a subscript needs no underscore in
the text a reader sees.
"""

from __future__ import annotations

import re

HEADERS: dict[str, str] = {
    # the pipeline's run tables
    "val_ce": "val CE",
    "train_ce": "train CE",
    "test_ce": "test CE",
    "n_params": "parameters",
    "n_train_tokens": "training tokens",
    "n_tokens": "tokens",
    "max_rss_mb": "peak RSS (MB)",
    # energies, partition function, radius
    "r_star": "$r^*$",
    "2r_star_emb": r"$2r^*$, $n = d_{\mathrm{model}}$",
    "2r_star_seq": r"$2r^*$, $n = d_{\mathrm{model}} T_{\max}$",
    "gain_free_rms_norm": "RMS norm without the gain",
    "gain_rms": "RMS of the LayerNorm gain",
    "zero_share": "share of zero distances",
    "mean_nn_over_rms_norm": "mean NN distance / RMS norm",
    "ratio_to_2r_star": "ratio to $2r^*$",
    "log_Z_t": r"$\log Z_t$",
    "log_l": r"$\log l$",
    "radius_for_Z_equal_1": "radius where $Z_t = 1$",
    "printed_log_lower": "printed lower bound (log)",
    "printed_log_upper": "printed upper bound (log)",
    "correct_log_lower": "correct lower bound (log)",
    "correct_log_upper": "correct upper bound (log)",
    "frac_energy_equals_g": "share with $E = g$",
    "frac_upper_equality": "share with equality on the upper side",
    "frac_printed_violated": "share violating the printed bound",
    "g_minus_2mchn": r"$g - 2E_{\mathrm{MCHN}}$",
    "max_abs_global_minus_union": r"max $|E_{\mathrm{global}} - E_{\cup}|$",
    "offset_c_min": "min offset $c(x)$",
    "offset_c_max": "max offset $c(x)$",
    "min_value_minus_sharp_lower": "min value minus the sharp lower bound",
    "eq10_with_density_typo": "eq. (10) with the density typo",
    "printed_a_then_b": "printed, (a) then (b)",
    "printed_b": "printed (b)",
    "toy_d1_n1_l2_c": "toy ($d = 1$, $n = 1$, $l = 2$): $c$",
    "toy_d1_n1_l2_exact_L": "toy ($d = 1$, $n = 1$, $l = 2$): exact $L$",
    "toy_d1_n1_l2_paper_L": "toy ($d = 1$, $n = 1$, $l = 2$): the paper's $L$",
    "printed_argument_log_d_for_unit_Z_n1024": r"printed argument: $\log d$ for $Z_t = 1$ ($n = 1024$)",
    "correct_argument_log_d_for_unit_Z_n1024": r"correct argument: $\log d$ for $Z_t = 1$ ($n = 1024$)",
    # parameter counts
    "exact_A_total": "exact $A$ (total)",
    "exact_A_blocks": "exact $A$ (blocks)",
    "A_total": "$A$ (total)",
    "appendix_A": "appendix $A$",
    "appendix_real_dff_A": r"appendix $A$ with the real $d_{\mathrm{FF}}$",
    "paper_A": "the paper's $A$",
    "paper_A_count": "count with the paper's $A$",
    "paper_A_rel_err_total": "relative error with the paper's $A$ (total)",
    "n_over_d_squared": "$N/D^2$",
    "hf_count": "HF count",
    "exact_equals_hf": "exact = HF",
    "count_matches": "counts match",
    # literature, scaling
    "chinchilla_E_hoffmann": "Chinchilla $E$ (Hoffmann et al.)",
    "chinchilla_E_printed": "Chinchilla $E$ (printed)",
    "csv_rows_not_in_paper_table2": "CSV rows not in the paper's Table 2",
    "paper_table2_rows_not_in_csv": "Table 2 rows not in the CSV",
    "arxiv_v2_table3_loglog_slope": "arXiv v2 Table 3 log-log slope",
    "E": "$E$",
    "E_ci_low": "$E$, CI low",
    "E_ci_high": "$E$, CI high",
    "can_detect_b2": "can detect $b = 2$",
    "chi2": r"$\chi^2$",
    "chi2_per_dof": r"$\chi^2$ / dof",
    "max_rise_over_N": "max rise over $N$",
    "n_params_span": "span of $N$",
    "n_tokens_span": "span of $D$",
    "runs_stopped_early": "runs stopped early",
    "d_star": "$D^*$",
    "n_over_dstar_sq": "$N/D^{*2}$",
    # memorisation grid
    "n_span": "span of $N$",
    "d_span": "span of $D$",
    "d_span_squared": "span of $D$, squared",
    "n_span_covers_d_squared": "span of $N$ covers span of $D$ squared",
    "b_low": "$b$, 95% CI low",
    "b_high": "$b$, 95% CI high",
    "k": "sharpness $k$",
    "d_ref": r"$D_{\mathrm{ref}}$ (facts)",
    "bits_per_param": r"bits per parameter at $D_{\mathrm{ref}}$",
    "bits_per_param_low": "bits per parameter, 95% CI low",
    "bits_per_param_high": "bits per parameter, 95% CI high",
}

WORDS: dict[str, str] = {
    "ce": "CE", "se": "SE", "nn": "NN", "rms": "RMS", "lse": "LSE", "mchn": "MCHN", "hf": "HF", "tv": "TV", "cv": "CV",
    "ci": "CI", "eos": "<eos>", "frac": "share", "rel": "relative", "err": "error", "abs": "absolute",
    "dff": "d FF", "gpt2": "GPT-2", "1d": "1-D", "2d": "2-D", "beta1": "β = 1", "beta2": "β = 2", "neg": "negative",
    "arxiv": "arXiv", "loglog": "log-log", "dof": "dof", "csv": "CSV", "mb": "MB", "emb": "embedding", "ff": "FF",
    "params": "parameters", "table2": "Table 2", "tol": "tolerance", "sims": "simulations", "wald": "Wald",
    "kaplan": "Kaplan", "hoffmann": "Hoffmann", "no": "without", "lo": "low", "hi": "high", "sq": "squared",
    "dstar": "$D^*$", "allenzhu": "Allen-Zhu & Li",
}

IDENTIFIER = re.compile(r"^[A-Za-z0-9_]*_[A-Za-z0-9_]*$")


def human_header(name: str) -> str:
    """The words a table shows for the key ``name``; names without an underscore (already words, or one word such
    as 'floor' or 'd') are kept, and so is anything that is not a plain identifier."""
    if name in HEADERS:
        return HEADERS[name]
    if not IDENTIFIER.match(name):
        return name
    parts = [part for part in name.split("_") if part]
    if len(parts) > 1 and parts[0] == "n":
        parts = parts[1:]  # n_chunks: the number of chunks
    return " ".join(WORDS.get(part.lower(), part) for part in parts)


def human_label(name: str) -> str:
    """A row label such as a numbers set ('synthetic_duplicates', 'gpt2_medium') in words; others unchanged."""
    return human_header(name) if IDENTIFIER.match(name) and name not in HEADERS else name
