#!/usr/bin/env bash
# Every system's GPU check in one go, each under its own time limit, in under 12 minutes.
#
#   bash benchmarks/gpu/run_all.sh [--dry-run] [--out DIR] [--only a,b,...]
#
# Writes DIR/<check>.json (status ok | failed | timeout | skipped, seconds, figures, the docs
# section the figures belong to) and DIR/summary.json. DIR defaults to $OUT (the device
# machine's output folder), else ./gpu-results. A failing or hanging check never stops the
# others: each runs under `timeout` (its budget from checks.py plus a margin), and a check
# killed by it is listed in the summary as "timeout". --dry-run runs the same plumbing on a
# CPU (imports, arguments, CPU paths at a tiny scale) and marks every JSON "dry-run".
# Exit status: 0 when no check failed or timed out, 1 otherwise. See docs/gpu.md.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${OUT:-$root/gpu-results}"
dry=()
only=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --dry-run) dry=(--dry-run); shift ;;
        --out) out="$2"; shift 2 ;;
        --only) only="$2"; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "run_all.sh: unknown argument '$1' (valid: --dry-run, --out DIR, --only a,b)" >&2
           exit 2 ;;
    esac
done
python="${PYTHON:-python3}"
margin=8          # seconds past a check's own budget before `timeout` kills its runner
total_budget=715  # 12 minutes, less a few seconds for the summary
mkdir -p "$out" || { echo "run_all.sh: cannot create $out" >&2; exit 2; }
cd "$root"
export PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}"

start=$SECONDS
failed=0
while read -r name budget _docs; do
    if [[ -n "$only" && ",$only," != *",$name,"* ]]; then
        continue
    fi
    left=$(( total_budget - (SECONDS - start) ))
    if (( left < budget + margin )); then
        echo "$name: not started ($left s left of the 12-minute budget)" >&2
        failed=1
        continue
    fi
    rm -f "$out/$name.json"
    timeout -k 5 $(( budget + margin )) \
        "$python" "$here/checks.py" run "$name" --out "$out" --budget "$budget" "${dry[@]}"
    rc=$?
    if (( rc != 0 )); then
        failed=1
        (( rc == 124 || rc == 137 )) && echo "$name: killed after $(( budget + margin )) s" >&2
    fi
done < <("$python" "$here/checks.py" list)

"$python" "$here/checks.py" summary --out "$out" --only "$only" "${dry[@]}" || failed=1
echo "results: $out (took $(( SECONDS - start )) s)"
exit "$failed"
