"""Distance between generated question-formation examples and McCoy's released ones.

:func:`compare_splits` returns a JSON-serialisable dict: task fractions, sentence-length and POS-template
histograms with their total-variation distance (TVD), the rates of subject RC / PP, intransitive main
verbs, object RC / PP, relative-clause kinds, a chi-square test of the reference's sentence frames against
the generated frequencies, duplicates, overlap, repeated nouns, and word uniformity within preterminals.

:func:`fidelity_rows` is the fidelity measure the report shows: TV distance of the (task, template),
sentence-length and task distributions, each beside its noise floor (mean TV between two independent
samples of the generated and the reference sizes drawn from one distribution), with TV <= 1.5 x noise
floor as the goal. :mod:`assocmem.qf.heldout` applies it to held-out halves of McCoy's files.

Sampling-noise yardstick of :func:`compare_splits`: a TVD between a reference of n lines and a generator
is positive even when they share one distribution. ``noise`` draws ``n_boot`` subsamples of n lines from
``generated`` and reports the TVD of each to the whole generated set (``vs_generated``: the null for the
observed TVD when ``generated`` is large) and between two disjoint subsamples (``pair``). Pass a large
generated split (e.g. train) as ``generated`` for a sharp comparison.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path

import numpy as np
from scipy.stats import binomtest, chi2, chisquare

from assocmem.qf.generate import QFExample, target_words
from assocmem.qf.grammar import Template, question_lexicon, template_of

Key = Callable[[QFExample, Template], Hashable]


def tvd(p: dict, q: dict) -> float:
    """Total-variation distance between two probability dicts (missing keys count as 0)."""
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))


def _frequencies(keys: Sequence[Hashable]) -> dict:
    counts = Counter(keys)
    return {k: c / len(keys) for k, c in counts.items()}


def _subject(t: Template) -> str:
    return "RC" if t.subject_rc else "PP" if t.subject_pp else "bare"


def _predicate(t: Template) -> str:
    if not t.transitive:
        return "intrans"
    return "obj_RC" if t.object_rc else "obj_PP" if t.object_pp else "obj_bare"


def frame(example: QFExample, t: Template) -> str:
    return f"{example.task}/{_subject(t)}/{_predicate(t)}"


def _parsed(examples: Sequence[QFExample]) -> tuple[list[tuple[QFExample, Template]], int, int]:
    """(example, template) pairs of parsable examples, number unparsable, number with a wrong target."""
    pairs, unparsed, wrong_target = [], 0, 0
    for example in examples:
        template = template_of(example.words)
        if template is None:
            unparsed += 1
            continue
        if target_words(example.words, example.task, template) != example.target:
            wrong_target += 1
        pairs.append((example, template))
    return pairs, unparsed, wrong_target


def _noise(generated: list[Hashable], n: int, n_boot: int, rng: np.random.Generator) -> dict:
    keys = np.empty(len(generated), dtype=object)
    keys[:] = generated
    full = _frequencies(generated)
    against_full, pairs = [], []
    for _ in range(n_boot):
        if len(keys) >= 2 * n:
            order = rng.permutation(len(keys))
            first, second = keys[order[:n]], keys[order[n : 2 * n]]
        else:
            first, second = rng.choice(keys, n), rng.choice(keys, n)
        against_full.append(tvd(_frequencies(list(first)), full))
        pairs.append(tvd(_frequencies(list(first)), _frequencies(list(second))))
    return {
        "vs_generated_mean": float(np.mean(against_full)),
        "vs_generated_q95": float(np.quantile(against_full, 0.95)),
        "pair_mean": float(np.mean(pairs)),
        "pair_q95": float(np.quantile(pairs, 0.95)),
        "n_boot": n_boot,
    }


def _histogram_block(gen: list[tuple[QFExample, Template]], ref: list[tuple[QFExample, Template]],
                     key: Key, n_boot: int, rng: np.random.Generator, top: int = 0) -> dict:
    gen_keys = [key(e, t) for e, t in gen]
    ref_keys = [key(e, t) for e, t in ref]
    p_gen, p_ref = _frequencies(gen_keys), _frequencies(ref_keys)
    block = {
        "tvd": tvd(p_ref, p_gen),
        "noise": _noise(gen_keys, len(ref_keys), n_boot, rng),
        "n_distinct_generated": len(p_gen),
        "n_distinct_reference": len(p_ref),
    }
    if top:
        worst = sorted(set(p_gen) | set(p_ref), key=lambda k: -abs(p_ref.get(k, 0) - p_gen.get(k, 0)))[:top]
        block["largest_gaps"] = [
            {"key": str(k), "reference_count": round(p_ref.get(k, 0) * len(ref_keys)),
             "expected_count": p_gen.get(k, 0) * len(ref_keys)} for k in worst
        ]
    else:
        block["generated"] = {str(k): v for k, v in sorted(p_gen.items())}
        block["reference"] = {str(k): v for k, v in sorted(p_ref.items())}
    return block


def _rates(pairs: list[tuple[QFExample, Template]]) -> dict:
    n = max(len(pairs), 1)
    decl = [t for e, t in pairs if e.task == "decl"]
    transitive = [t for _, t in pairs if t.transitive]
    return {
        "subject_rc": sum(t.subject_rc for _, t in pairs) / n,
        "subject_pp": sum(t.subject_pp for _, t in pairs) / n,
        "subject_rc_in_decl": sum(t.subject_rc for t in decl) / max(len(decl), 1),
        "subject_rc_in_quest": sum(t.subject_rc for e, t in pairs if e.task == "quest")
        / max(len(pairs) - len(decl), 1),
        "intransitive": 1 - len(transitive) / n,
        "object_rc_given_transitive": sum(t.object_rc for t in transitive) / max(len(transitive), 1),
        "object_pp_given_transitive": sum(t.object_pp for t in transitive) / max(len(transitive), 1),
        "subject_rc_kinds": dict(Counter(t.rc_kind for _, t in pairs if t.subject_rc)),
        "object_rc_kinds": dict(Counter(_object_rc_kind(t) for _, t in pairs if t.object_rc)),
        "repeated_noun": sum(_repeats_noun(e) for e, _ in pairs) / n,
    }


def _object_rc_kind(t: Template) -> str:
    rel = max(i for i, s in enumerate(t.symbols) if s == "Rel")
    if t.symbols[rel + 1] == "Det":
        return "ORC"
    return "SRC_i" if t.symbols[rel + 2] == "V_intrans" else "SRC_t"


def _repeats_noun(example: QFExample) -> bool:
    owner = question_lexicon().owner
    nouns = [w for w in example.words if owner.get(w, "").startswith("N_")]
    return len(nouns) != len(set(nouns))


def _frame_test(gen: list[tuple[QFExample, Template]], ref: list[tuple[QFExample, Template]]) -> dict:
    """Chi-square of the reference's frame counts against the generated frame frequencies."""
    p_gen = _frequencies([frame(e, t) for e, t in gen])
    observed = Counter(frame(e, t) for e, t in ref)
    frames = sorted(set(p_gen) | set(observed))
    expected = {f: p_gen.get(f, 0.0) * len(ref) for f in frames}
    impossible = sum(observed[f] for f in frames if expected[f] == 0)
    testable = [f for f in frames if expected[f] > 0]
    statistic = sum((observed[f] - expected[f]) ** 2 / expected[f] for f in testable)
    df = max(len(testable) - 1, 1)
    return {
        "observed": {f: observed[f] for f in frames},
        "expected": expected,
        "chi2": statistic,
        "df": df,
        "p_value": float(chi2.sf(statistic, df)),
        "reference_in_frames_generated_never": impossible,
    }


