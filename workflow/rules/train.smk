rule train:
    """Train one model on one subset; resumes from run_dir/checkpoint.pt if a previous attempt died."""
    input:
        store=P("tokens_meta"),
        subset=P("subset_meta"),
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
