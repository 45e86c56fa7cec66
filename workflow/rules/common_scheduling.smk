# Included by common.smk: the threads, priorities and GPUs of the jobs, i.e. how Snakemake places them on the
# cores and devices. None of it is part of any params: nothing here changes what a job computes, only, for a training,
# the order of its float sums (its weights by fp32 rounding, as train.stack_replicas does), so a cached result made at
# another thread count is kept; each stamp records the threads its job ran on (assocmem.stamps).
from assocmem.runtime import job_threads, run_priority, share_of_cores
from assocmem.runtime.gpu_probe import cuda_present


def kind_resource(rule, key):
    return lambda w: kind(w.exp).resources[rule][key]


def tokenize_threads(w):
    """dataset.num_proc worker processes where the kind's tokenizer runs in parallel, else one."""
    return EXPS[w.exp]["dataset"]["num_proc"] if kind(w.exp).parallel_tokenizer else 1


def local_cores():
    """--cores of a local run; None where the jobs go to a cluster (SLURM), whose requests stay explicit."""
    if not workflow.local_exec or workflow.remote_exec:
        return None
    try:
        return workflow.cores
    except WorkflowError:
        return None


def priority_of_run(w):
    """Priority of a run's train, activations and neighbours jobs (assocmem.runtime.run_priority): the costliest
    training and its chain start first; a pretrained model's jobs have none, nor evaluate, a leaf only the report
    waits for.
    """
    fractions = subsets_of(w.exp)
    if w.subset not in fractions:
        return 0
    spec, train = run_settings(EXPS[w.exp], w.model)
    return run_priority(spec, train, fractions[w.subset])


# Threads of the k-NN and evaluation jobs (assocmem.runtime.job_threads): threads_per_job for a job on a GPU (it
# keeps one core busy); on the CPU an equal share of --cores among the rule's CPU jobs. Training: threads_per_job.
CUDA_PRESENT = cuda_present()


def on_gpu(device):
    """Whether a job with this configured device runs on a GPU here (auto: when the torch-free probe finds one)."""
    return device == "cuda" or (device == "auto" and CUDA_PRESENT)


def neighbours_device(exp):
    return EXPS[exp]["neighbours"]["device"]


def evaluate_device(exp):
    return EXPS[exp]["activations"]["device"]


NEIGHBOUR_CPU_JOBS = sum(
    1
    for exp, _, _ in runs()
    if not is_sweep(exp) and not on_gpu(neighbours_device(exp))
)
EVALUATE_CPU_JOBS = sum(
    len(evaluated_runs(EXPS[exp])) for exp in EXPS if not on_gpu(evaluate_device(exp))
)


def neighbour_threads(w):
    return job_threads(
        local_cores(), NEIGHBOUR_CPU_JOBS, THREADS, on_gpu(neighbours_device(w.exp))
    )


def evaluate_threads(w):
    return job_threads(
        local_cores(), EVALUATE_CPU_JOBS, THREADS, on_gpu(evaluate_device(w.exp))
    )


# the report runs alone, last: its figures are written by up to this many forked processes
REPORT_THREADS = share_of_cores(local_cores(), 1, THREADS)


def gpus_for(device):
    """GPUs a job requests: one when its config says cuda; 'auto' uses a GPU when the node has one but
    asks for none (so it also runs on CPU-only nodes)."""
    return 1 if device == "cuda" else 0


def train_launcher(w):
    """One torchrun over all of a job's GPUs (DDP) when train.gpus > 1, plain python otherwise."""
    gpus = EXPS[w.exp]["train"]["gpus"]
    if gpus > 1:
        return f"python -m torch.distributed.run --standalone --nproc_per_node={gpus}"
    return "python"
