rule sweep:
    """A scaling sweep's analyses: the boundary exponent with its power at this design, the parametric law, the
    inverted U (assocmem.sweep)."""
    input:
        sweep_inputs,
    output:
        analysis=P("sweep_analysis"),
        stamp=P("sweep_stamp"),
    log:
        log_path("{exp}/sweep"),
    benchmark:
        bench_path("{exp}/sweep")
    conda:
        "../envs/assocmem.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=60,
    params:
        code=stage_code("sweep"),
        spec=sweep_params,
        results_dir=lambda w, output: Path(output.analysis).parents[2],
        out_dir=parent_dir("out.analysis"),
        io=provenance_args,
    message:
        "grid analysis (scaling sweep or memorisation): {wildcards.exp} (log: {log})"
    shell:
        "python -m assocmem sweep --params {params.spec:q} --results-dir {params.results_dir:q}"
        " --out-dir {params.out_dir:q} {params.io} > {log:q} 2>&1"
