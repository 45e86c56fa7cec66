rule sweep:
    """A scaling sweep's analyses: the boundary exponent with its power at this design, the parametric law, the
    inverted U (assocmem.sweep)."""
    input:
        sweep_inputs,
        foreign=foreign_input("sweep"),
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
        spec=grid_params,
        results_dir=lambda w, output: Path(output.analysis).parents[2],
        out_dir=parent_dir("out.analysis"),
        io=provenance_args,
    message:
        "scaling sweep analysis: {wildcards.exp} (log: {log})"
    shell:
        "python -m assocmem sweep --params {params.spec:q} --results-dir {params.results_dir:q}"
        " --out-dir {params.out_dir:q} {params.io} > {log:q} 2>&1"


rule memorisation:
    """A memorisation grid's analyses (a sweep of facts): the storage boundary N_b(D), its power at this design,
    bits per parameter and the stored patterns' NN distances (assocmem.memorisation)."""
    input:
        memorisation_inputs,
        foreign=foreign_input("memorisation"),
    output:
        analysis=P("memorisation_analysis"),
        stamp=P("memorisation_stamp"),
    log:
        log_path("{exp}/memorisation"),
    benchmark:
        bench_path("{exp}/memorisation")
    conda:
        "../envs/assocmem.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=60,
    params:
        code=stage_code("memorisation"),
        spec=grid_params,
        results_dir=lambda w, output: Path(output.analysis).parents[2],
        out_dir=parent_dir("out.analysis"),
        io=provenance_args,
    message:
        "memorisation grid analysis: {wildcards.exp} (log: {log})"
    shell:
        "python -m assocmem memorisation --params {params.spec:q} --results-dir {params.results_dir:q}"
        " --out-dir {params.out_dir:q} {params.io} > {log:q} 2>&1"
