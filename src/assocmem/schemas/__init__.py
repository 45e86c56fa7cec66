"""The workflow's config schema, shipped inside the package so that the command line validates a config from any
directory. This is its one copy: ``workflow/schemas/config.schema.yaml``, where Snakemake's convention puts it and
the workflow reads it, is a relative symlink to ``config.schema.yaml`` here.

No stage imports this package, so editing the schema moves no stage's code digest (``assocmem.codehash``): the
defaults it fills reach the jobs through their params, which Snakemake compares anyway.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

CONFIG_SCHEMA = "config.schema.yaml"


def config_schema_path() -> Path:
    """The packaged config schema, as a file on disk (the package is installed as files, editable or not)."""
    return Path(str(resources.files(__name__).joinpath(CONFIG_SCHEMA)))
