#!/usr/bin/env bash
# The GPU check of issue 41 in one run on one GPU machine (at most 9 minutes), from the repository root:
#
#   benchmarks/gpu_check.sh [--nanogpt DIR] [--wheels DIR] [--out DIR] [--dry-run]
#
# Installs the packages the machine lacks from a folder of wheels brought along (--wheels, default .whl/; see
# benchmarks/README.md), then runs each part under its own `timeout` (the issues' gates first, the longest last)
# and prints one table:
#   the tests a CPU skips (`pytest -m gpu`: the torch k-NN engine on CUDA);
#   benchmarks/gpu_knn_check.py (issue 40), where it exists;
#   the main run, `snakemake --cores all` on the default config (cap $MAIN_CAP, 200 s): its wall time, its jobs'
#   times (Snakemake's benchmark files), start-up, CUDA start and CPU split (their logs), its timeline (Snakemake's log;
#   records in $OUT/main_run_records.tgz), when the report's figures were written and its verdicts against
#   docs/results/default.json's;
#   GPT-2 small, the project's trainer against karpathy/nanoGPT (--nanogpt DIR), eager and compiled, one process
#   per arm; compiled, both in one process taking turns in 20 ABBA pairs of 16-step blocks, their ratio with its 95%
#   interval and verdict (benchmarks/gpt2_pair.py, record $OUT/gpt2_pair.json);
#   the default's L4 step eager, compiled and in CUDA graphs (benchmarks/gpu_check.py);
#   stacked replicas (K = 1, 4, 16) against K single runs, where the project has a stacked trainer;
#   the decisive memorisation column's floor: its training FLOPs at the fp32, TF32 and bf16 product rates measured
#   here (assocmem.memorisation.decisive_floor --measure): whether it could fit in 10 minutes at all; and its wall
#   in bf16 by its own trainer's measured costs, each of its 30 stacked groups timed in one CUDA graph, then eager, and
#   the smallest trained 2,000 steps for real in each against the cost model, and the smallest and the largest
#   model's groups stepping 1, 2, 4 and 8 at once, one process each, then one CUDA stream each in one process, for
#   the rows the wall's rule leaves open (benchmarks/bench_decisive_wall.py, assocmem.memorisation.decisive_sharing;
#   record $OUT/decisive_wall.json, written after each stage and every 20 s while the groups are timed).
#   Before it, a group's evaluation round in one stacked pass against each replica alone, D0 and D14 in bf16
#   (benchmarks/bench_stacked_eval.py; record $OUT/stacked_eval.json);
#   last, a diagnosis rather than a goal: the ops each compiled GPT-2 step runs outside its graph, with the kernels
#   they launch (benchmarks/bench_step_ops.py, tiny; record $OUT/step_ops.json).
# --dry-run: the same path on the CPU with tiny shapes and a few steps, no wheels, no main run (seconds).
# PARTS="tests knn main l4 gpt2-eager gpt2-compile gpt2-pair ops stacked decisive" (the default: all) runs only the
# parts it names.
set -u
NANOGPT="" WHEELS=.whl OUT=${OUT:-/tmp/gpu-check} DRY=0 BUDGET=${BUDGET:-530}
while [ $# -gt 0 ]; do
  case "$1" in
    --nanogpt) NANOGPT=$2; shift 2 ;;
    --wheels) WHEELS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    *) echo "gpu_check.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
RESULTS=$OUT/results.jsonl LOG=$OUT/gpu_check.log
: > "$RESULTS"
exec > >(tee -a "$LOG") 2>&1
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
say() { echo "== t=${SECONDS}s $*"; }
want() { [ -z "${PARTS:-}" ] || [[ " $PARTS " == *" $1 "* ]]; }
left() { echo $((BUDGET - SECONDS)); }
# part CAP NAME COMMAND...: run under `timeout` with at most CAP seconds and what the budget leaves
part() {
  local cap=$1 name=$2; shift 2
  local room=$(( $(left) - 20 ))
  [ "$room" -lt "$cap" ] && cap=$room
  if [ "$cap" -lt 15 ]; then echo "skip $name: ${cap}s of the budget left for it"; return; fi
  say "$name (cap ${cap}s)"
  timeout -k 5 "$cap" "$@"; local rc=$?
  [ $rc -ne 0 ] && echo "$name: rc=$rc$([ $rc -ge 124 ] && echo ' (stopped by its time cap)')"
  return 0
}

