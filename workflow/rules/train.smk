rule train:
    """Train one model on one subset; resumes from run_dir/checkpoint.pt if a previous attempt died."""
    input:
        store=P("tokens_meta"),
        subset=P("subset_meta"),
        foreign=foreign_input("train"),
    output:
        model=P("model"),
        best=P("best_model"),
        metrics=P("metrics"),
        summary=P("summary"),
        eval_rows=P("eval_rows"),
        stamp=P("run_stamp"),
    log:
        log_path("{exp}/train_{model}_{subset}"),
    benchmark:
        bench_path("{exp}/train_{model}_{subset}")
    wildcard_constraints:
        subset=r"pct[0-9.]+",
    priority: priority_of_run
    conda:
        "../envs/assocmem.yaml"
    threads: THREADS
    resources:
        mem_mb=kind_resource("train", "mem_mb"),
        runtime=kind_resource("train", "runtime"),
        gpu=lambda w: EXPS[w.exp]["train"]["gpus"],
    params:
        code=stage_code("train"),
        spec=train_params,
        store_dir=parent_dir("in.subset"),
        run_dir=parent_dir("out.model"),
        launcher=train_launcher,
        io=provenance_args,
    message:
        "train: {wildcards.exp} {wildcards.model}/{wildcards.subset} (log: {log})"
    shell:
        "{params.launcher} -m assocmem train --threads {threads} --params {params.spec:q}"
        " --store-dir {params.store_dir:q} --run-dir {params.run_dir:q} {params.io} > {log:q} 2>&1"


# Every seed of one model on one subset trained in one process (assocmem.train.stacked); each replica writes the files
# and stamp its own train job would. A killed stack resumes from its checkpoint (stacked_checkpoint.pt in the first
# replica's run dir: no output, so the rerun does not delete it; a finished replica's deleted files are written back
# from it). One rule per experiment that stacks
# (its replicas' outputs depend on its seeds); it wins over `train` for the runs it makes (the `ruleorder:` directive,
# called as a function since the rule names are computed).
for _exp in stacked_experiments():

    rule:
        name:
            f"train_stacked_{_exp}"
        input:
            store=P("tokens_meta"),
            subset=P("subset_meta"),
            foreign=foreign_stacked_input,
        output:
            stacked_outputs(_exp),
        log:
            log_path("{exp}/train_stacked_{model}_{subset}"),
        benchmark:
            bench_path("{exp}/train_stacked_{model}_{subset}")
        wildcard_constraints:
            exp=_exp,
            model=stacked_model_constraint(_exp),
            subset=r"pct[0-9.]+",
        priority: priority_of_run
        conda:
            "../envs/assocmem.yaml"
        threads: THREADS
        resources:
            mem_mb=stacked_resource("mem_mb"),
            runtime=stacked_resource("runtime"),
            gpu=lambda w: EXPS[w.exp]["train"]["gpus"],
        params:
            code=stage_code("train"),
            spec=stacked_specs,
            group=stacked_group,
        message:
            "train_stacked: {wildcards.exp} {wildcards.model}/{wildcards.subset}, every seed in one stack (log: {log})"
        shell:
            "python -m assocmem.train.stacked_cli --threads {threads} --group-json {params.group:q} > {log:q} 2>&1"

    workflow.ruleorder(f"train_stacked_{_exp}", "train")
