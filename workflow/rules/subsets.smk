rule subsets:
    """The first X% of the training split's fixed order, as a view on the token store."""
    input:
        P("tokens_meta"),
    output:
        P("subset_meta"),
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
        store_dir=lambda w, input: Path(input[0]).parent,
        out_dir=lambda w, output: Path(output[0]).parent,
    shell:
        "python -m assocmem subsets --params {params.spec:q} --store-dir {params.store_dir:q}"
        " --out-dir {params.out_dir:q} > {log:q} 2>&1"
