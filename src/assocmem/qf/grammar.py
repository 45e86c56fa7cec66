"""McCoy, Frank & Linzen (2020) question-formation PCFG, embedded as data, and its exact template table.

``QUESTION_GRAMMAR`` mirrors ``cfgs/question.gr`` of tommccoy1/rnn-hierarchical-biases rule for rule, in
file order (weight, left-hand side, right-hand side). Weights are relative within a left-hand side. The
package never reads the ``.gr`` file at runtime; ``tests/unit/qf/test_qf_generate.py`` parses the shared copy
of the file and checks that this table equals it.

The grammar is non-recursive, so every derivation can be enumerated. A *template* is the sequence of
preterminals (plus the literal ``.``) that a derivation yields; a sentence is obtained from its template by
drawing every preterminal's word uniformly. :func:`enumerate_templates` lists all templates with their exact
probabilities and the structural facts the task needs (main-clause auxiliary position, whether the subject
carries a relative clause or a prepositional phrase), and checks the three properties the exact entropy
computation relies on: preterminal word sets are disjoint, words are equiprobable within a preterminal, and
no template is produced by two derivations.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from functools import cache

from assocmem.errors import AssocmemError


@dataclass(frozen=True)
class Rule:
    weight: float
    lhs: str
    rhs: tuple[str, ...]


def _rules(spec: str) -> tuple[Rule, ...]:
    rules = []
    for line in spec.strip().splitlines():
        weight, lhs, rhs = line.split(maxsplit=2)
        rules.append(Rule(float(weight), lhs, tuple(rhs.split())))
    return tuple(rules)


# One rule per line: weight, LHS, RHS (same order as question.gr).
QUESTION_GRAMMAR: tuple[Rule, ...] = _rules("""
1 ROOT S .
1 S NP_M_S VP_M_S
1 S NP_M_P VP_M_P
1 NP_M_S Det N_S
1 NP_M_S Det N_S Prep Det N
1 NP_M_S Det N_S RC_S
1 NP_M_P Det N_P
1 NP_M_P Det N_P Prep Det N
1 NP_M_P Det N_P RC_P
1 NP_O Det N_S
1 NP_O Det N_P
1 NP_O Det N_S Prep Det N
1 NP_O Det N_P Prep Det N
1 NP_O Det N_S RC_S
1 NP_O Det N_P RC_P
1 N N_S
1 N N_P
1 VP_M_S Aux_S V_intrans
1 VP_M_S Aux_S V_trans NP_O
1 VP_M_P Aux_P V_intrans
1 VP_M_P Aux_P V_trans NP_O
2 RC_S Rel Aux_S V_intrans
1 RC_S Rel Det N_S Aux_S V_trans
1 RC_S Rel Det N_P Aux_P V_trans
2 RC_S Rel Aux_S V_trans Det N
2 RC_P Rel Aux_P V_intrans
1 RC_P Rel Det N_S Aux_S V_trans
1 RC_P Rel Det N_P Aux_P V_trans
2 RC_P Rel Aux_P V_trans Det N
1 Det the
1 Det some
1 Det my
1 Det your
1 Det our
1 Det her
1 N_S newt
1 N_S orangutan
1 N_S peacock
1 N_S quail
1 N_S raven
1 N_S salamander
1 N_S tyrannosaurus
1 N_S unicorn
1 N_S vulture
1 N_S walrus
1 N_S xylophone
1 N_S yak
1 N_S zebra
1 N_P newts
1 N_P orangutans
1 N_P peacocks
1 N_P quails
1 N_P ravens
1 N_P salamanders
1 N_P tyrannosauruses
1 N_P unicorns
1 N_P vultures
1 N_P walruses
1 N_P xylophones
1 N_P yaks
1 N_P zebras
1 V_intrans giggle
1 V_intrans smile
1 V_intrans sleep
1 V_intrans swim
1 V_intrans wait
1 V_intrans move
1 V_intrans change
1 V_intrans read
1 V_intrans eat
1 V_trans entertain
1 V_trans amuse
1 V_trans high_five
1 V_trans applaud
1 V_trans confuse
1 V_trans admire
1 V_trans accept
1 V_trans remember
1 V_trans comfort
1 Aux_P do
1 Aux_S does
1 Aux_P don't
1 Aux_S doesn't
1 Prep around
1 Prep near
1 Prep with
1 Prep upon
1 Prep by
1 Prep behind
1 Prep above
1 Prep below
1 Rel who
1 Rel that
""")

START_SYMBOL = "ROOT"
# Grammar-specific node names that carry the task's structure.
SUBJECT_PREFIX = "NP_M_"
MAIN_VP_PREFIX = "VP_M_"
OBJECT_SYMBOL = "NP_O"
RC_PREFIX = "RC_"
AUX_PREFIX = "Aux_"
PREP_SYMBOL = "Prep"


@dataclass(frozen=True)
class Lexicon:
    """Preterminal -> its words (rules whose RHS is one terminal), and the words' owners."""

    words: dict[str, tuple[str, ...]]
    owner: dict[str, str]


