"""The SLURM profile, rendered through the executor plugin's own sbatch/srun builders (no cluster needed).

The profile is parsed by snakemake's profile parser and resource parsers, so values reach the plugin as
they would in a real run; only the job object is faked (``resources`` and ``threads``).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("snakemake_executor_plugin_slurm", reason="snakemake-executor-plugin-slurm not installed")

from helpers import ROOT
from snakemake.cli import parse_set_resources  # noqa: E402
from snakemake.iocontainers import ResourceList  # noqa: E402
from snakemake.profiles import ProfileConfigFileParser  # noqa: E402
from snakemake.resources import Resources  # noqa: E402
from snakemake_executor_plugin_slurm.submit_string import get_submit_command  # noqa: E402
from snakemake_executor_plugin_slurm.utils import set_gres_string  # noqa: E402
from snakemake_executor_plugin_slurm_jobstep import get_cpu_setting, get_gpu_setting  # noqa: E402

PROFILE = ROOT / "workflow" / "profiles" / "slurm" / "config.yaml"
CPU_RULES = ["generate_data", "data_audit", "tokenize", "subsets", "activations", "neighbours", "report"]


def load_profile() -> dict:
    """The profile as snakemake turns it into command-line values (lists of 'key=value' strings)."""
    with PROFILE.open() as stream:
        return dict(ProfileConfigFileParser().parse(stream))


def concrete(resources: Resources) -> dict[str, int | str]:
    """Resource values; the profile must hold plain numbers/strings, not expressions."""
    return {name: res.value for name, res in resources.items()}


def job_resources(rule: str, rule_resources: dict | None = None) -> dict[str, int | str]:
    """default-resources < the rule's own resources < set-resources, as snakemake layers them."""
    profile = load_profile()
    merged = concrete(Resources.parse(profile.get("default-resources", []), allow_expressions=True))
    merged.update(rule_resources or {})
    per_rule = parse_set_resources(profile.get("set-resources", []))
    if rule in per_rule:
        merged.update(concrete(per_rule[rule]))
    return merged


def fake_job(rule: str, resources: dict[str, int | str], threads: int = 1) -> SimpleNamespace:
    return SimpleNamespace(name=rule, threads=threads, resources=ResourceList(fromdict=resources))


def sbatch_call(job: SimpleNamespace, partition: str = "debug") -> str:
    """What the plugin's run_job() builds before appending --wrap."""
    params = {
        "run_uuid": "0f1e2d3c",
        "slurm_logfile": Path(".snakemake/slurm_logs") / f"rule_{job.name}" / "%j.log",
        "comment_str": f"rule_{job.name}",
        "account": "",
        "partition": f" -p {partition}",
        "workdir": "/work/main",
    }
    return get_submit_command(job, params) + set_gres_string(job)


def option(call: str, *names: str) -> str | None:
    """Value of the first of ``names`` found in the sbatch call ('--x=v' or '--x v'); None if absent."""
    tokens = shlex.split(call)
    for i, token in enumerate(tokens):
        for name in names:
            if token == name and i + 1 < len(tokens):
                return tokens[i + 1]
            if token.startswith(name + "="):
                return token.split("=", 1)[1]
    return None


def tasks_requested(call: str) -> int:
    """Tasks SLURM allocates for this sbatch call (sbatch's default is one task)."""
    gpus = int(option(call, "--gpus") or 0)
    per_gpu = option(call, "--ntasks-per-gpu")
    if per_gpu is not None:
        return int(per_gpu) * gpus
    return int(option(call, "--ntasks", "-n") or 1)


# What workflow/rules/train.smk declares for a corpus experiment with experiments.<exp>.train.gpus = 4.
TRAIN_ON_4_GPUS = {"gpu": 4, "mem_mb": 16000, "runtime": 2880}


def test_profile_uses_slurm_and_leaves_partition_and_account_to_the_user():
    profile = load_profile()
    assert profile["executor"] == "slurm"
    defaults = dict(entry.split("=", 1) for entry in profile["default-resources"])
    assert {"mem_mb", "runtime"} <= defaults.keys()
    assert not {"slurm_partition", "slurm_account"} & defaults.keys()
    assert int(profile["retries"]) >= 1
    assert int(profile["latency-wait"]) >= 30


def test_train_on_4_gpus_is_one_task_holding_all_gpus():
    job = fake_job("train", job_resources("train", TRAIN_ON_4_GPUS))
    call = sbatch_call(job)
    assert "--ntasks-per-gpu" not in call
    assert tasks_requested(call) == 1
    assert option(call, "--gpus") == "4"
    assert option(call, "--mem") == "16000"     # the rule's own sizes survive the profile
    assert option(call, "-t") == "2880"
    assert option(call, "--cpus-per-task") == "8"
    assert option(call, "-p") == "debug"


def test_train_job_step_sees_all_4_gpus_in_one_srun_task():
    # Inside the allocation the job-step plugin runs `srun -n1 <cpu setting> <gpu setting> ...`.
    job = fake_job("train", job_resources("train", TRAIN_ON_4_GPUS))
    assert get_gpu_setting(job) == "--gpus=4"
    assert get_cpu_setting(job, True) == "--cpus-per-task=8"


def test_tasks_on_a_gpu_rule_would_mean_one_task_per_gpu():
    # Why the profile must not set `tasks` for train: plugin 2.x maps it to --ntasks-per-gpu.
    job = fake_job("train", job_resources("train", {**TRAIN_ON_4_GPUS, "tasks": 1}))
    call = sbatch_call(job)
    assert option(call, "--ntasks-per-gpu") == "1"
    assert tasks_requested(call) == 4


def test_profile_sets_no_tasks_for_any_rule():
    per_rule = parse_set_resources(load_profile().get("set-resources", []))
    assert all("tasks" not in resources for resources in per_rule.values())


def test_profile_leaves_memory_time_and_gpus_to_the_rules():
    # Flat values would replace the rules' per-experiment sizes (train: 48 h on corpora, 4 h otherwise).
    per_rule = parse_set_resources(load_profile().get("set-resources", []))
    overridden = {(rule, name) for rule, res in per_rule.items() for name in res
                  if name in {"mem_mb", "mem", "runtime", "gpu", "gpus"}}
    assert not overridden


@pytest.mark.parametrize("rule", CPU_RULES)
def test_cpu_rules_are_one_task_with_memory_and_time(rule):
    call = sbatch_call(fake_job(rule, job_resources(rule), threads=3))
    assert option(call, "--ntasks") == "1"
    assert option(call, "--gpus") is None
    assert int(option(call, "--mem")) >= 1000
    assert int(option(call, "-t")) >= 10
    assert option(call, "--cpus-per-task") == "3"   # the rule's threads (config threads_per_job)


def test_pretrained_activations_is_one_task_on_one_gpu():
    job = fake_job("pretrained_activations", job_resources("pretrained_activations",
                                                           {"gpu": 1, "mem_mb": 16000, "runtime": 240}))
    call = sbatch_call(job)
    assert tasks_requested(call) == 1
    assert option(call, "--gpus") == "1"
    assert option(call, "--cpus-per-task") == "1"


def test_every_set_resources_rule_exists_in_the_pipeline():
    rules_dir = PROFILE.parents[2] / "rules"
    rule_line = re.compile(r"^rule (\w+):", re.M)
    declared = {m.group(1) for smk in rules_dir.glob("*.smk") for m in rule_line.finditer(smk.read_text())}
    per_rule = parse_set_resources(load_profile().get("set-resources", []))
    assert set(per_rule) <= declared, f"profile names unknown rules: {set(per_rule) - declared}"
