"""The paper's N = O(D^2) read as a statement about memorisation (Sec. 5 after eq. (13), resting on Assumption 1:
the model stores its D training samples as patterns), tested where it can be measured directly: a memorisation
grid (model sizes N x numbers of random facts D x seeds, each run trained until it recalls its facts or its
exposure budget; :mod:`assocmem.memorisation`). Its storage boundary N_b(D) = N0 + c D^b is fitted by the sweep stage
(maximum likelihood, profile-likelihood intervals; the pure power law N_b ∝ D^b beside it) after a power
simulation at the grid's own design; this module only reads that analysis.

Verdict rule, fixed before any data (:func:`memorisation_verdict`):

1. no memorisation grid in the run: not-testable, naming the command that runs one (:data:`GRID_COMMAND`);
2. no boundary fit (every run stored, none did, or the fit is not of the model's form): not-testable, with the
   fit's reason;
3. the design not powered (``alternatives_can_decide``: grids simulated at this design from a pure power law, a
   power law plus a fixed overhead and a budget-limited boundary, each at b = 1, 1.35 and 2, do not give
   calibrated intervals that tell the paper's 2 from the others): not-testable with the power reason. Power comes
   first: an unpowered design is never refuted, whatever its interval;
4. the grid's N span smaller than the square of its D span (a boundary of slope 2 would leave the grid):
   not-testable;
5. else, on the 95% profile interval for b of the primary model (:func:`interval_verdict`; since issue 38 the
   storage boundary with a fixed overhead, N_b = N0 + c D^b: a pure power law fitted where N0 is a large share of
   N_b bends below 1 whatever the law, so it is a sensitivity row; since issue 41, where the runs record whether
   they stored within half their budget, that boundary read from both budgets with the boundary's remaining move
   unknown (``primary_model`` "two_budget"): the one-budget fit is blind to a boundary the budget moved, so it is a
   sensitivity row too): refuted iff it excludes the paper's 2;
   reproduced iff it includes 2 and excludes both other laws (1: a fixed capacity per parameter, Allen-Zhu & Li;
   1.35 = 1/0.74: Kaplan et al.); otherwise not-testable (it includes 2 and another law).

The same interval rule is applied to every sensitivity row of the analysis (other recall thresholds, half the
exposure budget, the grid without its smallest D or N); a verdict that changes under one of them is called fragile
in the evidence (the verdict itself stays that of the primary analysis).
"""

from __future__ import annotations

import math
import re
from typing import Any

from assocmem.memorisation import budget
from assocmem.memorisation import power_alternatives as pa
from assocmem.report import quotes
from assocmem.report.claims.base import check_row, listing, yes_no
from assocmem.report.claims.registry import Claim, Untestable, register
from assocmem.report.evidence import Evidence

GRID_COMMAND = "`snakemake --cores all --configfile config/memorisation.yaml`"
PAPER_LAW = "paper"
ALLEN_ZHU_BITS_PER_PARAM = 2.0  # Allen-Zhu & Li (2024): about 2 bits of knowledge per parameter
# the exponents and the capacity every memorisation row is read against (a row without a grid still states them)
LAW_NUMBERS = {"b_paper": 2.0, "b_kaplan": 1 / 0.74, "b_allen_zhu": 1.0,
               "allen_zhu_bits_per_param": ALLEN_ZHU_BITS_PER_PARAM}
LAW_NAMES = {"paper": "the paper's 2", "kaplan": "Kaplan et al.'s 1.35", "allen_zhu": "Allen-Zhu & Li's 1"}
LAW_TEX = {"paper": "2", "kaplan": "1.35", "allen_zhu": "1"}
MODEL_LABELS = {"two_budget": "two-budget fit", "overhead": "one-budget overhead fit", "pure": "pure power law"}


def law_name(name: str, laws: dict[str, float]) -> str:
    return LAW_NAMES.get(name, f"$b={laws[name]:.3g}$")


