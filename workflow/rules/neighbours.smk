rule neighbours:
    """Exact k-NN distances (faiss): self-search at subsample fractions and held-out vs training."""
    input:
        train=P("acts_train"),
        heldout=P("acts_heldout"),
        radius=P("acts_radius"),
        meta=P("acts_meta"),
        foreign=foreign_input("neighbours"),
    output:
        self_nn=P("nn_self"),
        heldout_nn=P("nn_heldout"),
        summary=P("nn_summary"),
        radius=P("nn_radius"),
        radius_meta=P("nn_radius_meta"),
        stamp=P("nn_stamp"),
    log:
        log_path("{exp}/neighbours_{model}_{subset}"),
    benchmark:
        bench_path("{exp}/neighbours_{model}_{subset}")
    priority: priority_of_run
    conda:
        "../envs/assocmem.yaml"
    threads: neighbour_threads
    resources:
        mem_mb=3000,
        runtime=60,
        gpu=lambda w: gpus_for(EXPS[w.exp]["neighbours"]["device"]),
    params:
        code=stage_code("neighbours"),
        spec=neighbour_params,
        act_dir=parent_dir("in.meta"),
        out_dir=parent_dir("out.summary"),
        io=provenance_args,
    message:
        "nearest neighbours: {wildcards.exp} {wildcards.model}/{wildcards.subset} (log: {log})"
    shell:
        "python -m assocmem neighbours --threads {threads} --params {params.spec:q} --act-dir {params.act_dir:q}"
        " --out-dir {params.out_dir:q} {params.io} > {log:q} 2>&1"