@dataclass(frozen=True)
class Node:
    """A derivation tree node; a leaf has no children and is a preterminal or a literal terminal."""

    symbol: str
    children: tuple[Node, ...] = ()
    rule: int = -1  # index into the grammar of the rule expanding this node; -1 for leaves


@dataclass(frozen=True)
class Template:
    """One preterminal sequence with its probability and the structure the task needs.

    ``symbols`` includes the final ``.``; ``main_aux`` indexes the main-clause auxiliary in ``symbols``.
    ``subject_rc``/``subject_pp``: the main-clause subject NP carries a relative clause / a PP.
    ``rc_kind`` is ``ORC``, ``SRC_t`` or ``SRC_i`` for the subject RC (McCoy's gen-set categories), else "".
    ``log_word_choices`` = sum over preterminal slots of log(number of words): the entropy of the words
    given the template. ``rule_ids`` are the grammar indices of the non-lexical rules of its derivation.
    """

    symbols: tuple[str, ...]
    prob: float
    main_aux: int
    subject_rc: bool
    subject_pp: bool
    object_rc: bool
    object_pp: bool
    transitive: bool
    rc_kind: str
    log_word_choices: float
    rule_ids: tuple[int, ...]

    @property
    def aux_slots(self) -> tuple[int, ...]:
        return tuple(i for i, s in enumerate(self.symbols) if s.startswith(AUX_PREFIX))

    @property
    def n_words(self) -> int:
        """Sentence length in words, excluding the final '.'."""
        return len(self.symbols) - 1


def _rules_by_lhs(grammar: tuple[Rule, ...]) -> dict[str, list[tuple[int, Rule]]]:
    table: dict[str, list[tuple[int, Rule]]] = defaultdict(list)
    for index, rule in enumerate(grammar):
        table[rule.lhs].append((index, rule))
    return table


def build_lexicon(grammar: tuple[Rule, ...] = QUESTION_GRAMMAR) -> Lexicon:
    """Collect preterminals and check disjoint word sets and uniform word weights."""
    table = _rules_by_lhs(grammar)
    words: dict[str, tuple[str, ...]] = {}
    owner: dict[str, str] = {}
    for lhs, indexed in table.items():
        rules = [r for _, r in indexed]
        if not all(len(r.rhs) == 1 and r.rhs[0] not in table for r in rules):
            continue
        if len({r.weight for r in rules}) != 1:
            raise AssocmemError(f"grammar: words of preterminal {lhs} are not equiprobable")
        words[lhs] = tuple(r.rhs[0] for r in rules)
        for word in words[lhs]:
            if word in owner:
                raise AssocmemError(f"grammar: word {word!r} belongs to both {owner[word]} and {lhs}")
            owner[word] = lhs
    return Lexicon(words, owner)


def _derivations(symbol: str, table: dict[str, list[tuple[int, Rule]]], preterminals: set[str],
                 stack: tuple[str, ...] = ()) -> list[tuple[Node, float]]:
    """All derivation trees below ``symbol`` (down to preterminals) with their probabilities."""
    if symbol in preterminals or symbol not in table:
        return [(Node(symbol), 1.0)]
    if symbol in stack:
        raise AssocmemError(f"grammar: recursive symbol {symbol}; exact enumeration needs a finite grammar")
    rules = table[symbol]
    total = sum(r.weight for _, r in rules)
    results = []
    for index, rule in rules:
        partial: list[tuple[tuple[Node, ...], float]] = [((), rule.weight / total)]
        for child in rule.rhs:
            below = _derivations(child, table, preterminals, stack + (symbol,))
            partial = [(kids + (tree,), p * q) for kids, p in partial for tree, q in below]
        results.extend((Node(symbol, kids, index), p) for kids, p in partial)
    return results


def _leaves(node: Node) -> list[str]:
    if not node.children:
        return [node.symbol]
    return [leaf for child in node.children for leaf in _leaves(child)]


def find_node(node: Node, prefix: str) -> Node | None:
    """The first node (depth-first, left to right) whose symbol starts with ``prefix``."""
    if node.symbol.startswith(prefix):
        return node
    for child in node.children:
        found = find_node(child, prefix)
        if found is not None:
            return found
    return None