def _word_uniformity(pairs: list[tuple[QFExample, Template]]) -> dict:
    """Chi-square p-value of word counts within each preterminal (uniform under the grammar)."""
    lexicon = question_lexicon()
    counts = Counter(w for e, _ in pairs for w in e.words if w in lexicon.owner)
    result = {}
    for preterminal, words in lexicon.words.items():
        observed = [counts[w] for w in words]
        if len(words) > 1 and sum(observed) > 0:
            result[preterminal] = float(chisquare(observed).pvalue)
    return result


def _duplicates(examples: Sequence[QFExample]) -> int:
    counts = Counter(e.words for e in examples)
    return sum(c - 1 for c in counts.values() if c > 1)


def compare_splits(generated: list[QFExample], reference: list[QFExample], *, n_boot: int = 200,
                   seed: int = 0) -> dict:
    """Compare generated examples with reference (McCoy) examples; JSON-serialisable dict."""
    rng = np.random.default_rng(seed)
    gen, gen_unparsed, gen_wrong = _parsed(generated)
    ref, ref_unparsed, ref_wrong = _parsed(reference)
    decl_gen = sum(e.task == "decl" for e, _ in gen) / max(len(gen), 1)
    decl_ref = sum(e.task == "decl" for e, _ in ref)
    generated_sentences = {e.words for e in generated}
    return {
        "n": {"generated": len(generated), "reference": len(reference)},
        "parse": {"generated_unparsable": gen_unparsed, "reference_unparsable": ref_unparsed,
                  "generated_wrong_target": gen_wrong, "reference_wrong_target": ref_wrong},
        "task_fraction": {
            "generated": {"decl": decl_gen, "quest": 1 - decl_gen},
            "reference": {"decl": decl_ref / max(len(ref), 1), "quest": 1 - decl_ref / max(len(ref), 1)},
            "binomial_p": float(binomtest(decl_ref, len(ref), decl_gen).pvalue) if ref and 0 < decl_gen < 1
            else None,
        },
        "length": _histogram_block(gen, ref, lambda e, t: t.n_words, n_boot, rng),
        "template": _histogram_block(gen, ref, lambda e, t: " ".join(t.symbols[:-1]), n_boot, rng, top=10),
        "task_template": _histogram_block(gen, ref, lambda e, t: f"{e.task}: {' '.join(t.symbols[:-1])}",
                                          n_boot, rng, top=10),
        "frame": _histogram_block(gen, ref, frame, n_boot, rng),
        "frame_test": _frame_test(gen, ref),
        "rates": {"generated": _rates(gen), "reference": _rates(ref)},
        "word_uniformity_p": {"generated": _word_uniformity(gen), "reference": _word_uniformity(ref)},
        "duplicates": {"generated": _duplicates(generated), "reference": _duplicates(reference)},
        "reference_sentences_in_generated": sum(e.words in generated_sentences for e in reference),
    }


