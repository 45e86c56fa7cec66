"""Targets named on the command line, checked against the config before any job: a path that names an experiment,
model or subset the config does not have fails with one line listing the valid names (Snakemake would raise a
``KeyError`` from an input function, or say only "No rule to produce")."""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from assocmem import layout


@dataclass(frozen=True)
class Experiment:
    """The names a config gives one experiment: its run names (models and sweep replicates) and subsets."""

    models: tuple[str, ...]
    subsets: tuple[str, ...]
    pretrained: tuple[str, ...] = ()


def _under(path: Path, directory: Path) -> Path | None:
    try:
        return path.relative_to(directory)
    except ValueError:
        return None


def _absolute(path: str | Path) -> Path:
    return Path(os.path.abspath(path))


def _listed(names: Iterable[str]) -> str:
    names = list(names)
    return ", ".join(names) if names else "(none)"


def _name_problem(fields: Mapping[str, str], experiments: Mapping[str, Experiment]) -> str | None:
    """What is wrong with the names in a path that matched the layout, if anything."""
    exp = fields.get("exp")
    if exp is None:
        return None
    if exp not in experiments:
        return f"no experiment '{exp}' in this config; experiments: {_listed(experiments)}"
    known = experiments[exp]
    model, subset = fields.get("model"), fields.get("subset")
    if model is not None and model not in known.models + known.pretrained:
        return f"no model '{model}' in experiment '{exp}'; models: {_listed(known.models + known.pretrained)}"
    if subset is None or model is None:
        return None if subset is None or subset in known.subsets else (
            f"no subset '{subset}' in experiment '{exp}'; subsets: {_listed(known.subsets)}")
    valid = (layout.PRETRAINED_SUBSET,) if model in known.pretrained else known.subsets
    if subset not in valid:
        return f"no subset '{subset}' for model '{model}' in experiment '{exp}'; subsets: {_listed(valid)}"
    return None


def _valid_instead(target: Path, found: tuple[str, dict[str, str], Path] | None, outputs: Collection[Path],
                   results_dir: Path) -> str:
    """Where the valid outputs near ``target`` are, for the message: inside it (a directory), the same artifact of
    other runs, the files beside it, or the experiment directories."""
    inside = sorted(path.name for path in outputs if path.parent == target)
    if inside:
        return f"a directory; name a file in it: {_listed(inside)}"
    if found is not None:
        same = sorted(_shown(path) for path in outputs if (m := layout.match(path)) is not None and m[0] == found[0])
        if same:
            shown = same[:6] + ([f"... ({len(same) - 6} more)"] if len(same) > 6 else [])
            return f"this config makes that file only as: {_listed(shown)}"
    beside = sorted(path.name for path in outputs if path.parent == target.parent)
    if beside:
        return f"outputs in {_shown(target.parent)}: {_listed(beside)}"
    tops = sorted({path.relative_to(results_dir).parts[0] for path in outputs})
    return f"outputs live under {_shown(results_dir)}/<{'|'.join(tops)}>/..."


def _shown(path: Path) -> str:
    relative = _under(path, _absolute("."))
    return str(relative) if relative is not None else str(path)


def target_problem(target: str, *, results_dir: str | Path, outputs: Collection[str | Path],
                   experiments: Mapping[str, Experiment], rules: Collection[str]) -> str | None:
    """One line saying why ``target`` is not something this config makes, or None when it is (a rule name, one of
    ``outputs``, a file inside an output directory, or a path outside the results directory)."""
    if target in rules:
        return None
    path, results = _absolute(target), _absolute(results_dir)
    files = {_absolute(output) for output in outputs}
    if path in files or any(_under(path, output) for output in files if output.suffix == ""):
        return None
    relative = _under(path, results)
    if relative is None or relative == Path("."):
        if os.sep in target or "/" in target or Path(target).exists():
            return None  # not ours: Snakemake says whether a rule makes it
        return f"target '{target}': no rule or output of that name; rules: {_listed(sorted(rules))}"
    found = layout.match(relative)
    problem = _name_problem(found[1], experiments) if found is not None else None
    reason = problem or "not an output of this config; " + _valid_instead(path, found, files, results)
    return f"target '{target}': {reason}"


def snakemake_cli_targets(argv: list[str]) -> list[str]:
    """The targets on a ``snakemake`` command line (``argv`` is ``sys.argv``), read with Snakemake's own parser;
    none when the process is not the ``snakemake`` command (the API, a test runner) or the line does not parse. The
    workflow is parsed before Snakemake hands it its targets, so the Snakefile reads them here."""
    program = Path(argv[0]) if argv else Path()
    if "snakemake" not in (program.name, program.parent.name):
        return []
    from snakemake.cli import get_argument_parser

    try:
        args, _ = get_argument_parser().parse_known_intermixed_args(argv[1:])
    except (Exception, SystemExit):  # Snakemake itself reports a command line it cannot parse
        return []
    return [str(target) for target in args.targets or []]


def check_targets(targets: Iterable[str], *, results_dir: str | Path, outputs: Collection[str | Path],
                  experiments: Mapping[str, Experiment], rules: Collection[str]) -> list[str]:
    """:func:`target_problem` of every target, the problems only."""
    problems = (target_problem(target, results_dir=results_dir, outputs=outputs, experiments=experiments,
                               rules=rules) for target in targets)
    return [problem for problem in problems if problem is not None]
