#!/usr/bin/env bash
# `memwatch run` as a user runs it (no --quiet, no XLA_FLAGS of their own): the OOM
# doctor's verdict must follow the summary, with the HLO join from the temporary XLA
# dump memwatch sets up, and the command's stderr copied beside the capture.
#   bash tests/gpu/oom_corpus/run_verdict.sh MEMWATCH_BIN OUTDIR
# Writes OUTDIR/<scenario>/{run.stderr,run.stdout,capture.mwcap,capture.stderr.log} and
# prints, per scenario, the verdict line; exit 1 when a verdict is missing or wrong.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mw="$(readlink -f "${1:?memwatch binary}")"
out="$(mkdir -p "${2:?output folder}" && cd "$2" && pwd)"
py="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1 PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
unset XLA_FLAGS
status=0
# name | environment | program and arguments | the kind the verdict must have
for entry in \
  "jax_exec_temp|XLA_CLIENT_MEM_FRACTION=0.045|jax_exec_temp.py 6 16384 8192 float32|execute_temp" \
  "jax_autotune|TF_CPP_MIN_LOG_LEVEL=0|jax_autotune.py 16384 700|compile_scratch" \
  "torch_fraction||torch_fraction.py 0.06 256|torch_fraction_limit"; do
  IFS='|' read -r name envs prog kind <<<"$entry"
  d="$out/$name"; rm -rf "$d"; mkdir -p "$d"
  read -r -a progv <<<"$prog"
  read -r -a envv <<<"$envs"
  (cd "$d" && env "${envv[@]}" CORPUS_FIGURES="$d/figures.json" MEMWATCH_RUN_TIMING=1 \
     timeout -k 10 150 "$mw" run --out capture.mwcap -- "$py" "$here/${progv[0]}" "${progv[@]:1}" \
     >run.stdout 2>run.stderr)
  line=$(grep -m1 "^\[1\] " "$d/run.stderr")
  who=$(grep -m1 "^    who:" "$d/run.stderr")
  timing=$(grep -m1 "done .* after the command exited" "$d/run.stderr")
  printf '=== %-16s %s | %s | %s\n' "$name" "$line" "$who" "$timing"
  [[ "$line" == *"$kind — failure"* ]] || { echo "    expected $kind"; status=1; }
  [ -s "$d/capture.stderr.log" ] || { echo "    no stderr copy"; status=1; }
  ls /tmp/memwatch-xla-dump-* >/dev/null 2>&1 && { echo "    a temporary XLA dump was left in /tmp"; status=1; }
done
exit $status
