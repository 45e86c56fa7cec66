"""Which distribution the question-formation generator samples: the published grammar or the fitted one.

A :class:`QFDistribution` gives the template probabilities of the *stream* that fills the iid pool
(train/dev/test) and, for the fitted model, of the separate stream that fills the gen split:

- ``published``: McCoy's ``question.gr`` with its printed weights; gen takes the subject-RC questions of
  the same stream (the behaviour before the fit existed).
- ``fitted``: rule probabilities estimated by :mod:`assocmem.qf.fit` from McCoy's released files and
  shipped as ``assocmem/data/qf_fitted_grammar.json``. The grammar's rules are kept; a rule's probability
  may depend on a *context* (an annotation of the node it expands), which makes the model a PCFG with
  split nonterminals. The iid and gen pools have separate rule tables (McCoy's gen file does not follow
  the iid files' distribution, see the fit's JSON), and gen is filled under McCoy's 2:1 SRC:ORC quota.

Annotations (each a set of context features; a context is the '&'-join of the features that apply):

- ``position``: a node inside the main-clause subject NP gets ``in=subj``, inside the object NP ``in=obj``
  (splits the relative-clause rules and the PP noun's number by position);
- ``subject``: the main-clause VP gets ``subj=bare|PP|RC``, the type of the subject NP (makes the verb
  phrase depend on the subject).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from assocmem.errors import AssocmemError
from assocmem.qf.grammar import (
    MAIN_VP_PREFIX,
    OBJECT_SYMBOL,
    PREP_SYMBOL,
    QUESTION_GRAMMAR,
    RC_PREFIX,
    SUBJECT_PREFIX,
    Lexicon,
    Node,
    Rule,
    Template,
    build_lexicon,
    derivation_tree_of,
    enumerate_templates,
    find_node,
    question_lexicon,
    question_templates,
)

WEIGHT_CHOICES = ("fitted", "published")
ANNOTATIONS: dict[str, tuple[str, ...]] = {
    "none": (),
    "subject": ("subject",),
    "position": ("position",),
    "position+subject": ("position", "subject"),
}
FITTED_FILE = "qf_fitted_grammar.json"
RuleKey = tuple[str, str]  # (context, left-hand side)


@dataclass(frozen=True)
class QFDistribution:
    """Template distributions the generator samples.

    ``iid``: templates whose ``prob`` is the iid stream's distribution (before the task coin and routing).
    ``gen``: templates whose ``prob`` is the gen stream's distribution, or None when gen takes the
    subject-RC questions of the iid stream. ``gen_quota``: gen holds n - n//3 subject-relative (SRC) and
    n//3 object-relative (ORC) lines, as McCoy's gen file does.
    """

    name: str
    iid: tuple[Template, ...]
    gen: tuple[Template, ...] | None
    lexicon: Lexicon
    gen_quota: bool = False


def gen_quota_sizes(n_gen: int) -> dict[str, int]:
    """Lines of each relative-clause group in a gen split of ``n_gen`` lines under McCoy's quota."""
    return {"SRC": n_gen - n_gen // 3, "ORC": n_gen // 3}


def rc_group(template: Template) -> str:
    """'ORC' for an object-relative subject RC, 'SRC' for a subject-relative one (transitive or not)."""
    return "ORC" if template.rc_kind == "ORC" else "SRC"


def published_distribution(grammar: tuple[Rule, ...] = QUESTION_GRAMMAR) -> QFDistribution:
    if grammar is QUESTION_GRAMMAR:
        return QFDistribution("published", question_templates(), None, question_lexicon())
    return QFDistribution("published", enumerate_templates(grammar), None, build_lexicon(grammar))


def subject_type(tree: Node) -> str:
    """'bare', 'PP' or 'RC': the main-clause subject NP's expansion."""
    subject = find_node(tree, SUBJECT_PREFIX)
    if subject is None:
        raise AssocmemError("grammar: a derivation has no main-clause subject NP")
    kids = [child.symbol for child in subject.children]
    if any(kid.startswith(RC_PREFIX) for kid in kids):
        return "RC"
    return "PP" if PREP_SYMBOL in kids else "bare"


def rule_contexts(template: Template, annotation: str) -> tuple[tuple[str, int], ...]:
    """(context, rule index) of every non-lexical rule in the template's derivation, in pre-order."""
    return _rule_contexts(template.symbols, annotation)


@cache
def _rule_contexts(symbols: tuple[str, ...], annotation: str) -> tuple[tuple[str, int], ...]:
    features = ANNOTATIONS[annotation]
    tree = derivation_tree_of(symbols)
    subject = f"subj={subject_type(tree)}" if "subject" in features else ""
    uses: list[tuple[str, int]] = []

    def walk(node: Node, position: str) -> None:
        if not node.children:  # a preterminal or '.': words are uniform, not fitted
            return
        parts = [position] if position and "position" in features else []
        if node.symbol.startswith(MAIN_VP_PREFIX) and subject:
            parts.append(subject)
        uses.append(("&".join(parts), node.rule))
        inner = ("in=subj" if node.symbol.startswith(SUBJECT_PREFIX)
                 else "in=obj" if node.symbol == OBJECT_SYMBOL else position)
        for child in node.children:
            walk(child, inner)

    walk(tree, "")
    return tuple(uses)


@cache
def rule_keys(annotation: str) -> tuple[RuleKey, ...]:
    """Every (context, LHS) some template's derivation uses under ``annotation``, sorted."""
    keys = {(context, QUESTION_GRAMMAR[rule].lhs) for t in question_templates()
            for context, rule in rule_contexts(t, annotation)}
    return tuple(sorted(keys))


def alternatives(lhs: str) -> tuple[int, ...]:
    """Rule indices with this left-hand side."""
    return tuple(i for i, rule in enumerate(QUESTION_GRAMMAR) if rule.lhs == lhs)


def template_probabilities(table: dict[RuleKey, dict[int, float]], annotation: str) -> list[float]:
    """Probability of each template of :func:`question_templates` under an annotated rule table."""
    probs = []
    for template in question_templates():
        logp = 0.0
        for context, rule in rule_contexts(template, annotation):
            p = table[(context, QUESTION_GRAMMAR[rule].lhs)].get(rule, 0.0)
            if p == 0.0:
                logp = -math.inf
                break
            logp += math.log(p)
        probs.append(math.exp(logp))
    total = sum(probs)
    if not math.isclose(total, 1.0, rel_tol=1e-9):
        raise AssocmemError(f"fitted rule table: template probabilities sum to {total}, not 1")
    return probs


def reweighted(probs: list[float]) -> tuple[Template, ...]:
    return tuple(replace(t, prob=p) for t, p in zip(question_templates(), probs, strict=True))


def fitted_from_tables(iid: dict[RuleKey, dict[int, float]], gen: dict[RuleKey, dict[int, float]],
                       annotation: str, name: str = "fitted") -> QFDistribution:
    return QFDistribution(name, reweighted(template_probabilities(iid, annotation)),
                          reweighted(template_probabilities(gen, annotation)), question_lexicon(), gen_quota=True)


def table_from_rows(rows: list[dict[str, Any]], where: str) -> dict[RuleKey, dict[int, float]]:
    """JSON rows {context, lhs, rhs, prob} -> rule table keyed by rule index."""
    index = {(rule.lhs, " ".join(rule.rhs)): i for i, rule in enumerate(QUESTION_GRAMMAR)}
    table: dict[RuleKey, dict[int, float]] = {}
    for row in rows:
        rule = index.get((row["lhs"], row["rhs"]))
        if rule is None:
            raise AssocmemError(f"{where}: rule {row['lhs']} -> {row['rhs']} is not in the embedded grammar")
        table.setdefault((row["context"], row["lhs"]), {})[rule] = float(row["prob"])
    return table


def fitted_path() -> Path:
    return Path(str(resources.files("assocmem.data") / FITTED_FILE))


def read_fitted(path: str | Path | None = None) -> dict[str, Any]:
    """The shipped fit (or the JSON at ``path``); AssocmemError if missing or malformed."""
    path = Path(path) if path is not None else fitted_path()
    if not path.is_file():
        raise AssocmemError(
            f"missing fitted question-formation grammar {path}; regenerate it with `python -m assocmem.qf.fit "
            "--dev question.dev --gen question.gen --out <path>` or set dataset.grammar_weights: published")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise AssocmemError(f"corrupt fitted grammar {path}: {err}; regenerate it with python -m assocmem.qf.fit"
                            ) from err


@cache
def _fitted_distribution(path: str | None) -> QFDistribution:
    fit = read_fitted(path)
    where = path or str(fitted_path())
    try:
        model = fit["model"]
        return fitted_from_tables(table_from_rows(model["iid"], where), table_from_rows(model["gen"], where),
                                  model["annotation"])
    except (KeyError, TypeError) as err:
        raise AssocmemError(f"{where}: not a fitted grammar ({err!r}); regenerate it with python -m "
                            "assocmem.qf.fit") from err


def distribution(weights: str | QFDistribution) -> QFDistribution:
    """``fitted`` (the shipped fit), ``published`` (question.gr as printed), or a distribution as is."""
    if isinstance(weights, QFDistribution):
        return weights
    if weights == "published":
        return published_distribution()
    if weights == "fitted":
        return _fitted_distribution(None)
    raise AssocmemError(f"dataset.grammar_weights must be one of {WEIGHT_CHOICES}, got {weights!r}")
