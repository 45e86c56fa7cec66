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
check_report_config()
INTERRUPTS.workflow_read = True


# A run holds its results_dir from start to end (assocmem.runlock); a dry run and the jobs claim nothing
# (Snakemake calls these handlers only in the main process of a real run).
onstart:
    claim_results_dir()


onsuccess:
    runlock.release(R)


onerror:
    runlock.release(R)
    runhooks.put_back_report(Path(at("report_html")).parent)
    print(runhooks.end_message(INTERRUPTS.seen, RERUN, R), file=sys.stderr)
    if INTERRUPTS.seen:
        # the last line stays ours, not Snakemake's "At least one job did not complete successfully" (its locks are
        # released on the way out)
        sys.exit(130)
