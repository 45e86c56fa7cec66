"""Question-formation (QF) data: sampler, split files, reader and LM token sequences.

Format (McCoy et al. 2020): one example per line, ``<words> . <decl|quest><TAB><output words>``. A ``decl``
output repeats the sentence (ending in "."); a ``quest`` output moves the main-clause auxiliary to the front
and ends in "?". Sentences come from McCoy's ``question.gr`` (:mod:`assocmem.qf.grammar`) with either the
rule probabilities fitted to McCoy's released files (``weights="fitted"``, the default; shipped with the
package, see :mod:`assocmem.qf.fit` for the evidence and :mod:`assocmem.qf.weights` for the model) or the
printed weights (``weights="published"``, byte-identical to the generator before the fit).

Generation procedure (each step backed by McCoy's files or his processing script, whose descendant is
sebschu/multilingual-transformations question_corpus_proc.py):

1. Stream sentences: a template by its probability, then each preterminal's word uniformly.
2. Dedupe on the sentence: a sentence drawn before is skipped, whatever its task (the script's
   ``used_dict``). Train/dev/test/gen are pairwise disjoint and each of the 2,808 four-word sentences
   appears at most once across all splits.
3. Task: one fair coin per new sentence (P(quest) = 0.5), tossed before routing. McCoy's dev: its 806
   lines without a subject RC are 0.496 decl; coin-then-withhold predicts 0.597 decl overall under the
   fitted subject-RC share (observed 0.594).
4. Routing: a question whose main-clause subject has a relative clause never enters train/dev/test (none
   of McCoy's 406 dev questions has one). The iid pool takes everything else until it holds
   n_train + n_dev + n_test lines, and is shuffled and cut into train, dev and test.
5. gen holds subject-RC questions with exactly two auxiliaries of the same number and opposite polarity
   (all 10,000 lines of McCoy's gen do), under McCoy's quota: n - n//3 subject-relative (SRC) and n//3
   object-relative (ORC) lines, filled in stream order (the script's ``count_src <= 6666`` and
   ``count_orc <= 3333``; McCoy's gen holds exactly 6,667 SRC and 3,333 ORC lines and ends with 1,697
   ORC-only lines, written after the SRC quota filled). With fitted weights gen has its own stream and
   rule table and keeps stream order, as McCoy's file does; with published weights gen takes the
   subject-RC questions of the iid stream (steps 1-4) without a quota and is shuffled, as before.

Checked and not adopted: repeated nouns are allowed (82 dev sentences repeat a noun, 97.8 expected) and
words are uniform within every preterminal (chi-square p >= 0.12 for all nine classes).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from assocmem.errors import AssocmemError
from assocmem.io import sha256_file, write_text
from assocmem.qf.grammar import (
    Template,
    question_lexicon,
    question_templates,
)
from assocmem.qf.weights import QFDistribution, distribution, fitted_path, gen_quota_sizes, rc_group
from assocmem.rerun import rerun_command

GENERATOR_VERSION = "qf-2.0"
TASKS = ("decl", "quest")
P_QUEST = 0.5
SPLITS = ("train", "dev", "test", "gen")
DEFAULT_SIZES = {"train": 100_000, "dev": 1_000, "test": 10_000, "gen": 10_000}
SOS, EOS = "<sos>", "<eos>"
_BATCH = 8192


@dataclass(frozen=True)
class QFExample:
    """``source`` = sentence words, the final ".", the task token; ``target`` = output words."""

    source: tuple[str, ...]
    target: tuple[str, ...]

    @property
    def words(self) -> tuple[str, ...]:
        """The declarative sentence, including its final '.'."""
        return self.source[:-1]

    @property
    def task(self) -> str:
        return self.source[-1]


def lm_tokens(example: QFExample) -> list[str]:
    """The LM sequence of Murty et al. (2023): ``<sos> w1..wk . task o1..om <eos>``.

    The LM loss counts every token after ``<sos>``: k words, ".", the task token, the m output tokens
    (m = k + 1: the words plus "." or "?") and ``<eos>``, i.e. k + 1 + 1 + m + 1 = 2k + 4 tokens.
    """
    return [SOS, *example.source, *example.target, EOS]


def target_words(words: tuple[str, ...], task: str, template: Template) -> tuple[str, ...]:
    """Output for ``words`` (ending in '.'): the sentence itself, or the question."""
    if task == "decl":
        return words
    aux = words[template.main_aux]
    rest = words[: template.main_aux] + words[template.main_aux + 1 : -1]
    return (aux, *rest, "?")


def passes_gen_filter(words: tuple[str, ...], template: Template) -> bool:
    """McCoy's gen condition: exactly two auxiliaries, same number, different words (polarity)."""
    slots = template.aux_slots
    if len(slots) != 2:
        return False
    first, second = (template.symbols[i] for i in slots)
    return first == second and words[slots[0]] != words[slots[1]]