def in_words(text: str, laws: dict[str, float] | None = None) -> str:
    """A message of the analysis as report text: relations as symbols, law keys as names, any other identifier as
    code (the receipts typeset formulas and never show a snake_case name as prose)."""
    text = text.replace(">=", "≥").replace("<=", "≤")
    for name in laws or {}:
        words = LAW_NAMES.get(name, name)
        text = re.sub(rf"\(\s*{re.escape(name)}\s*\)", f"({words})", text)
        # a bare key is a law only where it is not an English word ("paper") or stands beside "against"
        bare = (rf"\b{re.escape(name)}(?= against\b)|(?<=\bagainst ){re.escape(name)}\b" if name.isalpha()
                and name == PAPER_LAW else rf"\b{re.escape(name)}\b")
        text = re.sub(bare, words, text)
    return re.sub(r"(?<![`\w])[a-z][a-z0-9]*_[a-z0-9_]*[a-z0-9](?![`\w])", lambda m: f"`{m.group(0)}`", text)


def _interval(low: float, high: float, digits: int = 2) -> str:
    def end(value: float) -> str:
        return f"{value:.{digits}f}" if math.isfinite(value) else ("$-\\infty$" if value < 0 else "$\\infty$")

    return f"[{end(low)}, {end(high)}]"


def interval_verdict(low: float, high: float, laws: dict[str, float]) -> tuple[str, str]:
    """Step 5 of the rule on a 95% interval [low, high] for b: refuted iff it excludes the paper's b; reproduced iff
    it includes it and excludes every other law; otherwise not-testable."""
    if math.isnan(low) or math.isnan(high):
        return "not-testable", "the boundary exponent has no interval (the fit failed)"
    paper = laws[PAPER_LAW]
    others = {name: value for name, value in laws.items() if name != PAPER_LAW}
    if not low <= paper <= high:
        side = "below" if high < paper else "above"
        return "refuted", f"its 95% interval {_interval(low, high)} lies {side} the paper's {paper:g}"
    inside = [name for name, value in others.items() if low <= value <= high]
    if not inside:
        return "reproduced", (f"its 95% interval {_interval(low, high)} contains the paper's {paper:g} and excludes "
                              + " and ".join(law_name(name, laws) for name in others))
    return "not-testable", (f"its 95% interval {_interval(low, high)} contains the paper's {paper:g} and also "
                            + " and ".join(law_name(name, laws) for name in inside)
                            + ": a larger or denser grid is needed to tell them apart")


def primary_fit(analysis: dict[str, Any]) -> dict[str, Any] | None:
    """The fit the verdict reads: the two-budget fit (issue 41) where it is the analysis's primary, the overhead
    model's (issue 38) where the analysis has one, the pure power law's in an analysis written before it; None where
    the primary fit failed."""
    if analysis.get("primary_model") == "two_budget":
        return analysis["two_budget_fit"]
    return analysis["overhead_fit"] if "overhead_fit" in analysis else analysis.get("fit")


def primary_interval(analysis: dict[str, Any]) -> tuple[float, float] | None:
    """The 95% interval for b of :func:`primary_fit`."""
    fit = primary_fit(analysis)
    return None if fit is None else (fit["b_low"], fit["b_high"])


def _power_gate(analysis: dict[str, Any]) -> tuple[bool, str]:
    if "overhead_fit" in analysis:
        return analysis["alternatives_can_decide"], analysis["alternatives_reason"]
    return analysis["can_decide"], analysis["power_reason"]


def memorisation_verdict(analysis: dict[str, Any]) -> tuple[str, str]:
    """Steps 2-5 of the module's rule on one memorisation grid's analysis (step 1, no grid, is the caller's)."""
    interval = primary_interval(analysis)
    if interval is None:
        reason = analysis.get("overhead_reason", analysis.get("reason", "no reason given"))
        return "not-testable", f"no storage boundary fit: {in_words(reason)}"
    laws = analysis["laws"]
    decide, why = _power_gate(analysis)
    if not decide:
        return "not-testable", ("the design cannot carry a verdict (power first, against a pure power law, a fixed "
                                "overhead and a budget-limited boundary): " + in_words(why, laws))
    if not analysis["n_span_covers_d_squared"]:
        return "not-testable", (f"the grid's $N$ span ({analysis['n_span']:.3g}×) is smaller than the square of its "
                                f"$D$ span ({analysis['d_span']:.3g}×, squared {analysis['d_span'] ** 2:.3g}×): a "
                                "boundary of slope 2 would leave the grid")
    return interval_verdict(*interval, laws)


