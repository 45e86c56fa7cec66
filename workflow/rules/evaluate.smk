rule evaluate:
    """Cross-entropy of a full-data model on large evaluation sets (a fresh generator sample, McCoy's real files),
    with and without <eos>."""
    input:
        unpack(evaluation_inputs),
        model=P("best_model"),
        store=P("tokens_meta"),
        foreign=foreign_input("evaluate"),
    output:
        evaluation=P("evaluation"),
        stamp=P("eval_stamp"),
    log:
        log_path("{exp}/evaluate_{model}_{subset}"),
    benchmark:
        bench_path("{exp}/evaluate_{model}_{subset}")
    wildcard_constraints:
        subset=r"pct[0-9.]+",
    conda:
        "../envs/assocmem.yaml"
    threads: evaluate_threads
    resources:
        mem_mb=3000,
        runtime=60,
        gpu=lambda w: gpus_for(EXPS[w.exp]["activations"]["device"]),
    params:
        code=stage_code("evaluate"),
        spec=evaluation_params,
        store_dir=parent_dir("in.store"),
        out_dir=parent_dir("out.evaluation"),
        io=provenance_args,
    message:
        "evaluate: {wildcards.exp} {wildcards.model}/{wildcards.subset} (log: {log})"
    shell:
        "python -m assocmem evaluate --threads {threads} --params {params.spec:q} --model {input.model:q}"
        " --store-dir {params.store_dir:q} --out-dir {params.out_dir:q} {params.io} > {log:q} 2>&1"
