rule report:
    """Bound-verification report: checks.json, verdicts.csv, report.md, self-contained index.html and figures."""
    input:
        report_inputs,
        foreign=foreign_input("report"),
    output:
        html=report(P("report_html"), caption="../report/index.rst", category="Report"),
        markdown=P("report_md"),
        checks=P("report_checks"),
        verdicts=report(
            P("report_verdicts"), caption="../report/verdicts.rst", category="Report"
        ),
        figures=report(
            directory(P("report_figures")),
            patterns=["{name}.png"],
            caption="../report/figures.rst",
            category="Figures",
            labels={"figure": "{name}"},
        ),
        stamp=P("report_stamp"),
    log:
        log_path("report"),
    benchmark:
        bench_path("report")
    conda:
        "../envs/assocmem.yaml"
    threads: REPORT_THREADS
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        code=stage_code("report"),
        spec=report_params,
        results_dir=lambda w, output: Path(output.html).parent.parent,
        out_dir=parent_dir("out.html"),
        io=report_provenance_args,
    message:
        "report (log: {log})"
    shell:
        "python -m assocmem report --threads {threads} --params {params.spec:q} --results-dir {params.results_dir:q}"
        " --out-dir {params.out_dir:q} {params.io} > {log:q} 2>&1"