FIDELITY_MEASURES = {
    "template": "(task, POS template)",
    "length": "sentence length",
    "task": "quest/decl split",
}


def _fidelity_key(measure: str, example: QFExample, template: Template | None) -> Hashable:
    if measure == "task":
        return example.task
    if template is None:
        return "unparsable"
    return (example.task, template.symbols) if measure == "template" else template.n_words


def count_tv(a: np.ndarray, b: np.ndarray) -> float:
    """TV distance between two histograms given as counts over the same categories."""
    return 0.5 * float(np.abs(a / a.sum() - b / b.sum()).sum())


def noise_draws(gen_counts: np.ndarray, n_ref: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """TV between two independent samples, of the reference's and the generated set's sizes, drawn from the
    generated frequencies: what sampling noise alone gives when both sides share one distribution."""
    p = gen_counts / gen_counts.sum()
    first = rng.multinomial(n_ref, p, size=n_boot)
    second = rng.multinomial(int(gen_counts.sum()), p, size=n_boot)
    return np.array([count_tv(a, b) for a, b in zip(first, second, strict=True)])


def fidelity_row(measure: str, gen_counts: np.ndarray, ref_counts: np.ndarray, *, n_boot: int,
                 rng: np.random.Generator, threshold: float) -> dict:
    """One measure's TV beside its noise floor; passes when TV <= threshold x noise floor (the null's mean)."""
    distance = count_tv(ref_counts, gen_counts)
    noise = noise_draws(gen_counts, int(ref_counts.sum()), n_boot, rng)
    floor = float(noise.mean())
    ratio = distance / floor if floor > 0 else (0.0 if distance == 0 else None)  # one category: no noise
    return {"measure": measure, "label": FIDELITY_MEASURES[measure], "tv": distance, "noise_floor": floor,
            "noise_q95": float(np.quantile(noise, 0.95)), "ratio": ratio, "threshold": threshold,
            "passes": bool(distance <= threshold * floor),
            "null_pass_rate": float((noise <= threshold * floor).mean()),
            "n_generated": int(gen_counts.sum()), "n_reference": int(ref_counts.sum()),
            "categories": int(np.count_nonzero(gen_counts + ref_counts))}


def fidelity_rows(generated: Sequence[QFExample], reference: Sequence[QFExample], *, n_boot: int = 200,
                  seed: int = 0, threshold: float = 1.5) -> list[dict]:
    """TV distance of (task, template), length and task distributions, each beside its noise floor.

    A row passes when TV <= ``threshold`` x the noise floor (mean TV of two same-sized samples of one
    distribution, :func:`noise_draws`); ``noise_q95`` is that null's 95th percentile, and
    ``null_pass_rate`` the share of null draws that would pass (the check's pass rate for a generator that
    matches the reference exactly and is known without estimation error). Reference categories the
    generated set never produces keep their reference mass in the TV.
    """
    rng = np.random.default_rng(seed)
    gen_templates = [template_of(e.words) for e in generated]
    ref_templates = [template_of(e.words) for e in reference]
    rows = []
    for measure in FIDELITY_MEASURES:
        gen_keys = [_fidelity_key(measure, e, t) for e, t in zip(generated, gen_templates, strict=True)]
        ref_keys = [_fidelity_key(measure, e, t) for e, t in zip(reference, ref_templates, strict=True)]
        index = {k: i for i, k in enumerate(dict.fromkeys(gen_keys + ref_keys))}
        gen_counts = np.bincount([index[k] for k in gen_keys], minlength=len(index)).astype(float)
        ref_counts = np.bincount([index[k] for k in ref_keys], minlength=len(index)).astype(float)
        rows.append(fidelity_row(measure, gen_counts, ref_counts, n_boot=n_boot, rng=rng, threshold=threshold))
    return rows


# --- report tables ---------------------------------------------------------------------------------------

FIDELITY_TABLE_HEADER = ["data", "fold", "distribution", "TV ours vs McCoy", "noise floor", "TV / noise floor",
                         r"$\mathrm{TV}\le 1.5\times$ noise"]
RATE_TABLE_HEADER = ["rate", "ours", "McCoy (configured reference)", "binomial p"]


def _fidelity_table_rows(label: str, fold: str, rows: list[dict]) -> list[list]:
    # A one-category measure (gen's task split: all questions) has nothing to compare.
    return [[label, fold.replace("_", " "), row["label"], row["tv"], row["noise_floor"], row["ratio"],
             "PASS" if row["passes"] else "FAIL"] for row in rows if row["categories"] > 1]


def _heldout_table_rows(label: str, fidelity: dict) -> list[list]:
    return [r for fold, result in fidelity["folds"].items() for r in _fidelity_table_rows(label, fold, result["rows"])]


def fidelity_table(audit: dict) -> list[list]:
    """Rows of the report's fidelity table from the data_audit's compare.json (see qf.audit.audit_reference):
    held-out on the configured reference (else the shipped fit-time numbers), the gen table's held-out
    check, and the direct comparison with a configured reference (flagged when it is in-sample)."""
    shipped = audit["shipped_fit"]
    if audit.get("heldout"):
        rows = _heldout_table_rows("configured reference, held-out halves", audit["heldout"])
    else:
        rows = _heldout_table_rows(f"McCoy dev (shipped, fit {shipped['date']})", shipped["heldout_fidelity"])
    rows += _heldout_table_rows(f"McCoy gen (shipped, fit {shipped['date']})", shipped["gen_heldout_fidelity"])
    if audit.get("direct_fidelity"):
        label = "configured reference, all lines" + (" (IN-SAMPLE: the fit used it)" if audit["in_sample"] else "")
        rows += _fidelity_table_rows(label, "our_train_split", audit["direct_fidelity"])
    return rows


def rate_table(audit: dict) -> list[list]:
    """Task fraction and structural rates, ours against the configured reference."""
    task = audit["task_fraction"]
    ours, theirs = audit["rates"]["generated"], audit["rates"]["reference"]
    rows = [["decl fraction", task["generated"]["decl"], task["reference"]["decl"], task["binomial_p"]]]
    return rows + [[name, ours[name], theirs[name], ""] for name in ("intransitive", "subject_rc", "subject_pp",
                                                                      "repeated_noun") if name in ours]


def compare_with_reference(train_file: Path, reference: str | None) -> dict:
    """Our (large) training split against McCoy's real dev: a sharp comparison with a proper noise yardstick.

    ``reference`` None means no comparison was configured; a configured file that is missing is an error."""
    from assocmem.errors import AssocmemError
    from assocmem.qf.generate import read_qf

    if not reference:
        return {"available": False, "reference": None, "reason": "dataset.reference_dev is not configured"}
    if not Path(reference).is_file():
        raise AssocmemError(f"dataset.reference_dev: file {reference} does not exist (give the path of McCoy's "
                            "question.dev, or remove the key)")
    result = compare_splits(read_qf(train_file), read_qf(Path(reference)))
    return {**result, "reference": str(reference), "available": True}
