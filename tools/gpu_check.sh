#!/usr/bin/env bash
# GPU check for a runner (ROCm or NVIDIA), with the runner's own torch/triton/vLLM/AITER:
#
#   tools/gpu_check.sh OUTDIR [extra pytest args...]
#
# Runs, from the repository root, with $PYTHON (default: python3) -- the
# interpreter that already has the runner's torch; nothing is installed:
#   1. the stack probe                      -> OUTDIR/stack.txt
#   2. the gpu-marked properties, including the race stress test
#      (-m gpu --strict-gating --device cuda) -> OUTDIR/gpu.log, OUTDIR/junit-gpu.xml
#   3. the whole verification run, strict    -> OUTDIR/verification.log, OUTDIR/junit-verification.xml
#   4. the benchmarks                        -> OUTDIR/bench.log, OUTDIR/bench.json,
#      and their report                         OUTDIR/bench.md, OUTDIR/bench.png
# and OUTDIR/SUMMARY.txt with each step's exit status.  Every step runs even
# when an earlier one failed; the exit status is 0 only when all passed.
# Without a GPU it stops at once with "no GPU" (exit 3).  Extra arguments go to
# every pytest call (e.g. --subject NAME, --expect aiter).
set -uo pipefail

usage() { echo "usage: $0 OUTDIR [extra pytest args...]" >&2; exit 2; }
[[ $# -ge 1 ]] || usage
OUT=$1
shift
PY=${PYTHON:-python3}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2

if ! command -v "$PY" >/dev/null 2>&1; then
    echo "gpu_check: interpreter '$PY' not found (set PYTHON to the one with the runner's torch)" >&2
    exit 2
fi
# One interpreter start answers both questions (importing torch is the slow part).
if ! probe=$("$PY" -c "import torch; print(int(torch.cuda.is_available()), torch.__version__)" 2>&1); then
    echo "gpu_check: '$PY' cannot import torch; set PYTHON to the interpreter that has the runner's torch" >&2
    echo "  ${probe##*$'\n'}" >&2
    exit 2
fi
probe=${probe##*$'\n'}
if [[ ${probe%% *} != 1 ]]; then
    echo "gpu_check: no GPU: torch ${probe#* } sees no CUDA or ROCm device; nothing to check here" >&2
    exit 3
fi
missing=$("$PY" - <<'EOF'
import importlib.util
need = {"pytest": "pytest", "hypothesis": "hypothesis", "pytest_benchmark": "pytest-benchmark"}
print(" ".join(pip for mod, pip in need.items() if importlib.util.find_spec(mod) is None))
EOF
)
if [[ -n $missing ]]; then
    echo "gpu_check: missing packages for '$PY': $missing" >&2
    echo "  install them with: $PY -m pip install $missing matplotlib   (none of them pulls torch)" >&2
    exit 2
fi

mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/SUMMARY.txt
: >"$SUMMARY"
failed=0

step() {
    # step NAME LOG command...: run, log, record the exit status.
    local name=$1 log=$2
    shift 2
    echo "== $name: $*" | tee -a "$SUMMARY"
    "$@" >"$log" 2>&1
    local rc=$?
    tail -n 40 "$log"
    if [[ $rc -eq 5 ]]; then
        echo "   $name: FAILED (no tests were collected)" | tee -a "$SUMMARY"
        failed=1
    elif [[ $rc -ne 0 ]]; then
        echo "   $name: FAILED (exit $rc, log: $log)" | tee -a "$SUMMARY"
        failed=1
    else
        echo "   $name: ok (log: $log)" | tee -a "$SUMMARY"
    fi
}

export CI=${CI:-true}
step stack "$OUT/stack.txt" "$PY" -m fixtures.plugin.stack
step gpu-properties "$OUT/gpu.log" "$PY" -m pytest -m gpu --strict-gating --device cuda \
    -p no:cacheprovider --junitxml="$OUT/junit-gpu.xml" "$@"
step verification "$OUT/verification.log" "$PY" -m pytest -m verification --strict-gating --device cuda \
    -p no:cacheprovider --junitxml="$OUT/junit-verification.xml" "$@"
step benchmarks "$OUT/bench.log" "$PY" -m pytest tests/benchmarks -p no:xdist -p no:cacheprovider \
    --device cuda --benchmark-enable --benchmark-json="$OUT/bench.json" "$@"
if [[ -f $OUT/bench.json ]]; then
    step bench-report "$OUT/bench-report.log" "$PY" tools/bench_report.py "$OUT/bench.json" --out "$OUT/bench"
fi

echo "gpu_check: results in $OUT" | tee -a "$SUMMARY"
if [[ $failed -ne 0 ]]; then
    echo "gpu_check: FAILED (see $SUMMARY)" | tee -a "$SUMMARY"
    exit 1
fi
echo "gpu_check: all steps passed" | tee -a "$SUMMARY"
