"""The GPU check's main run read back from its files (issue 40): its jobs' times (Snakemake's benchmark files), each
job's start-up, CUDA start, CPU split and set-up phases (the jobs' logs), and its jobs by start (Snakemake's log).
``benchmarks/gpu_check.py jobs|cpu|timeline`` prints them; ``gpu_check.sh`` calls it after the main run."""

from __future__ import annotations

import time
from pathlib import Path


def job_times(results: Path) -> str:
    """The main run's jobs, longest first: every Snakemake benchmark file of the run (the report's own reader,
    :func:`assocmem.report.build.stage_timings`)."""
    from assocmem.layout import TEMPLATES
    from assocmem.report.build import stage_timings

    folder = results / Path(TEMPLATES["benchmark"]).parent
    names = [tsv.relative_to(folder).with_suffix("").as_posix() for tsv in folder.rglob("*.tsv")]
    table = stage_timings(results, names).sort_values("seconds", ascending=False)
    lines = [f"{'wall s':>8} {'peak MB':>8}  job"]
    lines += [f"{row.seconds:8.1f} {row.max_rss_mb:8.0f}  {row.stage}" for row in table.itertuples()]
    return "\n".join(lines) if len(table) else f"no Snakemake benchmark files under {results}"


def job_cpu(results: Path) -> str:
    """The main run's jobs, longest first, from the line each job's log ends with
    (:func:`assocmem.runtime.cpu_time.cpu_split`): when the stage began after its process started (Python, imports),
    how long its CUDA context took to create (:func:`assocmem.runtime.cuda_start.cuda_ready`; none on the CPU), its
    wall, and its CPU seconds in its main thread, its other threads and the child processes it waited for; then
    each job's set-up before its work (a training's: before its first step), phase by phase
    (:class:`assocmem.runtime.cpu_time.SetupClock`)."""
    from assocmem.runtime.cpu_time import parse_cpu_line, parse_setup_line
    from assocmem.runtime.cuda_start import parse_cuda_start

    rows, setups = [], []
    for log in sorted((results / "logs").rglob("*.log")):
        text = log.read_text(errors="replace")
        found, job = parse_cpu_line(text), log.relative_to(results / "logs").with_suffix("").as_posix()
        if found is not None:
            found["cuda"] = parse_cuda_start(text)
            rows.append((found, job))
        if (setup := parse_setup_line(text)) is not None:
            phases = ", ".join(f"{name} {seconds:.2f}" for name, seconds in setup.items() if name != "total")
            setups.append(f"set-up {setup['total']:.1f} s before the work of {job}: {phases}")
    if not rows:
        return f"no job logs with a CPU line under {results / 'logs'}"

    def cell(value: float | None) -> str:
        return "     -" if value is None else f"{value:6.1f}"

    lines = [f"{'began':>6} {'CUDA':>6} {'wall':>6} {'CPU':>6} {'cores':>6} {'main':>6} {'others':>6} {'child':>6}  "
             "job (seconds; began: after its process started; CUDA: its context created in; others: its other "
             "threads; child: its child processes)"]
    for found, job in sorted(rows, key=lambda row: -row[0]["wall"]):
        lines.append(" ".join(cell(found[key]) for key in ("began", "cuda", "wall", "cpu", "load", "main_thread",
                                                            "other_threads", "children")) + f"  {job}")
    return "\n".join(lines + setups)


def job_timeline(log: Path) -> str:
    """The main run's jobs by start, from Snakemake's log (its ``[date]`` lines, one-second resolution): when each
    started and ended after the first job started, and how long it ran; a job that waited for cores, or a gap
    between a job and the next on the chain, shows here and not in the benchmark files."""
    if not log.is_file():
        return f"no Snakemake log at {log}"
    stamp, starts, ends, names = None, {}, {}, {}
    for line in log.read_text().splitlines():
        if line.startswith("[") and line.endswith("]"):
            stamp = time.mktime(time.strptime(line[1:-1], "%a %b %d %H:%M:%S %Y"))
        elif line.startswith("Job ") and ":" in line and stamp is not None:
            job, _, message = line[4:].partition(":")
            if job.strip().isdigit():
                starts[job.strip()], names[job.strip()] = stamp, message.split(" (log:")[0].strip()
        elif line.startswith("Finished jobid: ") and stamp is not None:
            ends[line.split()[2]] = stamp
    if not starts:
        return f"no jobs in {log}"
    zero = min(starts.values())
    lines = [f"{'start':>6} {'end':>6} {'s':>5}  job (seconds after the first job started)"]
    for job in sorted(starts, key=lambda j: (starts[j], int(j))):
        end = ends.get(job)
        took = f"{end - starts[job]:5.0f}" if end is not None else "    -"
        finish = f"{end - zero:6.0f}" if end is not None else "     -"
        lines.append(f"{starts[job] - zero:6.0f} {finish} {took}  {names[job]}")
    return "\n".join(lines)
