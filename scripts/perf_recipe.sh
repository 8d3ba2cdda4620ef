#!/usr/bin/env bash
# Where the time goes (issue 16): every measurement of the README's section, in order, on a QUIET
# machine (nothing else running; the printouts carry the load average: paste only quiet runs).
# Each printout is saved under results/perf/ (OUT=... to change). Run from the repository root:
#     bash scripts/perf_recipe.sh            # about 1-2 hours on 2 CPU cores
#     STEPS="1 3" bash scripts/perf_recipe.sh
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-results/perf}
QUESTIONS=${QUESTIONS:-../shared/data/spec_bench/question.jsonl}
STEPS=${STEPS:-"1 2 3 4 5 6"}
export PYTHONPATH=. OMP_NUM_THREADS=2 HF_HUB_OFFLINE=1
mkdir -p "$OUT"
run() { local name=$1; shift; echo "== $name: $*"; "$@" 2>&1 | tee "$OUT/$name.txt"; }
for step in $STEPS; do
  case $step in
    1) run vs_hf_embedded $PY scripts/bench_vs_hf.py --gamma 5 --repeats 3 --variants all \
         --json "$OUT/vs_hf_embedded.json" ;;
    2) run vs_hf_specbench $PY scripts/bench_vs_hf.py --gamma 4 --repeats 2 --variants basic --task specbench \
         --data-files "$QUESTIONS" --per-category 1 --json "$OUT/vs_hf_specbench.json" ;;
    3) run speedup_specbench $PY scripts/bench_speedup.py --task specbench --data-files "$QUESTIONS" \
         --per-category 1 --configs int8:5 lookup:8 hybrid:6 --plain --repeats 1 --json "$OUT/speedup_specbench.json" ;;
    4) run calibrate $PY -m runners.replay calibrate --pair gemma3-270m_gemma3-270m-int8 --threads 2 \
         --out "$OUT/latency/gemma3-270m_gemma3-270m-int8.json" ;;
    5) run sweep $PY scripts/bench_sweep.py ;;
    6) # real jobs with each option on/off; records carry the breakdown and predicted_wall_ms (step 4's model)
       run engine_jobs $PY run.py -m method=specdecode gamma=5 engine.fast_linear=false,all \
         engine.fused_prefill=false,true threads=2 latency="$OUT/latency" results_dir="$OUT/engine_jobs"
       run engine_analysis $PY -m analysis "$OUT/engine_jobs" --out "$OUT/engine_jobs/analysis"
       cat "$OUT/engine_jobs/analysis/tables/time_breakdown.md" ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
