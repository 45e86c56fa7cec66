"""Grammar table, sampler, split files, reader and LM tokens of the question-formation data."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from pathlib import Path

import pytest
from helpers import SHARED
from hypothesis import given, settings
from hypothesis import strategies as st
from qf_oracles import n_predicted_tokens
from scipy.stats import chisquare

from assocmem.errors import AssocmemError
from assocmem.qf.generate import (
    DEFAULT_SIZES,
    QFExample,
    TemplateSampler,
    generate_qf,
    generate_splits,
    lm_tokens,
    parse_line,
    passes_gen_filter,
    read_qf,
    target_words,
)
from assocmem.qf.grammar import (
    QUESTION_GRAMMAR,
    Rule,
    enumerate_templates,
    question_lexicon,
    question_templates,
    template_of,
)
from assocmem.qf.heldout import iid_cell_probabilities
from assocmem.qf.weights import distribution

QF_SHARED = SHARED / "data" / "question_formation"
needs_shared = pytest.mark.skipif(not (QF_SHARED / "question.dev").is_file(),
                                  reason="../shared QF data absent")
SMALL = {"n_train": 3000, "n_dev": 100, "n_test": 300, "n_gen": 300}


@pytest.fixture(scope="module", params=["fitted", "published"])
def qf_small_splits(request: pytest.FixtureRequest) -> dict[str, list[QFExample]]:
    splits, _ = generate_splits(seed=11, weights=request.param, **SMALL)
    return {name: [parse_line(line, name) for line in lines] for name, lines in splits.items()}


# --- grammar --------------------------------------------------------------------------------------


def parse_grammar_text(text: str, source: str = "<grammar>") -> tuple[Rule, ...]:
    """Parse McCoy's ``.gr`` format: ``weight<TAB>LHS<TAB>RHS``; blank lines are skipped.

    Trailing whitespace (``question.gr`` has a trailing tab on one line) is ignored.
    """
    rules = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.rstrip().split("\t")
        if len(fields) != 3 or not fields[2].split():
            raise AssocmemError(f"{source}:{number}: expected 'weight<TAB>LHS<TAB>RHS', got {line!r}")
        try:
            weight = float(fields[0])
        except ValueError as err:
            raise AssocmemError(f"{source}:{number}: bad weight {fields[0]!r}") from err
        rules.append(Rule(weight, fields[1].strip(), tuple(fields[2].split())))
    return tuple(rules)


@pytest.mark.skipif(not (QF_SHARED / "question.gr").is_file(), reason="../shared question.gr absent")
def test_embedded_grammar_is_identical_to_shared_file() -> None:
    text = (QF_SHARED / "question.gr").read_text(encoding="utf-8")
    assert parse_grammar_text(text, "question.gr") == QUESTION_GRAMMAR


def test_parse_grammar_text_ignores_trailing_tab_and_rejects_bad_lines() -> None:
    rules = parse_grammar_text("1\tRel\tthat\t\n\n2\tS\tNP VP\n")
    assert [(r.weight, r.lhs, r.rhs) for r in rules] == [(1.0, "Rel", ("that",)), (2.0, "S", ("NP", "VP"))]
    with pytest.raises(AssocmemError, match="g.gr:1"):
        parse_grammar_text("1 S NP VP\n", "g.gr")
    with pytest.raises(AssocmemError, match="bad weight"):
        parse_grammar_text("x\tS\tNP\n", "g.gr")


def test_template_table_is_complete_and_structured() -> None:
    templates = question_templates()
    assert len(templates) == 272
    assert math.isclose(sum(t.prob for t in templates), 1.0, rel_tol=1e-12)
    assert math.isclose(sum(t.prob for t in templates if t.subject_rc), 1 / 3, rel_tol=1e-12)
    assert math.isclose(sum(t.prob for t in templates if not t.transitive), 1 / 2, rel_tol=1e-12)
    assert {t.n_words for t in templates} == {4, 6, 7, 9, 11, 12, 14, 16}
    for t in templates:
        assert t.symbols[t.main_aux].startswith("Aux_")
        assert t.symbols[-1] == "."
        # The main auxiliary is the first one unless the subject carries a relative clause.
        assert (t.main_aux == t.aux_slots[0]) == (not t.subject_rc)


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


def _toy(spec: str) -> tuple:
    lines = ["\t".join(line.split(maxsplit=2)) for line in spec.strip().splitlines()]
    return parse_grammar_text("\n".join(lines))


def test_ambiguous_grammar_is_rejected() -> None:
    grammar = _toy("""
        1 ROOT S .
        1 S NP_M_S VP_M_S
        1 NP_M_S Det N_S
        1 NP_M_S Det N_S
        1 VP_M_S Aux_S V
        1 Det the
        1 N_S yak
        1 Aux_S does
        1 V swim
    """)
    with pytest.raises(AssocmemError, match="ambiguous"):
        enumerate_templates(grammar)


@pytest.mark.parametrize(("extra", "message"), [
    ("1 V yak", "belongs to both"),
    ("2 V run", "not equiprobable"),
])
def test_lexicon_checks(extra: str, message: str) -> None:
    grammar = _toy(f"""
        1 ROOT S .
        1 S NP_M_S VP_M_S
        1 NP_M_S Det N_S
        1 VP_M_S Aux_S V
        1 Det the
        1 N_S yak
        1 Aux_S does
        1 V swim
        {extra}
    """)
    with pytest.raises(AssocmemError, match=message):
        enumerate_templates(grammar)


def test_recursive_grammar_is_rejected() -> None:
    grammar = _toy("""
        1 ROOT S .
        1 S NP_M_S VP_M_S
        1 NP_M_S Det N_S
        1 NP_M_S NP_M_S Det N_S
        1 VP_M_S Aux_S V
        1 Det the
        1 N_S yak
        1 Aux_S does
        1 V swim
    """)
    with pytest.raises(AssocmemError, match="recursive"):
        enumerate_templates(grammar)


# --- targets and tokens ---------------------------------------------------------------------------


def test_question_moves_main_auxiliary() -> None:
    words = _words("the quail that does swim doesn't entertain our xylophone .")
    template = template_of(words)
    assert template is not None and template.subject_rc and template.rc_kind == "SRC_i"
    assert " ".join(target_words(words, "quest", template)) == (
        "doesn't the quail that does swim entertain our xylophone ?")
    assert target_words(words, "decl", template) == words


def test_lm_tokens_and_count() -> None:
    example = parse_line("the quail doesn't entertain our xylophone . quest\t"
                         "doesn't the quail entertain our xylophone ?", "x:1")
    tokens = lm_tokens(example)
    assert tokens[0] == "<sos>" and tokens[-1] == "<eos>"
    assert tuple(tokens[1:10]) == _words("the quail doesn't entertain our xylophone . quest doesn't")
    k = 6
    assert n_predicted_tokens(example) == len(tokens) - 1 == 2 * k + 4


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_sampled_sentences_have_consistent_structure(seed: int) -> None:
    import numpy as np

    sampler = TemplateSampler()
    ids, sentences = sampler.sample(np.random.default_rng(seed), 20)
    owner = question_lexicon().owner
    for k, words in zip(ids, sentences, strict=True):
        template = sampler.templates[k]
        assert template_of(words) == template
        question = target_words(words, "quest", template)
        assert owner[question[0]].startswith("Aux_")
        assert sorted(question[1:-1] + (question[0],)) == sorted(words[:-1])
        assert question[-1] == "?" and len(question) == len(words)
        example = QFExample((*words, "quest"), question)
        assert n_predicted_tokens(example) == 2 * template.n_words + 4


# --- generation -----------------------------------------------------------------------------------


def test_same_seed_gives_identical_files(tmp_path: Path) -> None:
    first = generate_qf(tmp_path / "a", seed=5, **SMALL)
    second = generate_qf(tmp_path / "b", seed=5, **SMALL)
    third = generate_qf(tmp_path / "c", seed=6, **SMALL)
    for split in ("train", "dev", "test", "gen"):
        name = f"question.{split}"
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
        assert (tmp_path / "a" / name).read_bytes() != (tmp_path / "c" / name).read_bytes()
    assert first == second
    assert first["sha256"] != third["sha256"]
    assert first["counts"] == {"train": 3000, "dev": 100, "test": 300, "gen": 300}
    assert first["seed"] == 5 and first["generator_version"]
    assert not [p for p in (tmp_path / "a").iterdir() if p.name.startswith(".")]


def test_splits_follow_the_routing_rules(qf_small_splits: dict[str, list[QFExample]]) -> None:
    for split in ("train", "dev", "test"):
        for example in qf_small_splits[split]:
            template = template_of(example.words)
            assert template is not None
            assert not (example.task == "quest" and template.subject_rc)
            assert example.target == target_words(example.words, example.task, template)
    for example in qf_small_splits["gen"]:
        template = template_of(example.words)
        assert example.task == "quest" and template.subject_rc and passes_gen_filter(example.words, template)
        assert example.target == target_words(example.words, "quest", template)


def test_dedupe_makes_splits_disjoint(qf_small_splits: dict[str, list[QFExample]]) -> None:
    sentences = [e.words for split in qf_small_splits.values() for e in split]
    assert len(sentences) == len(set(sentences)) == 3700


def test_without_dedupe_short_sentences_repeat() -> None:
    splits, _ = generate_splits(n_train=20000, n_dev=0, n_test=0, n_gen=0, seed=3, dedupe=False, weights="published")
    counts = Counter(line.split(" . ")[0] for line in splits["train"])
    # 1/6 of draws fall on 2,808 four-word sentences: many must repeat.
    assert sum(c - 1 for c in counts.values()) > 500


def test_task_fraction_matches_coin_then_withhold(qf_small_splits: dict[str, list[QFExample]]) -> None:
    iid = [e for split in ("train", "dev", "test") for e in qf_small_splits[split]]
    decl = sum(e.task == "decl" for e in iid) / len(iid)
    # published: 0.6 before dedupe, ~0.61 with it at this pool size; fitted: 0.5 / (1 - 0.5 * 0.325) = 0.597
    # (its subject-RC share is 0.325); binomial sd 0.008.
    assert 0.57 < decl < 0.65


def test_gen_filter() -> None:
    ok = _words("my raven that doesn't sleep does change .")
    same = _words("my raven that does sleep does change .")
    three = _words("my raven that does sleep doesn't admire the yak who does swim .")
    mixed = _words("my raven that the yaks don't admire doesn't change .")
    assert passes_gen_filter(ok, template_of(ok))
    assert not passes_gen_filter(same, template_of(same))
    assert not passes_gen_filter(three, template_of(three))
    assert not passes_gen_filter(mixed, template_of(mixed))


def test_published_weights_keep_the_historical_output() -> None:
    """grammar_weights: published reproduces the generator as it was before the fit (qf-1.0), byte for byte."""
    splits, draws = generate_splits(seed=11, weights="published", **SMALL)
    text = "".join(splits["train"] + splits["dev"] + splits["test"] + splits["gen"])
    assert hashlib.sha256(text.encode()).hexdigest() == (
        "af7508fa1eb670e232f1c981a373feb64c2e2f3e2373ea8856421340e162fafa")
    assert draws == 5636


def test_fitted_gen_follows_mccoys_quota_and_order() -> None:
    splits, _ = generate_splits(n_train=200, n_dev=0, n_test=0, n_gen=3000, seed=2)
    kinds = [template_of(parse_line(line, "gen").words).rc_kind for line in splits["gen"]]
    assert Counter(k == "ORC" for k in kinds) == {True: 1000, False: 2000}
    # Generation order, as in McCoy's file: ORC lines are rarer than the quota in the stream, so the
    # file ends with ORC lines only, after the SRC quota filled.
    last_src = max(i for i, k in enumerate(kinds) if k != "ORC")
    assert last_src < len(kinds) - 100 and kinds.index("ORC") < 50


def test_fitted_iid_lines_follow_the_fitted_template_distribution() -> None:
    splits, _ = generate_splits(n_train=30000, n_dev=0, n_test=0, n_gen=0, seed=9)
    observed = Counter((e.task, template_of(e.words).symbols) for e in (parse_line(x, "t") for x in splits["train"]))
    # Pool the rare cells so every expected count is at least 5; dedupe moves little mass at this size.
    expected = {k: v * 30000 for k, v in iid_cell_probabilities(distribution("fitted")).items()}
    common = [k for k, v in expected.items() if v >= 5]
    obs = [observed[k] for k in common] + [30000 - sum(observed[k] for k in common)]
    exp = [expected[k] for k in common] + [30000 - sum(expected[k] for k in common)]
    assert chisquare(obs, exp).pvalue > 1e-3


def test_unknown_weights_are_rejected() -> None:
    with pytest.raises(AssocmemError, match="grammar_weights"):
        generate_splits(seed=0, weights="mle", **SMALL)


def test_default_sizes_generate(tmp_path: Path) -> None:
    manifest = generate_qf(tmp_path, seed=0)
    assert manifest["counts"] == DEFAULT_SIZES
    assert manifest["grammar_weights"] == "fitted" and len(manifest["fitted_grammar_sha256"]) == 64


def test_negative_size_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(AssocmemError, match="n_dev"):
        generate_qf(tmp_path, n_train=10, n_dev=-1, n_test=0, n_gen=0)


# --- reading --------------------------------------------------------------------------------------


@needs_shared
def test_reference_dev_parses_and_targets_follow_the_rule() -> None:
    examples = read_qf(QF_SHARED / "question.dev")
    assert len(examples) == 1000
    for example in examples:
        template = template_of(example.words)
        assert template is not None
        assert example.target == target_words(example.words, example.task, template)


@pytest.mark.parametrize(("content", "fragment"), [
    ("", "empty"),
    ("the yak does swim . decl the yak does swim .\n", ":1: expected exactly one TAB"),
    ("the yak does swim . ask\tthe yak does swim .\n", ":1: input must be"),
    ("the yak does swim decl\tthe yak does swim .\n", ":1: input must be"),
    ("the yak does swim . decl\tthe yak does swim\n", ":1: output must be"),
    ("the yak does swim . decl\tthe yak does swim .\n\nthe yak does swim . decl\tthe yak does swim .\n",
     ":2: expected exactly one TAB"),
])
def test_read_qf_names_file_and_line(tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / "bad.dev"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(AssocmemError) as info:
        read_qf(path)
    assert str(path) in str(info.value) and fragment in str(info.value)


def test_read_qf_missing_file(tmp_path: Path) -> None:
    with pytest.raises(AssocmemError, match="missing"):
        read_qf(tmp_path / "nope.dev")


def test_read_qf_accepts_older_release_with_task_after_output(tmp_path: Path) -> None:
    path = tmp_path / "old.test"
    path.write_text("the yaks do swim . quest\tdo the yaks swim ? quest\n", encoding="utf-8")
    [example] = read_qf(path)
    assert example.target == ("do", "the", "yaks", "swim", "?")
    assert example.task == "quest" and example.words[-1] == "."
