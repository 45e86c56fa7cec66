rule tokenize:
    """Normalise the data into the token store: QF word-level sequences, or a text corpus (HF hub parquet or
    local files) with held-out validation documents, streamed into resumable shards."""
    input:
        unpack(tokenize_inputs),
        foreign=foreign_input("tokenize"),
    output:
        meta=P("tokens_meta"),
        source=P("tokens_source"),
        stamp=P("tokens_stamp"),
    log:
        log_path("{exp}/tokenize"),
    benchmark:
        bench_path("{exp}/tokenize")
    conda:
        "../envs/assocmem.yaml"
    threads: tokenize_threads
    resources:
        mem_mb=kind_resource("tokenize", "mem_mb"),
        runtime=kind_resource("tokenize", "runtime"),
    params:
        code=stage_code("tokenize"),
        spec=tokenize_params,
        raw_dir=raw_dir_arg,
        out_dir=parent_dir("out.meta"),
        io=provenance_args,
    message:
        "tokenize: {wildcards.exp} (log: {log})"
    shell:
        "python -m assocmem tokenize --threads {threads} --params {params.spec:q} --out-dir {params.out_dir:q}"
        " {params.raw_dir} {params.io} > {log:q} 2>&1"
