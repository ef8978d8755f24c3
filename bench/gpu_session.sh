#!/usr/bin/env bash
# The one device command of a GPU session (round 2: issue 50), every step under its own time limit
# and all within a total (450 s by default), a failing or hanging step never stopping the rest.
#
#   On the device (carry [".gpu-wheels"], timeout 540), after the kit's prelude:
#       . .gpu-wheels/prelude.sh || exit 1; bash bench/gpu_session.sh
#   Here, as a code check of every step on the CPU (tiny sizes, --allow-cpu, a few steps):
#       bash bench/gpu_session.sh --dry-run
#
# 1. bench.gpu throughput, BERT-base at 128, bf16, each beside BertForPreTraining eager in the same
#    process and profiled 2 steps (the step-cost trace's refit): the step as it is now (LayerNorm in
#    bf16 and one QKV product: model.low_precision_layernorm and model.fused_qkv auto), each change
#    off in turn (--set fused_qkv=false; then both off, the 2026-11-26 step), then the step compiled.
#    Then the round-2 changes against their controls: the whole last layer (last_layer_rows=false),
#    the trainer's batches of DATA (--data), model.unpad against the same step padded (both without
#    attention dropout).
# 2. pytest -m gpu.
# 3. bertpre pretrain --config configs/base.yaml, STEPS steps on DATA (made on the CPU and carried,
#    default .gpu-wheels/data): deterministic bf16, killed (-9) once its middle checkpoint exists and
#    resumed (its last weights must equal the straight run's, bit for bit); then as a user runs it
#    for speed: not deterministic, data.num_workers 4 (tokens/s and perf/mfu beside step 1's).
# 4. ModernBERT-base at 1024 beside ModernBertForMaskedLM (sparse prediction, SDPA), and its rotary
#    in float32 (low_precision_rotary=false, the control); at 4096,
#    FlexAttention's block mask against SDPA with the dense window mask (bertpre alone).
# 5. If time is left: the compiled control (LayerNorm in float32, compiled).
#
# JSON results go to bench/results/ (RESULTS); logs to LOGS. With $OUT set (the device tool's
# folder, which brings back at most 8 files), session.log and one gpu-session.tgz of the results,
# logs and metrics go there. Each step's exit status is a line of session.log: "step NAME: rc N".
# Settings by environment: PYTHON (python3), DATA, RESULTS, LOGS, TOTAL_S, STEPS (60), and ONLY,
# a regular expression of the step names to run (a rerun of what failed: ONLY='pretrain|modernbert'),
# and PYTEST_PATHS (the gpu tests' paths, default tests).
set -u

DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; fi
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
# a dry run: PYTHON_DRY where given, else the checkout's .venv where there is one
if [ "$DRY" = 1 ]; then
    if [ -n "${PYTHON_DRY:-}" ]; then PYTHON=$PYTHON_DRY; elif [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; fi
fi
WORK=$(mktemp -d /tmp/bertpre-gpu-session-XXXXXX)
RESULTS=${RESULTS:-bench/results}
LOGS=${LOGS:-$WORK/logs}
DATA=${DATA:-.gpu-wheels/data}
TOTAL_S=${TOTAL_S:-450}
STEPS=${STEPS:-60}
mkdir -p "$LOGS" "$RESULTS"
DEADLINE=$(( $(date +%s) + TOTAL_S ))
SESSION_LOG=$LOGS/session.log

if [ "$DRY" = 1 ]; then
    # The same commands on the CPU at tiny sizes; results of a dry run are not GPU results.
    RESULTS=$WORK/results; mkdir -p "$RESULTS"
    GPU="$PYTHON -m bench.gpu --allow-cpu --out $RESULTS"
    SMALL=(--model tiny --seq-length 32 --batch-size 4 --steps 2)
    MODERNBERT_SMALL=(--model tiny --seq-length 48 --batch-size 4 --steps 2)
    LONG_SMALL=(--model tiny --seq-length 64 --batch-size 2 --steps 2)
    PROFILE=(--profile 1)
    FLEX=sdpa  # FlexAttention has no backward on the CPU: the dry run checks the step's code alone
    CONFIG=configs/tiny.yaml; STEPS=8; SAVE_AT=2
    PYTEST_ARGS=(--collect-only -q)
else
    GPU="$PYTHON -m bench.gpu --out $RESULTS"
    # ModernBERT: 10 timed steps a side (its first FlexAttention steps compile, in the warm-up)
    SMALL=(); MODERNBERT_SMALL=(--steps 10); LONG_SMALL=(--seq-length 4096 --batch-size 8 --steps 10)
    PROFILE=(--profile 2); FLEX=flex
    CONFIG=configs/base.yaml; SAVE_AT=$(( STEPS / 2 ))
    PYTEST_ARGS=(-q)
fi

say() { echo "$*" | tee -a "$SESSION_LOG"; }

# step NAME LIMIT_S COMMAND...: run under min(LIMIT_S, time left), log its output and exit status.
step() {
    local name=$1 limit=$2; shift 2
    if [ -n "${ONLY:-}" ] && ! [[ $name =~ $ONLY ]]; then return; fi
    local left=$(( DEADLINE - $(date +%s) ))
    if [ "$left" -lt 15 ]; then say "step $name: skipped (total time spent)"; return; fi
    [ "$limit" -gt "$left" ] && limit=$left
    say "== step $name (limit ${limit}s): $*"
    local start; start=$(date +%s)
    # bash -c: a step may be one of the functions below (exported with the settings they read)
    timeout -k 10 "$limit" bash -c '"$@"' "$name" "$@" > "$LOGS/$name.log" 2>&1
    local rc=$?
    # sed: a log whose last line has no newline (pytest's dots when killed) must not swallow the
    # status line below, which the summary counts (the first H100 run counted 8 of 8, not 8 of 9)
    tail -n 25 "$LOGS/$name.log" | sed -e '$a\' >> "$SESSION_LOG"
    say "step $name: rc $rc ($(( $(date +%s) - start )) s)$([ $rc -eq 124 ] && echo ', timed out')"
}

# pretrain NAME PRECISION [--set ...]: `bertpre pretrain` for STEPS steps into $WORK/NAME,
# deterministic unless a --set says otherwise (exec: the caller's process becomes the run's, so
# that a kill reaches the run itself).
pretrain() {
    local name=$1 precision=$2; shift 2
    exec "$PYTHON" -m bertpre pretrain --config "$CONFIG" --data "$DATA" --out "$WORK/$name" \
        --set train.max_steps="$STEPS" --set train.log_every=10 --set train.save_every="$SAVE_AT" \
        --set train.deterministic=true --set train.precision="$precision" \
        --set optim.warmup_steps=$(( STEPS / 10 )) "$@"
}

# The straight bf16 run killed with -9 once its middle checkpoint exists, then resumed; its last
# weights compared with the straight run's.
kill_and_resume() {
    pretrain run-killed bf16 > "$LOGS/run-killed-first.log" 2>&1 &
    local pid=$! checkpoints=$WORK/run-killed/checkpoints
    local middle last
    middle=$(printf 'step-%08d' "$SAVE_AT") last=$checkpoints/$(printf 'step-%08d' "$STEPS")
    # `latest` names a checkpoint once it is whole: a resume starts there
    while kill -0 "$pid" 2>/dev/null && ! grep -qx "$middle" "$checkpoints/latest" 2>/dev/null; do sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    echo "killed (-9) with checkpoints: $(ls "$checkpoints" 2>/dev/null | grep step- | tr '\n' ' ')"
    if [ -e "$last" ] || [ ! -e "$checkpoints/$middle" ]; then
        echo "the kill did not land between step $SAVE_AT's checkpoint and the last: nothing to compare"
        return 2
    fi
    (pretrain run-killed bf16) > "$LOGS/run-killed-resumed.log" 2>&1 || { tail -20 "$LOGS/run-killed-resumed.log"; return 1; }
    grep "resuming from" "$LOGS/run-killed-resumed.log" | grep -q "$middle" \
        || { echo "the second run did not resume from $middle"; return 3; }
    grep "resuming from\|finished at" "$LOGS/run-killed-resumed.log"
    "$PYTHON" - "$WORK/run-bf16" "$WORK/run-killed" "$STEPS" <<'EOF'
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

straight, resumed, steps = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
last = f"checkpoints/step-{steps:08d}/model.safetensors"
a, b = load_file(straight / last), load_file(resumed / last)
differing = [name for name in a if not torch.equal(a[name], b[name])]
print(f"resume after kill -9: {len(a) - len(differing)} of {len(a)} tensors bitwise equal"
      + (f"; differing: {', '.join(differing[:5])}" if differing else ""))
sys.exit(1 if differing or a.keys() != b.keys() else 0)
EOF
}

export PYTHON DATA CONFIG WORK STEPS SAVE_AT LOGS
export -f pretrain kill_and_resume
touch "$WORK/started"  # results newer than this are this session's

say "gpu_session: $(date -u +%FT%TZ), $([ "$DRY" = 1 ] && echo 'dry run on the CPU' || echo 'device run'), total ${TOTAL_S}s, python $PYTHON"
"$PYTHON" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, '-',
torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA device')" 2>&1 | tee -a "$SESSION_LOG"

# 1. BERT-base throughput beside the peer: the step now, the control without the bf16 LayerNorm,
#    compiled
step throughput-bert 75 $GPU throughput "${PROFILE[@]}" "${SMALL[@]}"
step throughput-bert-qkv3 75 $GPU throughput --set fused_qkv=false "${PROFILE[@]}" "${SMALL[@]}"
step throughput-bert-ln-fp32 75 $GPU throughput --set low_precision_layernorm=false --set fused_qkv=false \
    "${PROFILE[@]}" "${SMALL[@]}"
step throughput-bert-compile 120 $GPU throughput --compile "${PROFILE[@]}" "${SMALL[@]}"
# 1b. the round-2 changes since the last device run, each against its control (bertpre's side alone
#     changes; the peer is the same): the whole last layer; the trainer's own batches of DATA (their
#     padding); the real tokens alone (model.unpad) against the same step padded, both without
#     attention dropout (varlen_attn has none: with BERT's 0.1 the unpadded step pads for SDPA)
step throughput-bert-rows-off 75 $GPU throughput --set last_layer_rows=false "${SMALL[@]}"
step throughput-bert-data 75 $GPU throughput --data "$DATA" "${SMALL[@]}"
step throughput-bert-dropout0 75 $GPU throughput --set attention_probs_dropout_prob=0 "${PROFILE[@]}" "${SMALL[@]}"
step throughput-bert-unpad 75 $GPU throughput --set unpad=true --set attention_probs_dropout_prob=0 \
    "${PROFILE[@]}" "${SMALL[@]}"
# 2. the CUDA-marked tests
# (the first H100 run: 20 s to collect, 47 s for the four tests then)
step pytest-gpu 150 "$PYTHON" -m pytest "${PYTEST_ARGS[@]}" -m gpu -p no:cacheprovider ${PYTEST_PATHS:-tests}
# 3. a real run: deterministic bf16, kill -9 and resume; then for speed
step pretrain-bf16 50 pretrain run-bf16 bf16
step pretrain-kill-resume 60 kill_and_resume
step pretrain-fast 50 pretrain run-fast bf16 --set train.deterministic=false --set data.num_workers=4
# 4. ModernBERT beside its peer at 1024; at 4096 FlexAttention against the dense window
step throughput-modernbert 90 $GPU throughput --architecture modernbert "${MODERNBERT_SMALL[@]}"
step modernbert-rotary-fp32 90 $GPU throughput --architecture modernbert --no-peer --set low_precision_rotary=false \
    "${MODERNBERT_SMALL[@]}"
# the real tokens alone (model.unpad: varlen_attn with the local window; ModernBERT has no attention dropout)
step modernbert-unpad 90 $GPU throughput --architecture modernbert --no-peer --set unpad=true "${MODERNBERT_SMALL[@]}"
# the masked LM's loss whole (model.loss_chunk_rows 0) against the default's chunks: time and peak memory
step modernbert-chunks-off 60 $GPU throughput --architecture modernbert --no-peer --set loss_chunk_rows=0 \
    "${MODERNBERT_SMALL[@]}"
step modernbert-4096-flex 60 $GPU throughput --architecture modernbert --no-peer --local-attention "$FLEX" "${LONG_SMALL[@]}"
step modernbert-4096-sdpa 60 $GPU throughput --architecture modernbert --no-peer --local-attention sdpa "${LONG_SMALL[@]}"
# 5. the compiled control, if time is left
step throughput-bert-compile-ln-fp32 100 $GPU throughput --compile --no-peer --set low_precision_layernorm=false "${SMALL[@]}"

for run in run-bf16 run-killed run-fast; do
    [ -f "$WORK/$run/metrics.jsonl" ] && cp "$WORK/$run/metrics.jsonl" "$LOGS/metrics-$run.jsonl"
done
say "gpu_session: done at $(date -u +%FT%TZ); $(grep -c ': rc 0 ' "$SESSION_LOG") of $(grep -c '^step .*: rc' "$SESSION_LOG") steps exited 0"
if [ -n "${OUT:-}" ]; then
    mapfile -t new < <(cd "$RESULTS" && find . -maxdepth 1 -name '*.json' -newer "$WORK/started")
    tar czf "$OUT/gpu-session.tgz" -C "$LOGS" . -C "$(cd "$RESULTS" && pwd)" "${new[@]}"
    say "gpu_session: $OUT/gpu-session.tgz holds the logs and ${#new[@]} result files"
    cp "$SESSION_LOG" "$OUT/session.log"
fi
