# assocmem: reproduce and audit "Beyond Scaling Laws" (Niu et al., 2024).
# Thin entry point: config + schema validation, includes, targets. Stage logic lives in src/assocmem.
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")

# `--configfile X` replaces the default config instead of being merged into it, so a config never
# inherits models or experiments it does not list.
if not workflow.config_settings.configfiles:

    configfile: "config/config.yaml"


include: "workflow/rules/common.smk"


# `snakemake --report report.zip`: this description, the HTML report, its verdict table and each figure with its own
# caption (workflow/rules/report.smk, workflow/report/)
report: "workflow/report/workflow.rst"


wildcard_constraints:
    exp="[A-Za-z0-9_]+",
    model=r"[A-Za-z0-9_]+(\.s[0-9]+)?",
    subset=r"pct[0-9.]+|pretrained",


include: "workflow/rules/data.smk"
include: "workflow/rules/tokenize.smk"
include: "workflow/rules/subsets.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/activations.smk"
include: "workflow/rules/neighbours.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/sweep.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        all_targets,
    message:
        "all: every result of the config is up to date"


check_command_line_targets()


# A run holds its results_dir from start to end (assocmem.runlock); a dry run and the jobs claim nothing
# (Snakemake calls these handlers only in the main process of a real run).
onstart:
    runlock.claim(R, workflow.basedir)


onsuccess:
    runlock.release(R)


onerror:
    runlock.release(R)
    print(
        "\nassocmem: a job failed. Its error is printed above (`assocmem: <stage>: error: ...`; the whole log is under "
        "results/logs/); the error names the file or config key at fault.\nFix that, then rerun the same command: finished outputs are kept and half-written "
        "ones are redone.\nIf snakemake itself was killed (not a job failure), run `snakemake --unlock` first. "
        "README.md, 'When something goes wrong', has more."
    )
