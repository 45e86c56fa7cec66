rule generate_data:
    """Sample McCoy et al.'s question-formation splits from the embedded grammar, or download them."""
    input:
        foreign=foreign_input("generate_data"),
    output:
        files=expand(
            P("raw_file"), split=QUESTION_FORMATION.raw_splits, allow_missing=True
        ),
        manifest=P("raw_manifest"),
        stamp=P("raw_stamp"),
    log:
        log_path("{exp}/generate_data"),
    benchmark:
        bench_path("{exp}/generate_data")
    conda:
        "../envs/assocmem.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        code=stage_code("generate_data"),
        spec=generate_params,
        out_dir=parent_dir("out.manifest"),
        io=provenance_args,
    message:
        "generate data: {wildcards.exp} (log: {log})"
    shell:
        "python -m assocmem generate-data --params {params.spec:q} --out-dir {params.out_dir:q} {params.io} > {log:q} 2>&1"


rule data_audit:
    """Exact Bayes-optimal entropy floor of the data and divergence from McCoy's real dev split."""
    input:
        unpack(audit_inputs),
        train=at("raw_file", exp="{exp}", split="train"),
        manifest=P("raw_manifest"),
        foreign=foreign_input("data_audit"),
    output:
        floor=P("floor"),
        compare=P("compare"),
        stamp=P("audit_stamp"),
    log:
        log_path("{exp}/data_audit"),
    benchmark:
        bench_path("{exp}/data_audit")
    conda:
        "../envs/assocmem.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        code=stage_code("data_audit"),
        spec=audit_params,
        raw_dir=parent_dir("in.manifest"),
        io=provenance_args,
    message:
        "audit data: {wildcards.exp} (log: {log})"
    shell:
        "python -m assocmem data-audit --params {params.spec:q} --raw-dir {params.raw_dir:q}"
        " --floor {output.floor:q} --compare {output.compare:q} {params.io} > {log:q} 2>&1"


rule generate_fresh:
    """A fresh sample from the generator, distributed as the training split: the evaluate stage's large set."""
    input:
        foreign=foreign_input("generate_fresh"),
    output:
        file=P("fresh_file"),
        manifest=P("fresh_manifest"),
        stamp=P("fresh_stamp"),
    log:
        log_path("{exp}/generate_fresh"),
    benchmark:
        bench_path("{exp}/generate_fresh")
    conda:
        "../envs/assocmem.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        code=stage_code("generate_fresh"),
        spec=fresh_params,
        out_dir=parent_dir("out.manifest"),
        io=provenance_args,
    message:
        "generate fresh data: {wildcards.exp} (log: {log})"
    shell:
        "python -m assocmem generate-fresh --params {params.spec:q} --out-dir {params.out_dir:q} {params.io} > {log:q} 2>&1"


rule generate_facts:
    """Random key -> value facts for the memorisation test (train and unseen) and their exact information content."""
    input:
        foreign=foreign_input("generate_facts"),
    output:
        files=expand(P("facts_file"), split=FACTS.raw_splits, allow_missing=True),
        information=P("facts_information"),
        stamp=P("facts_stamp"),
    log:
        log_path("{exp}/generate_facts"),
    benchmark:
        bench_path("{exp}/generate_facts")
    conda:
        "../envs/assocmem.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        code=stage_code("generate_facts"),
        spec=facts_params,
        out_dir=parent_dir("out.information"),
        io=provenance_args,
    message:
        "generate facts: {wildcards.exp} (log: {log})"
    shell:
        "python -m assocmem generate-facts --params {params.spec:q} --out-dir {params.out_dir:q} {params.io} > {log:q} 2>&1"