def format_line(words: tuple[str, ...], task: str, target: tuple[str, ...]) -> str:
    return f"{' '.join(words)} {task}\t{' '.join(target)}\n"


class TemplateSampler:
    """Draws sentences: a template by its probability, then every preterminal's word uniformly."""

    def __init__(self, templates: tuple[Template, ...] | None = None) -> None:
        self.templates = question_templates() if templates is None else templates
        probs = np.array([t.prob for t in self.templates])
        self.probs = probs / probs.sum()
        words = question_lexicon().words
        self.slot_words = [
            [np.array(words.get(s, (s,)), dtype=object) for s in t.symbols] for t in self.templates
        ]
        self.max_len = max(len(t.symbols) for t in self.templates)

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, list[tuple[str, ...]]]:
        """``n`` sentences: their template indices and word tuples (including the final '.')."""
        template_ids = rng.choice(len(self.templates), size=n, p=self.probs)
        uniforms = rng.random((n, self.max_len))
        sentences: list[tuple[str, ...]] = [()] * n
        for k in np.unique(template_ids):
            rows = np.flatnonzero(template_ids == k)
            columns = [
                words[(uniforms[rows, j] * len(words)).astype(np.int64)]
                for j, words in enumerate(self.slot_words[k])
            ]
            for row, sentence in zip(rows, zip(*columns, strict=True), strict=True):
                sentences[row] = sentence
        return template_ids, sentences


@dataclass
class _Pools:
    iid: list[str]
    gen: list[str]
    draws: int
    seen: set[tuple[str, ...]] = field(default_factory=set)
    gen_groups: Counter = field(default_factory=Counter)


# route(pools, template, words, task) files one drawn sentence; done(pools) says the stream may stop.
Route = Callable[[_Pools, Template, tuple[str, ...], str], None]


def _run_stream(rng: np.random.Generator, sampler: TemplateSampler, pools: _Pools, dedupe: bool, route: Route,
                done: Callable[[_Pools], bool], max_draws: int) -> None:
    """Draw sentences (with their task coin) until ``done``; a sentence drawn before is skipped if ``dedupe``."""
    while not done(pools):
        if pools.draws > max_draws:
            raise AssocmemError(
                f"question formation: could not fill the splits with distinct examples in {pools.draws} draws "
                f"(iid {len(pools.iid)}, gen {len(pools.gen)} lines so far); lower the split sizes"
            )
        template_ids, sentences = sampler.sample(rng, _BATCH)
        quest_coins = rng.random(_BATCH) < P_QUEST
        for k, words, quest in zip(template_ids, sentences, quest_coins, strict=True):
            pools.draws += 1
            if dedupe:
                if words in pools.seen:
                    continue
                pools.seen.add(words)
            route(pools, sampler.templates[k], words, "quest" if quest else "decl")
            if done(pools):
                break


def _line(words: tuple[str, ...], task: str, template: Template) -> str:
    return format_line(words, task, target_words(words, task, template))


def _published_streams(rng: np.random.Generator, dist: QFDistribution, n_iid: int, n_gen: int,
                       dedupe: bool) -> _Pools:
    """One stream fills both pools: subject-RC questions go to gen (steps 1-4 of the module docstring)."""
    def route(pools: _Pools, template: Template, words: tuple[str, ...], task: str) -> None:
        if task == "quest" and template.subject_rc:
            if len(pools.gen) < n_gen and passes_gen_filter(words, template):
                pools.gen.append(_line(words, task, template))
        elif len(pools.iid) < n_iid:
            pools.iid.append(_line(words, task, template))

    pools = _Pools([], [], 0)
    _run_stream(rng, TemplateSampler(dist.iid), pools, dedupe, route,
                lambda p: len(p.iid) >= n_iid and len(p.gen) >= n_gen, _max_draws(n_iid + n_gen))
    return pools