say "environment"
if [ $DRY = 0 ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  if ls "$WHEELS"/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpu-check-site "$WHEELS"/*.whl 2>&1 \
      | tail -3
    export PYTHONPATH=$PYTHONPATH:/tmp/gpu-check-site PATH=/tmp/gpu-check-site/bin:$PATH
  else
    echo "no wheels in $WHEELS: using the packages installed here"
  fi
  python3 -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
fi
# the host's CPU and the BLAS numpy and scipy load (its threads spin or sleep: the report job's CPU time hangs on it)
lscpu | grep -E '^(Model name|CPU family|Model|CPU\(s\)|Thread\(s\) per core|Socket\(s\)):' | tr -s ' ' | paste -sd';'
python3 -m threadpoolctl -i numpy scipy.linalg \
  || echo "threadpoolctl is not installed: the main run's report needs it (benchmarks/README.md: the wheels)"

if [ $DRY = 0 ] && want tests; then  # the tests a CPU skips: the torch k-NN engine and the training step on CUDA
  part 60 "pytest -m gpu" python3 -m pytest -q -p no:cacheprovider -rs -m gpu tests/unit/knn tests/unit/train tests/unit/evaluation tests/unit/core/test_gpu_probe.py
fi

if ! want knn; then
  echo "skip k-NN check: not in PARTS"
elif [ -f benchmarks/gpu_knn_check.py ]; then
  part 90 "k-NN check" python3 benchmarks/gpu_knn_check.py --out "$OUT" $([ $DRY = 1 ] && echo --dry-run)
else
  echo "skip k-NN check: benchmarks/gpu_knn_check.py is not in this checkout"
fi

if [ $DRY = 1 ] || ! want main; then
  echo "skip main run: dry run or not in PARTS"
else
  rm -rf /tmp/gpu-check-main && mkdir -p /tmp/gpu-check-main /tmp/gpu-check-bin
  tar --exclude=./results --exclude=./.whl --exclude=./.gl --exclude=./.git --exclude=./.snakemake -cf - . \
    | tar -x -C /tmp/gpu-check-main
  command -v python > /dev/null || ln -sf "$(command -v python3)" /tmp/gpu-check-bin/python  # the rules call python
  export PATH=$PATH:/tmp/gpu-check-bin
  start=$SECONDS
  part ${MAIN_CAP:-200} "main run: snakemake --cores all" \
    bash -c "cd /tmp/gpu-check-main && python3 -m snakemake --cores all > '$OUT/main_run.log' 2>&1"
  echo "main run: $((SECONDS - start)) s"
  grep "assocmem:" "$OUT/main_run.log" | tail -8
  python3 benchmarks/gpu_check.py jobs /tmp/gpu-check-main/results
  python3 benchmarks/gpu_check.py cpu /tmp/gpu-check-main/results
  python3 benchmarks/gpu_check.py timeline "$(ls -t /tmp/gpu-check-main/.snakemake/log/*.log 2> /dev/null | head -1)"
  grep -h "figure_writer: " /tmp/gpu-check-main/results/logs/report.log | sed 's/^.*figure_writer: /report /'
  (cd /tmp/gpu-check-main && find results -name '*.tsv' -o -name 'timing.json' -o -name '*.log' -o -name '*.csv' \
    | tar -czf "$OUT/main_run_records.tgz" -T - .snakemake/log 2> /dev/null)
  python3 - /tmp/gpu-check-main/results/report/verdicts.csv docs/results/default.json <<'EOF'
import csv, json, sys
from pathlib import Path
table, record = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())["verdicts"]
if not table.is_file():
    sys.exit(f"main run: no {table} (the run did not finish)")
found = {row["claim"]: row["verdict"] for row in csv.DictReader(table.open())}
changed = [f"  {c}: {record.get(c, '-')} -> {found.get(c, '-')}" for c in sorted(set(found) | set(record))
           if found.get(c) != record.get(c)]
print("verdicts against docs/results/default.json: " + ("all equal" if not changed else "\n" + "\n".join(changed)))
EOF
fi

CHECK="python3 benchmarks/gpu_check.py arm --out $RESULTS ${NANOGPT:+--nanogpt $NANOGPT}"
if [ $DRY = 1 ]; then  # one process: the arms' code paths, tiny, on the CPU
  part 300 "arms (dry run)" $CHECK --dry-run gpt2-nanogpt-eager l4-graphs  # gpt2-project-* is this path at other shapes
else
  if want l4; then for arm in l4-eager l4-graphs l4-compile; do part 60 "$arm" $CHECK $arm; done; fi
  if want gpt2-compile; then for arm in gpt2-nanogpt-compile gpt2-project-compile; do part 100 "$arm" $CHECK $arm; done; fi
  if want gpt2-eager; then for arm in gpt2-nanogpt-eager gpt2-project-eager; do part 60 "$arm" $CHECK $arm; done; fi
fi
if ! want gpt2-pair; then
  echo "skip GPT-2 pair: not in PARTS"
elif [ -z "$NANOGPT" ]; then
  echo "skip GPT-2 pair: no --nanogpt DIR given"
else  # both compiled arms in one process, blocks interleaved: the ratio with its interval (issue 41's >= 1.0x)
  part $([ $DRY = 1 ] && echo 120 || echo 180) "GPT-2 pair" python3 benchmarks/gpt2_pair.py --nanogpt "$NANOGPT" \
    --out "$OUT/gpt2_pair.json" $([ $DRY = 1 ] && echo --dry-run)
fi

if ! want stacked; then
  echo "skip stacked replicas: not in PARTS"
elif python3 -c "import importlib.util as u, sys; sys.exit(u.find_spec('assocmem.train.stacked') is None)" 2>/dev/null \
   && [ -f benchmarks/bench_stacked.py ]; then
  part 90 "stacked replicas" python3 benchmarks/bench_stacked.py --replicas 1,4,16 $([ $DRY = 1 ] && echo --dry-run || echo --shapes G3,G5)
else
  echo "skip stacked replicas: no stacked trainer in this checkout (assocmem.train.stacked, benchmarks/bench_stacked.py)"
fi

if [ $DRY = 1 ] || ! want decisive; then
  echo "skip the decisive column's floor: dry run (it measures CUDA products) or not in PARTS"
else
  part 30 "decisive column floor" python3 -m assocmem.memorisation.decisive_floor --measure
fi
if ! want decisive; then
  echo "skip the stacked evaluation: not in PARTS"
else
  # the dry run's part takes 13 s on an idle 2-core host (AMD EPYC Zen 4, 2026-11-30; 26 s before the facts' keys
  # were hashed), several times that beside the test suite's other workers
  part $([ $DRY = 1 ] && echo 180 || echo 60) "stacked evaluation" \
    python3 benchmarks/bench_stacked_eval.py --out "$OUT/stacked_eval.json" \
    $([ $DRY = 1 ] && echo --rounds 1 || echo --models D0,D14 --precision bf16)
fi
if ! want decisive; then
  echo "skip the decisive column's wall: not in PARTS"
else  # bf16 only: in fp32 the floor alone (23.7-27.8 min on an H200) exceeds the goal
  part 330 "decisive column wall" python3 benchmarks/bench_decisive_wall.py --out "$OUT/decisive_wall.json" \
    $([ $DRY = 1 ] && echo --dry-run || echo --precision bf16 --graphs off,on --check-steps 2000 --share 2,4,8 \
                                             --share-window 2 --share-modes processes,streams)
fi

if want ops; then  # what each loop's compiled step runs outside its graph (kernels on CUDA), tiny shapes: a
  # diagnosis of the GPT-2 ratio, not a goal, so last
  part 120 "ops outside the compiled step" python3 benchmarks/bench_step_ops.py ${NANOGPT:+--nanogpt $NANOGPT} \
    --device "$([ $DRY = 1 ] && echo cpu || echo cuda)" --out "$OUT/step_ops.json"
fi

say "table"
python3 benchmarks/gpu_check.py table "$RESULTS"
say "done"