def sensitivity_verdicts(analysis: dict[str, Any]) -> list[dict[str, Any]]:
    """The interval rule on every sensitivity row (the first is the primary analysis): its choice, verdict and
    interval; a row without a fit has verdict None."""
    laws = analysis["laws"]
    rows = []
    for row in analysis.get("sensitivity", []):
        fitted = not (math.isnan(row["b"]) or math.isnan(row["low"]) or math.isnan(row["high"]))
        rows.append({"choice": row["choice"], "b": row["b"], "low": row["low"], "high": row["high"],
                     "note": row.get("note", ""),
                     "verdict": interval_verdict(row["low"], row["high"], laws)[0] if fitted else None})
    return rows


def fragility(analysis: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The alternative choices under which the interval rule gives another verdict than under the primary fit, and
    those under which there is no fit at all."""
    rows = sensitivity_verdicts(analysis)
    if not rows:
        return [], []
    primary = rows[0]["verdict"]
    changed = [f"{in_words(row['choice'])}: {row['verdict']} ($b={row['b']:.2f}$, {_interval(row['low'], row['high'])})"
               for row in rows[1:] if row["verdict"] is not None and row["verdict"] != primary]
    unfitted = [in_words(row["choice"]) for row in rows[1:] if row["verdict"] is None]
    return changed, unfitted


def _fragility_sentence(analysis: dict[str, Any]) -> str:
    changed, unfitted = fragility(analysis)
    text = ""
    if changed:
        text += " Fragile: the interval rule gives another verdict under " + "; ".join(changed) + "."
    elif len(analysis.get("sensitivity", [])) > 1:
        text += " Robust: the interval rule gives the same verdict under every sensitivity row that has a fit."
    if unfitted:
        text += " No fit under: " + listing(unfitted) + "."
    return text


def _power_sentence(analysis: dict[str, Any]) -> str:
    power, laws = analysis["power"], analysis["laws"]
    coverage = ", ".join(f"{row['coverage']:.0%} at $b={row['b']:.3g}$" for row in power["by_b"])
    weakest = min(((row, other, share) for row in power["by_b"] for other, share in row["excludes"].items()),
                  key=lambda item: item[2], default=None)
    text = (f"Power at this design ({power['n_sim']} simulated grids per $b$, its $N$, $D$ and seeds, sharpness "
            f"$k={analysis['power_k']:.3g}$): coverage of the 95% interval {coverage}")
    if weakest is not None:
        row, other, share = weakest
        text += (f"; the weakest separation: simulated at $b={row['b']:.3g}$, the interval excludes "
                 f"{law_name(other, laws)} in {share:.0%} of grids")
    return text + "."


def _bits_sentence(analysis: dict[str, Any]) -> str:
    bits = analysis["bits_per_param"]
    low, high = bits["low"], bits["high"]
    inside = low <= ALLEN_ZHU_BITS_PER_PARAM <= high
    return (f"Bits per parameter at the boundary at $D={bits['d']:.4g}$ facts "
            f"({analysis['bits_per_fact']:g} bits each): {bits['value']:.2f}, 95% interval {_interval(low, high)}, "
            + ("consistent with" if inside else "unlike")
            + f" Allen-Zhu & Li's about {ALLEN_ZHU_BITS_PER_PARAM:g} bits per parameter.")


def _laws_sentence(analysis: dict[str, Any]) -> str:
    laws = analysis["laws"]
    low, high = primary_interval(analysis)
    inside = [name for name, b in laws.items() if low <= b <= high]
    outside = [name for name in laws if name not in inside]
    sentence = (f"Laws inside the interval: {listing([law_name(n, laws) for n in inside], 'none')}; "
                f"excluded: {listing([law_name(n, laws) for n in outside], 'none')}.")
    every, every_reason = ((analysis.get("alternatives_tell_every_law_apart", True),
                            analysis.get("alternatives_every_law_reason", "")) if "overhead_fit" in analysis else
                           (analysis.get("tells_every_law_apart", True), analysis.get("every_law_reason", "")))
    if analysis.get("alternatives_can_decide", analysis.get("can_decide")) and not every:
        sentence += (" The verdict on the paper needs only its 2 told from 1 and from 1.35; this design cannot also "
                     f"tell 1 from 1.35 ({in_words(every_reason, laws)}), so which of those two the "
                     "interval keeps is no finding.")
    return sentence


def _alternatives_sentence(analysis: dict[str, Any]) -> str:
    """The power against the three truths, in one sentence: each family's worst coverage and the pure law's."""
    power = analysis.get("alternatives")
    if power is None:
        return f"No power against the alternatives: {in_words(analysis['alternatives_reason'])}."
    primary = analysis.get("primary_model", "overhead")
    others = [(model, label) for model, label in (("overhead", "the one-budget fit"), ("pure", "the pure power law's"))
              if model != primary]
    parts = []
    for family in pa.FAMILIES:
        rows = [row for row in power["rows"] if row["family"] == family]
        if rows:
            parts.append(f"{pa.FAMILY_LABELS[family]}: coverage "
                         + ", ".join(f"{row[primary]['coverage']:.0%}" for row in rows) + " ("
                         + "; ".join(f"{label}: " + ", ".join(f"{row[model]['coverage']:.0%}" for row in rows)
                                     for model, label in others) + ")")
    return (f"Power against the alternatives ({power['n_sim']} grids per truth at this design, each truth at "
            f"$b=1$, 1.35 and 2 fitted to this grid; coverage of the {MODEL_LABELS[primary]}'s interval): "
            + "; ".join(parts) + ".")


def _numbers(analysis: dict[str, Any]) -> dict[str, Any]:
    numbers: dict[str, Any] = {
        "n_runs": analysis["n_runs"], "seeds": analysis["seeds"], "n_span": analysis["n_span"],
        "d_span": analysis["d_span"], "d_span_squared": analysis["d_span"] ** 2,
        "n_span_covers_d_squared": analysis["n_span_covers_d_squared"], "threshold": analysis["threshold"],
        "stop_at_recall": analysis["stop_at_recall"], "bits_per_fact": analysis["bits_per_fact"], **LAW_NUMBERS}
    fit = analysis.get("fit")
    if fit is not None:
        numbers.update(_pure_numbers(analysis, fit, "pure_" if "overhead_fit" in analysis else ""))
    overhead = analysis.get("overhead_fit")
    if overhead is not None:
        numbers.update({key: overhead[key] for key in ("b", "b_low", "b_high", "n0", "n0_low", "n0_high", "c",
                                                       "c_low", "c_high", "k")})
        numbers["can_decide"] = analysis["alternatives_can_decide"]
        for row in overhead["margin"]:
            numbers[f"bits_margin_d{row['n_facts']:.0f}"] = row["bits_per_param_margin"]
        tag = {name: name.replace("_", "") for name in analysis["laws"]}
        two = analysis.get("two_budget_fit")
        if two is not None:
            numbers.update({f"two_budget_{key}": two[key] for key in ("b", "b_low", "b_high", "b_at_lambda_0",
                                                                       "b_at_lambda_1", "k")})
        for row in (analysis.get("alternatives") or {}).get("rows", []):
            key = f"alt_{row['family']}_{tag[row['law']]}"
            for model in (m for m in ("overhead", "pure", "two_budget") if m in row):
                numbers[f"{key}.{model}_coverage"] = row[model]["coverage"]
                numbers.update({f"{key}.{model}_excludes_{tag[name]}": share
                                for name, share in row[model]["excludes"].items()})
    return numbers


def _pure_numbers(analysis: dict[str, Any], fit: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The pure power law's numbers (the primary of an analysis written before issue 38), under ``prefix``."""
    bits = analysis["bits_per_param"]
    numbers = {"b": fit["b"], "b_low": fit["b_low"], "b_high": fit["b_high"], "k": fit["k"], "d_ref": fit["d_ref"],
               "bits_per_param": bits["value"], "bits_per_param_low": bits["low"],
               "bits_per_param_high": bits["high"], "can_decide": analysis["can_decide"],
               "power_sims": analysis["power"]["n_sim"]}
    numbers = {prefix + key: value for key, value in numbers.items()}
    tag = {name: name.replace("_", "") for name in analysis["laws"]}  # 'power_allenzhu.coverage'
    for row in analysis["power"]["by_b"]:
        key = f"{prefix}power_{tag[row['law']]}" if row.get("law") in tag else f"{prefix}power_b{row['b']:.3g}"
        numbers.update({f"{key}.coverage": row["coverage"], f"{key}.mean_b": row["mean_b"],
                        f"{key}.median_width": row["median_width"],
                        **{f"{key}.excludes_{tag[name]}": row["excludes"].get(name, math.nan)
                           for name in analysis["laws"]}})  # the true law's own column is empty
    return numbers


LIMITS = (
    "Random key-value facts on small transformers, at one exposure budget (a run that had not stored its facts by "
    "then counts as not stored: a larger budget can only lower the boundary at the D where such runs sit, and the "
    "sensitivity rows refit with half the budget to show the direction; whether the boundary is capacity's or the "
    "budget's is checked by re-running the cells within one $N$ step of it at twice the exposures: "
    "`python -m assocmem.memorisation.budget_check config <record> --config <config> --out <2x config>`, run it, "
    "then `budget_check compare`, and the verdict waits where the boundary moves). The two-budget fit assumes the "
    "boundary's remaining move with more budget is at most the move between half and the full budget (returns per "
    "doubling that do not grow); a boundary that keeps moving by more would take its interval off the capacity $b$. "
    "The verdict changes if the 95% "
    "interval for $b$ moves across 2 (refuted, reproduced) or across 1 or 1.35 (reproduced, not-testable), if the "
    "power simulation at this design falls below 90% coverage or 80% separation of the laws (then not-testable), or if "
    "the grid's $N$ span no longer covers the square of its $D$ span. A grid with more model sizes, more seeds or "
    "a wider $D$ range narrows the interval; facts are the cleanest case of Assumption 1 (every training sample "
    "is a pattern to store), so natural text would need its own test.")

def no_grid() -> Untestable:
    """The row of a run without a memorisation grid: the power of the largest grid that would fit beside the default
    run (:mod:`assocmem.memorisation.budget`) and the command that decides the claim."""
    record = budget.load()
    return Untestable(
        "nothing: no memorisation grid in this run",
        "The claim read as a statement about storing $D$ samples is tested by a memorisation grid (model sizes × "
        f"numbers of random facts × seeds, each trained until it recalls its facts). {budget.sentence(record)} "
        f"Decided by {GRID_COMMAND}: its {len(record['n_params'])} × {len(record['n_facts'])} × 3 design passes the "
        "same power simulation before its verdict.",
        "Needs a memorisation grid whose $N$ span covers the square of its $D$ span and whose power simulation shows "
        "it can tell $b=1$, 1.35 and 2 apart.",
        {"memorisation_grids": 0, "budget_grid_runs": record["runs"], "budget_grid_can_decide": record["can_decide"],
         "budget_grid_weakest_exclusion": record["weakest"]["excluded"], "budget_grid_k": record["k"], **LAW_NUMBERS})


_PURE_METHOD = ("The storage boundary $N_b(D)\\propto D^b$ fitted by Firth logistic regression of stored on "
                "$\\log N - b\\log D$ with a profile-likelihood interval, after a power simulation at the same "
                "design (`assocmem.memorisation`).")
_OVERHEAD_METHOD = ("The storage boundary $N_b(D)=N_0+cD^b$ fitted by maximum likelihood (logit $P$(stored) "
                    "$=k(\\log N-\\log N_b(D))$) with profile-likelihood intervals, the pure power law "
                    "$N_b\\propto D^b$ (Firth) beside it as a sensitivity row, after a power simulation at the same "
                    "design against a pure power law, a fixed overhead and a budget-limited boundary "
                    "(`assocmem.memorisation`).")
_TWO_BUDGET_METHOD = ("The capacity boundary $N_b(D)=N_0+cD^b$ read from two budgets: each run's outcome within half "
                      "and within the whole exposure budget as one cumulative logit, the boundary at the budget "
                      "$\\lambda\\Delta(D)$ above capacity and at half of it $(1+\\lambda)\\Delta(D)$, the remaining "
                      "move $\\lambda\\in[0,1]$ unknown and profiled (profile-likelihood intervals); the one-budget "
                      "overhead fit and the pure power law $N_b\\propto D^b$ (Firth) beside it as sensitivity rows, "
                      "after a power simulation at the same design against a pure power law, a fixed overhead and a "
                      "budget-limited boundary (`assocmem.memorisation`).")


def _method(analysis: dict[str, Any]) -> str:
    if analysis.get("primary_model") == "two_budget":
        return _TWO_BUDGET_METHOD
    return _OVERHEAD_METHOD if "overhead_fit" in analysis else _PURE_METHOD


def memorisation(analysis: dict[str, Any]) -> dict[str, Any]:
    """The check row of one memorisation grid's analysis (:mod:`assocmem.memorisation.analysis`), by the module's
    rule."""
    verdict, reason = memorisation_verdict(analysis)
    design = (f"{analysis['n_runs']} runs: {len(analysis['n_params'])} model sizes ({analysis['n_span']:.3g}× in "
              f"$N$) × {len(analysis['n_facts'])} numbers of facts ({analysis['d_span']:.3g}× in $D$) × "
              f"{analysis['seeds']} seeds")
    computed = (f"A memorisation grid of {design}, each trained until it recalled {analysis['stop_at_recall']:.0%} "
                f"of its facts or its exposure budget; a run counts as stored at a recall of at least "
                f"{analysis['threshold']:.0%}. " + _method(analysis))
    fit = analysis.get("fit")
    if primary_interval(analysis) is None:
        return check_row("memorisation", computed, _numbers(analysis), verdict, reason[0].upper() + reason[1:] + ".",
                         "data", ours_tex=r"Not measured: the grid has no storage boundary fit.", limits=LIMITS)
    if "overhead_fit" in analysis:
        return _overhead_row(analysis, computed, verdict, reason)
    laws = analysis["laws"]
    by_interval = analysis["can_decide"] and analysis["n_span_covers_d_squared"]  # else the reason is a gate's
    evidence = (f"Storage boundary exponent $b={fit['b']:.2f}$"
                + ("" if by_interval else f", 95% interval {_interval(fit['b_low'], fit['b_high'])}")
                + f": {reason}. {_laws_sentence(analysis)} {_power_sentence(analysis)} The design "
                + ("can" if analysis["can_decide"] else "cannot")
                + f" carry a verdict: {in_words(analysis['power_reason'], laws)}. $N$ span {analysis['n_span']:.3g}× "
                f"against $D$ span squared {analysis['d_span'] ** 2:.3g}× (covered: "
                f"{yes_no(analysis['n_span_covers_d_squared'])}). {_bits_sentence(analysis)}")
    evidence += _fragility_sentence(analysis)
    ours = (r"Measured: $N_b\propto D^b$ with $b=" + f"{fit['b']:.2f}" + r"$, 95\% interval $["
            + ", ".join(f"{v:.2f}" if math.isfinite(v) else (r"-\infty" if v < 0 else r"\infty")
                        for v in (fit["b_low"], fit["b_high"]))
            + r"]$ (the paper: $b=2$; Kaplan et al.: 1.35; a fixed capacity per parameter: 1); "
            + f"{analysis['bits_per_param']['value']:.2f} bits per parameter at the boundary.")
    return check_row("memorisation", computed, _numbers(analysis), verdict, evidence, "data", ours_tex=ours,
                     limits=LIMITS)


def _tex_interval(low: float, high: float, fmt: str = "{:.2f}") -> str:
    return "[" + ", ".join(fmt.format(v) if math.isfinite(v) else (r"-\infty" if v < 0 else r"\infty")
                           for v in (low, high)) + "]"


def _overhead_row(analysis: dict[str, Any], computed: str, verdict: str, reason: str) -> dict[str, Any]:
    """The row of an analysis with the overhead model as its primary (issue 38)."""
    fit, pure = analysis["overhead_fit"], analysis.get("fit")
    largest = fit["margin"][-1]
    two = analysis.get("two_budget_fit") if analysis.get("primary_model") == "two_budget" else None
    one_budget = (f"Storage boundary $N_b=N_0+cD^b$: $b={fit['b']:.2f}$, 95% interval "
                  f"{_interval(fit['b_low'], fit['b_high'])}; $N_0={fit['n0']:,.0f}$ "
                  f"[{fit['n0_low']:,.0f}, {fit['n0_high']:,.0f}] parameters; $c={fit['c']:.3g}$")
    if two is None:
        evidence = f"{one_budget}: {reason}. "
    else:
        shift = two["shift"]
        evidence = (f"Capacity boundary read from two budgets: $b={two['b']:.2f}$, 95% interval "
                    f"{_interval(two['b_low'], two['b_high'])} over the unknown remaining move ($b$ "
                    f"{two['b_at_lambda_0']:.2f} if the budget already reached capacity, {two['b_at_lambda_1']:.2f} "
                    "if the next doubling moves the boundary as much as the last; the boundary within half the "
                    f"budget {shift[0]['nats']:.2f} nats above the full budget's at $D={shift[0]['n_facts']:,.0f}$, "
                    f"{shift[1]['nats']:.2f} at $D={shift[1]['n_facts']:,.0f}$): {reason}. The one-budget fit (a "
                    f"sensitivity row): {one_budget}. ")
    evidence += (f"{_laws_sentence(analysis)} {_alternatives_sentence(analysis)} $N$ span {analysis['n_span']:.3g}× "
                f"against $D$ span squared {analysis['d_span'] ** 2:.3g}× (covered: "
                f"{yes_no(analysis['n_span_covers_d_squared'])}). Bits per parameter at the margin "
                f"({analysis['bits_per_fact']:g} bits per fact over $dN_b/dD$, the parameters the next fact costs) at "
                f"$D={largest['n_facts']:,.0f}$: "
                f"{largest['bits_per_param_margin']:.2f} {_interval(largest['low'], largest['high'])}, "
                + ("consistent with" if largest["low"] <= ALLEN_ZHU_BITS_PER_PARAM <= largest["high"] else "unlike")
                + f" Allen-Zhu & Li's about {ALLEN_ZHU_BITS_PER_PARAM:g} bits per parameter.")
    if pure is not None:
        evidence += (f" The pure power law $N_b\\propto D^b$ (a sensitivity row): $b={pure['b']:.2f}$ "
                     f"{_interval(pure['b_low'], pure['b_high'])}, biased low where the overhead is a large share "
                     "of $N_b$.")
    evidence += _fragility_sentence(analysis)
    primary = two or fit
    ours = (r"Measured: $N_b=N_0+cD^b$ with $b=" + f"{primary['b']:.2f}" + r"$, 95\% interval $"
            + _tex_interval(primary["b_low"], primary["b_high"])
            + (r"$ (read from two budgets), one-budget $N_0=" if two else r"$, $N_0=")
            + f"{fit['n0']:,.0f}".replace(",", "{,}")
            + r"$ (the paper: $b=2$; Kaplan et al.: 1.35; a fixed capacity per parameter: 1).")
    return check_row("memorisation", computed, _numbers(analysis), verdict, evidence, "data", ours_tex=ours,
                     limits=LIMITS)


def _memorisation_row(evidence: Evidence) -> dict[str, Any] | Untestable:
    grids = evidence.memorisation_grids
    if not grids:
        return no_grid()
    return memorisation(next(iter(grids.values())))


register(Claim(
    "memorisation", "Memorisation (Sec. 5)", r"storing $D$ samples needs $N = O(D^2)$",
    "Sec. 5: for Z_t to reach Z_t = 1, we need N = O(D^2); Assumption 1: after saturation, the model memorizes the "
    "training samples as patterns. Read together: a model that stores D samples needs O(D^2) parameters.",
    r"The model stores its $D$ training samples as patterns (Assumption 1), and $Z_t=1$ needs $N=O(D^2)$.",
    quotes.MEMORISATION, order=105, evaluate=_memorisation_row, untestable=no_grid()))
