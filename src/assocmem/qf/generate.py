"""Question-formation (QF) data: sampler, split files, reader and LM token sequences.

Format (McCoy et al. 2020): one example per line, ``<words> . <decl|quest><TAB><output words>``. A ``decl``
output repeats the sentence (ending in "."); a ``quest`` output moves the main-clause auxiliary to the front
and ends in "?". Sentences come from the embedded PCFG (:mod:`assocmem.qf.grammar`).

Generation procedure. Each rule below is backed by McCoy's released files (numbers from
``compare.py`` and the analysis behind it; our generator at default sizes, seed 1, vs McCoy's dev):

1. Stream sentences from the PCFG (top-down, rule weights relative within a left-hand side).
2. Dedupe on the sentence: a sentence already drawn is skipped, whatever its task. Evidence: McCoy's dev
   has 0 repeated sentences in 1,000 lines where our sampler without dedupe expects 7.1 repeated pairs
   (Poisson P(0) = 8e-4), and the processing script descended from McCoy's (sebschu/multilingual-
   transformations, question_corpus_proc.py, whose gen filter in step 4 reproduces McCoy's gen file)
   keeps a ``used_dict`` of sentences and cuts train/dev/test from one shuffled pool. The dev file
   alone cannot settle this, because under its own (short-sentence-poor) template mix repeats are rare.
   Consequences: train/dev/test/gen are pairwise disjoint, and each of the 2,808 four-word sentences
   ("the yak doesn't swim .") appears at most once across all splits. Without dedupe a 100k train split
   would hold each of them about 6 times, and dev/test would mostly repeat train.
3. Task: one fair coin per new sentence (P(quest) = 0.5), tossed *before* routing. McCoy's dev has 594
   decl / 406 quest. Coin-then-withhold predicts 0.600 decl without dedupe (binomial p = 0.70) and 0.621
   with it (p = 0.08). A 50/50 split after withholding is rejected (p = 3e-9).
4. Routing: a ``quest`` whose main-clause subject has a relative clause is withheld from train/dev/test.
   None of McCoy's 406 dev questions has one; 135 would be expected without the rule. Such an example
   goes to ``gen`` only if it has exactly two auxiliaries, of the same number and opposite polarity
   (does/doesn't, do/don't), so that move-first and move-main give different first words. All 83 lines
   read from McCoy's data/question_bracket.gen (the indexed copy at commit 621dc29, same sentences as
   question.gen plus brackets) pass this filter. None has a third auxiliary, i.e. an object RC, where 13.8
   would be expected without the filter (P = (5/6)^83 = 3e-7), and all have opposite polarity (P <= 2^-83
   by chance). The same 83 lines fit the grammar otherwise: 50 intransitive main verbs (49.8 expected),
   10 object-relative subject RCs (16.6 expected, p = 0.07). Everything else goes to the iid pool until
   it holds n_train + n_dev + n_test lines, and the stream runs until both pools are full.
5. The iid pool is shuffled and cut into train, dev and test; gen is shuffled.

Checked and *not* adopted (the data give no evidence against the grammar here):
- Repeated nouns are allowed: 82 dev sentences repeat a noun word, 97.8 expected from their templates
  (p = 0.10).
- Words are uniform within every preterminal (chi-square p >= 0.12 for all nine classes).
- decl sentences do carry subject RCs (194/594; 1/3 expected) and subject PPs.

Known divergence we do not model, because nothing we found explains it: McCoy's iid lines are not a
sample of question.gr, even after dedupe.
- Intransitive main verbs are rare: 98/1000, against 389 expected from this generator.
- Subject type and verb-phrase type are dependent (chi-square independence test on the decl lines,
  p = 7e-12). No PCFG with this rule structure, whatever its weights, can produce that.
- Frame chi-square against this generator: 641 on 19 df. Template TVD 0.41 against a sampling-noise
  level of 0.16 (q95 0.18). Length TVD 0.25 against a noise level of 0.03.
The gen file, by contrast, matches the grammar. Reweighting 272 templates to fit 1,000 lines would be
overfitting, so the generator follows the published grammar and ``compare.py`` reports the gap.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from assocmem.io import AssocmemError, sha256_file, write_text
from assocmem.qf.grammar import (
    Template,
    question_lexicon,
    question_templates,
)

GENERATOR_VERSION = "qf-1.0"
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


def n_predicted_tokens(example: QFExample) -> int:
    """Number of tokens the LM loss counts for this example (all but ``<sos>``)."""
    return len(example.source) + len(example.target) + 1


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
    """Draws sentences of the embedded PCFG: a template by its probability, then uniform words."""

    def __init__(self) -> None:
        self.templates = question_templates()
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


def _stream(rng: np.random.Generator, n_iid: int, n_gen: int, dedupe: bool) -> _Pools:
    """Fill the iid and gen pools from one sentence stream (steps 1-4 of the module docstring)."""
    sampler = TemplateSampler()
    pools = _Pools([], [], 0)
    seen: set[tuple[str, ...]] = set()
    max_draws = 200 * (n_iid + n_gen) + 1_000_000
    while len(pools.iid) < n_iid or len(pools.gen) < n_gen:
        if pools.draws > max_draws:
            raise AssocmemError(
                f"question formation: could not fill iid={n_iid}, gen={n_gen} distinct examples in "
                f"{pools.draws} draws (got {len(pools.iid)}, {len(pools.gen)}); lower the split sizes"
            )
        template_ids, sentences = sampler.sample(rng, _BATCH)
        quest_coins = rng.random(_BATCH) < P_QUEST
        for k, words, quest in zip(template_ids, sentences, quest_coins, strict=True):
            pools.draws += 1
            if dedupe:
                if words in seen:
                    continue
                seen.add(words)
            _route(pools, sampler.templates[k], words, "quest" if quest else "decl", n_iid, n_gen)
            if len(pools.iid) >= n_iid and len(pools.gen) >= n_gen:
                break
    return pools


def _route(pools: _Pools, template: Template, words: tuple[str, ...], task: str, n_iid: int,
           n_gen: int) -> None:
    if task == "quest" and template.subject_rc:
        if len(pools.gen) < n_gen and passes_gen_filter(words, template):
            pools.gen.append(format_line(words, task, target_words(words, task, template)))
    elif len(pools.iid) < n_iid:
        pools.iid.append(format_line(words, task, target_words(words, task, template)))


def generate_splits(*, n_train: int = DEFAULT_SIZES["train"], n_dev: int = DEFAULT_SIZES["dev"],
                    n_test: int = DEFAULT_SIZES["test"], n_gen: int = DEFAULT_SIZES["gen"], seed: int = 0,
                    dedupe: bool = True) -> tuple[dict[str, list[str]], int]:
    """Lines of every split (each ending in a newline) and the number of sentences drawn."""
    sizes = {"train": n_train, "dev": n_dev, "test": n_test, "gen": n_gen}
    for split, size in sizes.items():
        if size < 0:
            raise AssocmemError(f"question formation: n_{split} must be >= 0, got {size}")
    rng = np.random.default_rng(seed)
    pools = _stream(rng, n_train + n_dev + n_test, n_gen, dedupe)
    iid = [pools.iid[i] for i in rng.permutation(len(pools.iid))]
    gen = [pools.gen[i] for i in rng.permutation(len(pools.gen))]
    splits = {
        "train": iid[:n_train],
        "dev": iid[n_train : n_train + n_dev],
        "test": iid[n_train + n_dev :],
        "gen": gen,
    }
    return splits, pools.draws


def generate_qf(out_dir: str | os.PathLike[str], *, n_train: int = DEFAULT_SIZES["train"],
                n_dev: int = DEFAULT_SIZES["dev"], n_test: int = DEFAULT_SIZES["test"],
                n_gen: int = DEFAULT_SIZES["gen"], seed: int = 0, dedupe: bool = True) -> dict:
    """Write ``question.{train,dev,test,gen}`` under ``out_dir`` atomically; return a manifest.

    The manifest holds the generator version, seed, dedupe flag, sentences drawn, and per split the
    file name, line count and sha256. The same arguments give byte-identical files.
    """
    splits, draws = generate_splits(n_train=n_train, n_dev=n_dev, n_test=n_test, n_gen=n_gen, seed=seed,
                                    dedupe=dedupe)
    out = Path(out_dir)
    files = {}
    for split in SPLITS:
        path = out / f"question.{split}"
        write_text(path, "".join(splits[split]))
        files[split] = {"file": path.name, "lines": len(splits[split]), "sha256": sha256_file(path)}
    return {
        "dataset": "question_formation",
        "generator_version": GENERATOR_VERSION,
        "seed": int(seed),
        "dedupe": bool(dedupe),
        "p_quest": P_QUEST,
        "sentences_drawn": int(draws),
        "counts": {split: files[split]["lines"] for split in SPLITS},
        "sha256": {split: files[split]["sha256"] for split in SPLITS},
        "files": {split: files[split]["file"] for split in SPLITS},
    }


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
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().split("\n")
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