def _fitted_streams(rng: np.random.Generator, dist: QFDistribution, n_iid: int, n_gen: int,
                    dedupe: bool) -> _Pools:
    """The iid stream fills train/dev/test (subject-RC questions are dropped); the gen stream fills gen under
    the SRC:ORC quota. One dedupe set spans both streams, so all splits stay disjoint."""
    quota = gen_quota_sizes(n_gen) if dist.gen_quota else {"SRC": n_gen, "ORC": n_gen}
    _check_gen_support(dist, quota)

    def route_iid(pools: _Pools, template: Template, words: tuple[str, ...], task: str) -> None:
        if not (task == "quest" and template.subject_rc) and len(pools.iid) < n_iid:
            pools.iid.append(_line(words, task, template))

    def route_gen(pools: _Pools, template: Template, words: tuple[str, ...], _task: str) -> None:
        group = rc_group(template)
        if pools.gen_groups[group] < quota[group] and len(pools.gen) < n_gen and passes_gen_filter(words, template):
            pools.gen.append(_line(words, "quest", template))
            pools.gen_groups[group] += 1

    pools = _Pools([], [], 0)
    _run_stream(rng, TemplateSampler(dist.iid), pools, dedupe, route_iid, lambda p: len(p.iid) >= n_iid,
                _max_draws(n_iid))
    if n_gen:
        _run_stream(rng, TemplateSampler(dist.gen), pools, dedupe, route_gen, lambda p: len(p.gen) >= n_gen,
                    pools.draws + _max_draws(n_gen))
    return pools


def _check_gen_support(dist: QFDistribution, quota: dict[str, int]) -> None:
    if dist.gen is None:
        raise AssocmemError(f"{dist.name} grammar has no gen distribution")
    for group, size in quota.items():
        mass = sum(t.prob for t in dist.gen if rc_group(t) == group and t.subject_rc)
        if size > 0 and mass <= 0:
            raise AssocmemError(f"{dist.name} grammar gives no probability to {group} gen examples; set n_gen to 0 "
                                "or use dataset.grammar_weights: published")


def _max_draws(n_lines: int) -> int:
    return 200 * n_lines + 1_000_000


def generate_splits(*, n_train: int = DEFAULT_SIZES["train"], n_dev: int = DEFAULT_SIZES["dev"],
                    n_test: int = DEFAULT_SIZES["test"], n_gen: int = DEFAULT_SIZES["gen"], seed: int = 0,
                    dedupe: bool = True, weights: str | QFDistribution = "fitted",
                    ) -> tuple[dict[str, list[str]], int]:
    """Lines of every split (each ending in a newline) and the number of sentences drawn.

    ``weights``: ``fitted`` (the shipped fit to McCoy's files), ``published`` (question.gr as printed), or
    a :class:`QFDistribution`.
    """
    sizes = {"train": n_train, "dev": n_dev, "test": n_test, "gen": n_gen}
    for split, size in sizes.items():
        if size < 0:
            raise AssocmemError(f"question formation: n_{split} must be >= 0, got {size}")
    dist = distribution(weights)
    rng = np.random.default_rng(seed)
    streams = _published_streams if dist.gen is None else _fitted_streams
    pools = streams(rng, dist, n_train + n_dev + n_test, n_gen, dedupe)
    iid = [pools.iid[i] for i in rng.permutation(len(pools.iid))]
    # McCoy's gen file is in generation order (its tail is all ORC, see qf.mle.quota_prefix); the published
    # mode keeps its historical shuffle.
    gen = pools.gen if dist.gen_quota else [pools.gen[i] for i in rng.permutation(len(pools.gen))]
    splits = {
        "train": iid[:n_train],
        "dev": iid[n_train : n_train + n_dev],
        "test": iid[n_train + n_dev :],
        "gen": gen,
    }
    return splits, pools.draws


def generate_qf(out_dir: str | os.PathLike[str], *, n_train: int = DEFAULT_SIZES["train"],
                n_dev: int = DEFAULT_SIZES["dev"], n_test: int = DEFAULT_SIZES["test"],
                n_gen: int = DEFAULT_SIZES["gen"], seed: int = 0, dedupe: bool = True,
                weights: str = "fitted") -> dict:
    """Write ``question.{train,dev,test,gen}`` under ``out_dir`` atomically; return a manifest.

    The manifest holds the generator version, the grammar weights (with the fitted file's sha256), seed,
    dedupe flag, sentences drawn, and per split the file name, line count and sha256. The same arguments
    give byte-identical files.
    """
    splits, draws = generate_splits(n_train=n_train, n_dev=n_dev, n_test=n_test, n_gen=n_gen, seed=seed,
                                    dedupe=dedupe, weights=weights)
    out = Path(out_dir)
    files = {}
    for split in SPLITS:
        path = out / f"question.{split}"
        write_text(path, "".join(splits[split]))
        files[split] = {"file": path.name, "lines": len(splits[split]), "sha256": sha256_file(path)}
    return {
        "dataset": "question_formation",
        "generator_version": GENERATOR_VERSION,
        "grammar_weights": weights,
        "fitted_grammar_sha256": sha256_file(fitted_path()) if weights == "fitted" else None,
        "seed": int(seed),
        "dedupe": bool(dedupe),
        "p_quest": P_QUEST,
        "sentences_drawn": int(draws),
        "counts": {split: files[split]["lines"] for split in SPLITS},
        "sha256": {split: files[split]["sha256"] for split in SPLITS},
        "files": {split: files[split]["file"] for split in SPLITS},
    }


