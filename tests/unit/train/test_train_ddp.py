"""DDP launched by torchrun (gloo on CPU, 2 processes) trains to the same weights as one process."""

import subprocess
import sys
import textwrap
from pathlib import Path

import torch

SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path
    sys.path[:0] = [{tests!r}, {tests_root!r}]
    from test_train import make_job
    tmp = Path({tmp!r})
    make_job(tmp, sys.argv[1], max_steps=6, batch_size=4).run()
""")


def test_ddp_two_processes_match_single_process(tmp_path):
    tests_dir = str(Path(__file__).resolve().parent)
    script = tmp_path / "run_job.py"
    script.write_text(SCRIPT.format(tests=tests_dir, tests_root=str(Path(__file__).resolve().parents[2]),
                                    tmp=str(tmp_path)))
    subprocess.run([sys.executable, str(script), "single"], check=True, timeout=300)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                str(script), "ddp"]
    result = subprocess.run(launcher, capture_output=True, text=True, timeout=300,
                            env={"OMP_NUM_THREADS": "1", **__import__("os").environ})
    assert result.returncode == 0, result.stderr[-3000:]
    single = torch.load(tmp_path / "single" / "model.pt", weights_only=True)["model"]
    ddp = torch.load(tmp_path / "ddp" / "model.pt", weights_only=True)["model"]
    for name in single:
        assert torch.allclose(single[name], ddp[name], atol=1e-5), name
    assert (tmp_path / "ddp" / "metrics.csv").exists()
