"""The data_audit stage's fidelity check: the generated training split against a configured real file (McCoy's
question.dev or another real iid file), and the shipped fit's own numbers for the report when none is configured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assocmem.io import sha256_file
from assocmem.qf.compare import compare_with_reference, fidelity_rows
from assocmem.qf.generate import read_qf
from assocmem.qf.heldout import FIDELITY_THRESHOLD, FIT_SEED, N_BOOT, heldout_fidelity
from assocmem.qf.mle import parse_templates
from assocmem.qf.weights import distribution, read_fitted


def shipped_fit_summary() -> dict[str, Any]:
    """The fit-time numbers of the shipped grammar, for the report when no real file is configured."""
    fit = read_fitted()
    return {key: fit[key] for key in ("date", "sources", "method", "heldout_fidelity", "calibration",
                                      "gen_heldout_fidelity", "reference_floors")} | {
        "annotation": fit["model"]["annotation"], "selection_rule": fit["selection"]["rule"],
        "candidates": [{"annotation": c["annotation"], "passes": c["passes"],
                        "free_parameters_per_table": c["free_parameters_per_table"]}
                       for c in fit["selection"]["candidates"]]}


def audit_reference(train_file: Path, params: dict[str, Any], *, seed: int = FIT_SEED,
                    n_boot: int = N_BOOT) -> dict[str, Any]:
    """Our training split against ``params['reference_dev']`` (McCoy's dev or another real iid file).

    Always holds the shipped fit's numbers (``shipped_fit``). With a reference: the direct comparison
    (:func:`compare_with_reference`) and its fidelity rows, flagged ``in_sample`` when the shipped fit was
    fitted on that very file; and, for fitted weights, the held-out check redone on the reference's halves
    (the iid table refitted on each half, the shipped gen table).
    """
    reference = params["reference_dev"]
    result = compare_with_reference(train_file, reference)
    result["shipped_fit"] = shipped_fit_summary()
    if not result["available"]:
        return result
    reference_lines = read_qf(reference)
    result["reference_sha256"] = sha256_file(reference)
    fitted = params["source"] == "generate" and params["grammar_weights"] == "fitted"
    fit_sources = {source["sha256"] for source in result["shipped_fit"]["sources"].values()}
    result["in_sample"] = fitted and result["reference_sha256"] in fit_sources
    result["direct_fidelity"] = fidelity_rows(read_qf(train_file), reference_lines, n_boot=n_boot, seed=seed,
                                              threshold=FIDELITY_THRESHOLD)
    if fitted:
        pairs = parse_templates(reference_lines, str(reference))
        annotation = result["shipped_fit"]["annotation"]
        result["heldout"] = heldout_fidelity(pairs, distribution("fitted").gen, annotation, seed=seed,
                                             n_boot=n_boot)
    return result