FRESH_SEED_OFFSET = 7_919  # the fresh sample's pool is drawn with seed + this: independent of the data splits


def generate_fresh(out_dir: str | os.PathLike[str], *, n_fresh: int, n_train: int = DEFAULT_SIZES["train"],
                   n_dev: int = DEFAULT_SIZES["dev"], n_test: int = DEFAULT_SIZES["test"], seed: int = 0,
                   dedupe: bool = True, weights: str = "fitted") -> dict:
    """``question.fresh``: ``n_fresh`` sequences from a second pool drawn like the training pool (same sizes,
    weights and dedupe, another seed), so their distribution is the one the training split's entropy floor
    describes; returns a manifest. At most the pool's size (train + dev + test) can be drawn."""
    pool_size = n_train + n_dev + n_test
    if not 1 <= n_fresh <= pool_size:
        raise AssocmemError(f"dataset.fresh_sequences: {n_fresh} outside 1..{pool_size} (the size of the iid pool "
                            "train + dev + test, whose distribution the fresh sample must share)")
    splits, draws = generate_splits(n_train=n_train, n_dev=n_dev, n_test=n_test, n_gen=0,
                                    seed=seed + FRESH_SEED_OFFSET, dedupe=dedupe, weights=weights)
    path = Path(out_dir) / "question.fresh"
    write_text(path, "".join((splits["train"] + splits["dev"] + splits["test"])[:n_fresh]))
    return {"dataset": "question_formation", "generator_version": GENERATOR_VERSION, "grammar_weights": weights,
            "seed": int(seed + FRESH_SEED_OFFSET), "pool_size": pool_size, "dedupe": bool(dedupe),
            "sentences_drawn": int(draws), "lines": n_fresh, "file": path.name, "sha256": sha256_file(path)}


def parse_line(line: str, where: str) -> QFExample:
    """One McCoy line -> QFExample; ``where`` ("file:line") goes into the error message."""
    fields = line.rstrip("\n").split("\t")
    if len(fields) != 2:
        raise AssocmemError(f"{where}: expected exactly one TAB between input and output, got {line!r}")
    source, target = fields[0].split(), fields[1].split()
    if len(source) < 3 or source[-1] not in TASKS or source[-2] != ".":
        raise AssocmemError(f"{where}: input must be '<words> . <decl|quest>', got {fields[0]!r}")
    if target and target[-1] == source[-1]:
        target = target[:-1]  # older McCoy releases repeat the task token after the output
    if len(target) < 2 or target[-1] not in (".", "?"):
        raise AssocmemError(f"{where}: output must be words ending in '.' or '?', got {fields[1]!r}")
    return QFExample(tuple(source), tuple(target))


def iter_qf(path: str | os.PathLike[str]) -> Iterator[QFExample]:
    path = Path(path)
    if not path.is_file():
        raise AssocmemError(f"missing question-formation file: {path}")
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().split("\n")
    except UnicodeDecodeError as err:
        raise AssocmemError(f"{path}: not UTF-8 text (byte {err.start}: {err.reason}); is it a binary or "
                            f"corrupted file? Regenerate or re-download it (delete it and rerun "
                            f"`{rerun_command()}`)") from err
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise AssocmemError(f"{path}: empty question-formation file")
    for number, line in enumerate(lines, start=1):
        yield parse_line(line, f"{path}:{number}")


def read_qf(path: str | os.PathLike[str]) -> list[QFExample]:
    """All examples of a McCoy-format file; AssocmemError names file and line on malformed input."""
    return list(iter_qf(path))


def size_args(sizes: dict[str, int]) -> dict[str, int]:
    """The config's ``dataset.sizes`` as keyword arguments of :func:`generate_qf`."""
    return {f"n_{split}": int(sizes[split]) for split in SPLITS}