def _child(node: Node | None, prefix: str) -> Node | None:
    if node is None:
        return None
    return next((c for c in node.children if c.symbol.startswith(prefix)), None)


def _rc_kind(rc: Node | None) -> str:
    if rc is None:
        return ""
    kids = [c.symbol for c in rc.children]
    if "V_intrans" in kids:
        return "SRC_i"
    return "SRC_t" if kids[1].startswith(AUX_PREFIX) else "ORC"


def _main_aux_index(tree: Node) -> int:
    """Leaf index of the auxiliary directly under the main-clause VP."""
    index = 0

    def walk(node: Node, parent: str) -> int | None:
        nonlocal index
        if not node.children:
            here = index
            index += 1
            is_main = node.symbol.startswith(AUX_PREFIX) and parent.startswith(MAIN_VP_PREFIX)
            return here if is_main else None
        hits = [walk(child, node.symbol) for child in node.children]
        return next((h for h in hits if h is not None), None)

    found = walk(tree, "")
    if found is None:
        raise AssocmemError("grammar: a derivation has no auxiliary under the main-clause VP")
    return found


def _template(tree: Node, prob: float, lexicon: Lexicon) -> Template:
    symbols = tuple(_leaves(tree))
    subject = find_node(tree, SUBJECT_PREFIX)
    obj = find_node(tree, OBJECT_SYMBOL)
    subject_rc = _child(subject, RC_PREFIX)
    return Template(
        symbols=symbols,
        prob=prob,
        main_aux=_main_aux_index(tree),
        subject_rc=subject_rc is not None,
        subject_pp=_child(subject, PREP_SYMBOL) is not None,
        object_rc=_child(obj, RC_PREFIX) is not None,
        object_pp=_child(obj, PREP_SYMBOL) is not None,
        transitive=obj is not None,
        rc_kind=_rc_kind(subject_rc),
        log_word_choices=sum(math.log(len(lexicon.words[s])) for s in symbols if s in lexicon.words),
        rule_ids=tuple(_rule_ids(tree)),
    )


def _rule_ids(node: Node) -> list[int]:
    if not node.children:
        return []
    return [node.rule] + [r for child in node.children for r in _rule_ids(child)]


def enumerate_templates(grammar: tuple[Rule, ...] = QUESTION_GRAMMAR) -> tuple[Template, ...]:
    """Every template of the grammar with its exact probability, in a fixed (derivation) order.

    Raises AssocmemError if two derivations yield the same template (the template would then not
    determine the main auxiliary, and word-level entropies would need a sum over parses).
    """
    lexicon = build_lexicon(grammar)
    table = _rules_by_lhs(grammar)
    templates: dict[tuple[str, ...], Template] = {}
    for tree, prob in _derivations(START_SYMBOL, table, set(lexicon.words)):
        template = _template(tree, prob, lexicon)
        if template.symbols in templates:
            raise AssocmemError(f"grammar is ambiguous at template level: {' '.join(template.symbols)}")
        templates[template.symbols] = template
    total = sum(t.prob for t in templates.values())
    if not math.isclose(total, 1.0, rel_tol=1e-9):
        raise AssocmemError(f"grammar: template probabilities sum to {total}, not 1")
    return tuple(templates.values())


@cache
def question_templates() -> tuple[Template, ...]:
    """Cached templates of the embedded question-formation grammar."""
    return enumerate_templates(QUESTION_GRAMMAR)


@cache
def question_lexicon() -> Lexicon:
    return build_lexicon(QUESTION_GRAMMAR)


@cache
def question_template_index() -> dict[tuple[str, ...], int]:
    """Template symbols -> position in :func:`question_templates`."""
    return {t.symbols: i for i, t in enumerate(question_templates())}


@cache
def _question_trees() -> dict[tuple[str, ...], Node]:
    lexicon = question_lexicon()
    trees = _derivations(START_SYMBOL, _rules_by_lhs(QUESTION_GRAMMAR), set(lexicon.words))
    return {tuple(_leaves(tree)): tree for tree, _ in trees}


def derivation_tree_of(symbols: tuple[str, ...]) -> Node:
    """The one derivation tree of a template (by its symbols) of the embedded grammar (unique: see
    enumerate_templates)."""
    return _question_trees()[symbols]


def template_of(words: list[str] | tuple[str, ...]) -> Template | None:
    """The template of a sentence (words including the final '.'), or None if the grammar cannot yield it."""
    owner = question_lexicon().owner
    symbols = tuple(owner.get(word, word) for word in words)
    index = question_template_index().get(symbols)
    return None if index is None else question_templates()[index]
