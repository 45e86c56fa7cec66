rule subsets:
    """The first X% of the training split's fixed order, as a view on the token store."""
    input:
        store=P("tokens_meta"),
        foreign=foreign_input("subsets"),
    output:
        meta=P("subset_meta"),
        stamp=P("subset_stamp"),
    log:
        log_path("{exp}/subsets_{subset}"),
    benchmark:
        bench_path("{exp}/subsets_{subset}")
    conda:
        "../envs/assocmem.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        code=stage_code("subsets"),
        spec=subset_params,
        store_dir=parent_dir("in.store"),
        out_dir=parent_dir("out.meta"),
        io=provenance_args,
    message:
        "subset: {wildcards.exp} {wildcards.subset} (log: {log})"
    shell:
        "python -m assocmem subsets --params {params.spec:q} --store-dir {params.store_dir:q}"
        " --out-dir {params.out_dir:q} {params.io} > {log:q} 2>&1"
