#!/usr/bin/env bash
# Issue 39's one device command: items 1-5 in order, each under its own time limit and all within
# a total (420 s by default), a failing or hanging step never stopping the rest.
#
#   On the device (carry [".gpu-wheels"], timeout 540), after the kit's prelude:
#       . .gpu-wheels/prelude.sh || exit 1; bash bench/gpu_session.sh
#   Here, as a code check of every step on the CPU (tiny sizes, --allow-cpu, a few steps):
#       bash bench/gpu_session.sh --dry-run
#
# 1. bench.gpu throughput: BERT-base at 128, bf16, eager beside BertForPreTraining, then --compile
#    (bertpre alone: compiling takes the time).
# 2. bench.gpu checkpointing --no-search.
# 3. pytest -m gpu.
# 4. bertpre pretrain --config configs/base.yaml, 60 steps on DATA (made on the CPU and carried,
#    default .gpu-wheels/data), deterministic, warmup STEPS/10 (so that the loss falls): bf16, then
#    train.precision=fp16; then the bf16 run
#    again, killed (-9) once its step-30 checkpoint exists and resumed: its last checkpoint's
#    weights must equal the straight run's, bit for bit.
# 5. bench.gpu throughput --architecture modernbert (ModernBERT-base at 1024 beside
#    ModernBertForMaskedLM) and bench.plm --device cuda (XLNet's PLM step beside XLNetLMHeadModel).
#
# JSON results go to bench/results/ (RESULTS); logs to LOGS. With $OUT set (the device tool's
# folder, which brings back at most 8 files), session.log and one gpu-session.tgz of the results,
# logs and metrics go there. Each step's exit status is a line of session.log: "step NAME: rc N".
# Settings by environment: PYTHON (python3), DATA, RESULTS, LOGS, TOTAL_S, STEPS (60), and ONLY,
# a regular expression of the step names to run (a rerun of what failed: ONLY='pretrain|modernbert').
set -u

DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; fi
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ "$DRY" = 1 ] && [ -x .venv/bin/python ]; then PYTHON=${PYTHON_DRY:-.venv/bin/python}; fi
WORK=$(mktemp -d /tmp/bertpre-gpu-session-XXXXXX)
RESULTS=${RESULTS:-bench/results}
LOGS=${LOGS:-$WORK/logs}
DATA=${DATA:-.gpu-wheels/data}
TOTAL_S=${TOTAL_S:-420}
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
    PLM_SMALL=(--device cpu --steps 1 --warmup 1 --batch-size 2 --seq-length 32)
    CONFIG=configs/tiny.yaml; STEPS=8; SAVE_AT=2
    PYTEST_ARGS=(--collect-only -q)
else
    GPU="$PYTHON -m bench.gpu --out $RESULTS"
    # ModernBERT: 10 timed steps a side (its first FlexAttention steps compile, in the warm-up)
    SMALL=(); MODERNBERT_SMALL=(--steps 10); PLM_SMALL=(--device cuda)
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

# pretrain NAME PRECISION: `bertpre pretrain` for STEPS steps into $WORK/NAME, deterministic
# (exec: the caller's process becomes the run's, so that a kill reaches the run itself).
pretrain() {
    exec "$PYTHON" -m bertpre pretrain --config "$CONFIG" --data "$DATA" --out "$WORK/$1" \
        --set train.max_steps="$STEPS" --set train.log_every=10 --set train.save_every="$SAVE_AT" \
        --set train.deterministic=true --set train.precision="$2" --set optim.warmup_steps=$(( STEPS / 10 ))
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

# 1. BERT-base throughput, eager beside the peer, then compiled
step throughput-bert 75 $GPU throughput "${SMALL[@]}"
step throughput-bert-compile 100 $GPU throughput --compile --no-peer "${SMALL[@]}"
# 2. gradient checkpointing (no largest-batch search)
step checkpointing 45 $GPU checkpointing --no-search
# 3. the CUDA-marked tests
# (the first H100 run: 20 s to collect, 47 s for the four tests then, over its 70 s limit)
step pytest-gpu 150 "$PYTHON" -m pytest "${PYTEST_ARGS[@]}" -m gpu -p no:cacheprovider tests
# 4. a real run: bf16, fp16, kill -9 and resume
step pretrain-bf16 50 pretrain run-bf16 bf16
step pretrain-fp16 45 pretrain run-fp16 fp16
step pretrain-kill-resume 60 kill_and_resume
# 5. the other families beside their transformers peers
step throughput-modernbert 90 $GPU throughput --architecture modernbert "${MODERNBERT_SMALL[@]}"
step plm-xlnet 30 "$PYTHON" -m bench.plm --out "$RESULTS" "${PLM_SMALL[@]}"

for run in run-bf16 run-fp16 run-killed; do
    [ -f "$WORK/$run/metrics.jsonl" ] && cp "$WORK/$run/metrics.jsonl" "$LOGS/metrics-$run.jsonl"
done
say "gpu_session: done at $(date -u +%FT%TZ); $(grep -c ': rc 0 ' "$SESSION_LOG") of $(grep -c '^step .*: rc' "$SESSION_LOG") steps exited 0"
if [ -n "${OUT:-}" ]; then
    mapfile -t new < <(cd "$RESULTS" && find . -maxdepth 1 -name '*.json' -newer "$WORK/started")
    tar czf "$OUT/gpu-session.tgz" -C "$LOGS" . -C "$(cd "$RESULTS" && pwd)" "${new[@]}"
    say "gpu_session: $OUT/gpu-session.tgz holds the logs and ${#new[@]} result files"
    cp "$SESSION_LOG" "$OUT/session.log"
fi
