rule activations:
    """Hidden states at the last position of sampled chunks, from training and held-out data."""
    input:
        store=P("tokens_meta"),
        subset=P("subset_meta"),
        model=activation_model,
        foreign=foreign_input("activations"),
    output:
        train=P("acts_train"),
        heldout=P("acts_heldout"),
        train_index=P("acts_train_index"),
        heldout_index=P("acts_heldout_index"),
        meta=P("acts_meta"),
        radius=P("acts_radius"),
        radius_index=P("acts_radius_index"),
        stamp=P("acts_stamp"),
    log:
        log_path("{exp}/activations_{model}_{subset}"),
    benchmark:
        bench_path("{exp}/activations_{model}_{subset}")
    wildcard_constraints:
        subset=r"pct[0-9.]+",
    priority: priority_of_run
    conda:
        "../envs/assocmem.yaml"
    threads: THREADS
    resources:
        mem_mb=3000,
        runtime=60,
        gpu=lambda w: gpus_for(EXPS[w.exp]["activations"]["device"]),
    params:
        code=stage_code("activations"),
        spec=activation_params,
        store_dir=parent_dir("in.subset"),
        out_dir=parent_dir("out.meta"),
        io=provenance_args,
    message:
        "activations: {wildcards.exp} {wildcards.model}/{wildcards.subset} (log: {log})"
    shell:
        "python -m assocmem activations --threads {threads} --params {params.spec:q} --model {input.model:q}"
        " --store-dir {params.store_dir:q} --out-dir {params.out_dir:q} {params.io} > {log:q} 2>&1"


rule pretrained_activations:
    """The paper's Fig. 2 protocol on a pretrained HF causal LM (e.g. gpt2-medium)."""
    input:
        store=P("tokens_meta"),
        foreign=foreign_input("pretrained_activations", subset=PRETRAINED),
    output:
        train=at("acts_train", exp="{exp}", model="{model}", subset=PRETRAINED),
        heldout=at("acts_heldout", exp="{exp}", model="{model}", subset=PRETRAINED),
        train_index=at(
            "acts_train_index", exp="{exp}", model="{model}", subset=PRETRAINED
        ),
        heldout_index=at(
            "acts_heldout_index", exp="{exp}", model="{model}", subset=PRETRAINED
        ),
        meta=at("acts_meta", exp="{exp}", model="{model}", subset=PRETRAINED),
        radius=at("acts_radius", exp="{exp}", model="{model}", subset=PRETRAINED),
        radius_index=at(
            "acts_radius_index", exp="{exp}", model="{model}", subset=PRETRAINED
        ),
        stamp=at("acts_stamp", exp="{exp}", model="{model}", subset=PRETRAINED),
    log:
        log_path("{exp}/pretrained_activations_{model}"),
    benchmark:
        bench_path("{exp}/pretrained_activations_{model}")
    conda:
        "../envs/assocmem.yaml"
    threads: THREADS
    resources:
        mem_mb=16000,
        runtime=240,
        gpu=lambda w: gpus_for(EXPS[w.exp]["activations"]["device"]),
    params:
        code=stage_code("pretrained_activations"),
        spec=pretrained_params,
        store_dir=parent_dir("in.store"),
        out_dir=parent_dir("out.meta"),
        io=provenance_args,
    message:
        "activations: {wildcards.exp} {wildcards.model}/pretrained (log: {log})"
    shell:
        "python -m assocmem pretrained-activations --threads {threads} --params {params.spec:q}"
        " --store-dir {params.store_dir:q} --out-dir {params.out_dir:q} {params.io} > {log:q} 2>&1"
