"""``assocmem run --set a.b.c=value``: dotted overrides of the config, below the top level that Snakemake's own
``--config`` reaches.

``assocmem run`` merges the run's config files the way Snakemake does (later files win, mappings merged key by
key), applies each ``--set`` (the value read as YAML: ``80`` is an int, ``[1, 2]`` a list, ``true`` a bool,
``null`` null), validates the result like any config, writes it to
``<workdir>/.snakemake/assocmem/overrides-<sha256>.yaml`` and passes that file as the last ``--configfile``.
The written file is the whole merged config, since a ``--configfile`` replaces the workflow's default config
instead of being merged into it (see the Snakefile). A path the schema does not allow fails with one line naming
it; a value of the wrong type fails validation naming its dotted key.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from assocmem.config import ConfigError, validate_config

SET_OPTION = "--set"
EXAMPLE = "experiments.qf.train.max_steps=80"
OVERRIDES_DIR = Path(".snakemake") / "assocmem"


class OverrideError(ConfigError):
    """A ``--set`` that names no key the schema allows, or that cannot be parsed."""


def split_set_args(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the arguments without ``--set``, the ``KEY=VALUE`` texts of ``--set KEY=VALUE`` / ``--set=KEY=VALUE``)."""
    rest: list[str] = []
    sets: list[str] = []
    items = iter(args)
    for arg in items:
        if arg == SET_OPTION:
            value = next(items, None)
            if value is None:
                raise OverrideError(f"{SET_OPTION} needs KEY=VALUE, e.g. {SET_OPTION} {EXAMPLE}")
            sets.append(value)
        elif arg.startswith(SET_OPTION + "="):
            sets.append(arg[len(SET_OPTION) + 1:])
        else:
            rest.append(arg)
    return rest, sets


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a", "b", "c"], the value read as YAML)."""
    key, sep, raw = text.partition("=")
    keys = key.strip().split(".")
    if not sep or not all(keys):
        raise OverrideError(f"{SET_OPTION} {text!r}: expected a dotted KEY=VALUE, e.g. {EXAMPLE}")
    try:
        return keys, yaml.safe_load(raw)
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise OverrideError(f"{SET_OPTION} {key}: the value {raw!r} is not valid YAML ({problem}); quote a "
                            "string that YAML would read otherwise") from err


def _resolve(node: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``node`` with its local ``$ref`` (``#/$defs/...``) replaced by the definition (sibling keys kept)."""
    while isinstance(node.get("$ref"), str) and node["$ref"].startswith("#/"):
        target: Any = schema
        for part in node["$ref"][2:].split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _takes_keys(node: dict[str, Any]) -> bool:
    types = node.get("type", "object")
    return "object" in (types if isinstance(types, list) else [types])


def _child_schema(node: dict[str, Any], keys: list[str], depth: int) -> tuple[dict[str, Any], bool]:
    """(the schema of ``keys[depth]`` under ``node``, whether it is a name the user chooses, like a model's)."""
    where = ".".join(keys[:depth]) or "the top level"
    key = keys[depth]
    if not _takes_keys(node):
        raise OverrideError(f"{SET_OPTION} {'.'.join(keys)}: {where} is a value, not a mapping of keys")
    properties = node.get("properties", {})
    if key in properties:
        return properties[key], False
    extra = node.get("additionalProperties", True)
    if extra is False:
        close = difflib.get_close_matches(key, properties, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise OverrideError(f"{SET_OPTION} {'.'.join(keys)}: unknown key {key!r} under {where} ({hint}allowed: "
                            f"{', '.join(properties)})")
    return (extra if isinstance(extra, dict) else {}), True


def _container(parent: dict[str, Any], keys: list[str], depth: int, named: bool) -> dict[str, Any]:
    """The mapping at ``keys[depth]`` in ``parent``, created when the schema has it and the config does not."""
    key, dotted = keys[depth], ".".join(keys[:depth + 1])
    value = parent.get(key)
    if key not in parent and named:
        names = ", ".join(map(str, parent)) or "none"
        raise OverrideError(f"{SET_OPTION} {'.'.join(keys)}: the config has no {dotted} (it has: {names})")
    if value is None:
        parent[key] = value = {}
    if not isinstance(value, dict):
        raise OverrideError(f"{SET_OPTION} {'.'.join(keys)}: {dotted} is {value!r}, not a mapping of keys")
    return value


def apply_override(config: dict[str, Any], keys: list[str], value: Any, schema: dict[str, Any]) -> None:
    """Set ``config[k0][k1]...`` to ``value`` in place, after checking every key against the schema."""
    node, target = _resolve(schema, schema), config
    for depth in range(len(keys)):
        child, named = _child_schema(node, keys, depth)
        node = _resolve(child, schema)
        if depth == len(keys) - 1:
            target[keys[depth]] = copy.deepcopy(value)
        else:
            target = _container(target, keys, depth, named)


def merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Snakemake's merge of config files: mappings merged key by key, anything else replaced."""
    merged = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def overridden_config(configs: Sequence[dict[str, Any]], sets: Sequence[str],
                      schema: dict[str, Any]) -> dict[str, Any]:
    """The merged ``configs`` with every ``--set`` applied, validated (ConfigError naming the dotted key)."""
    config: dict[str, Any] = {}
    for one in configs:
        config = merge(config, one)
    for text in sets:
        apply_override(config, *parse_override(text), schema)
    try:
        validate_config(config, schema)
    except ConfigError as err:
        raise ConfigError(f"the config after {' '.join(f'{SET_OPTION} {text}' for text in sets)}: {err}") from None
    return config


def write_overrides(config: dict[str, Any], workdir: Path, sources: Sequence[Path], sets: Sequence[str]) -> Path:
    """Write ``config`` (whole) to ``<workdir>/.snakemake/assocmem/overrides-<hash>.yaml``, atomically; its path."""
    from assocmem.io import write_text

    header = "".join(f"#   {line}\n" for line in [*map(str, sources), *(f"{SET_OPTION} {text}" for text in sets)])
    text = ("# Written by `assocmem run`: the config files below, merged, with the --set overrides applied.\n"
            f"{header}{yaml.safe_dump(config, sort_keys=False)}")
    path = workdir / OVERRIDES_DIR / f"overrides-{hashlib.sha256(text.encode()).hexdigest()[:16]}.yaml"
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        write_text(path, text)
    return path.resolve()
