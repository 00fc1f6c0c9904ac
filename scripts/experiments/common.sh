# shellcheck shell=bash
# Shared by the experiment runners in scripts/experiments/ (source it after setting `name`).
# Gives: repo, python, die, skip_unless_root, commit_id, load_avg, host_nproc, host_cmd (the
# wrapper of commands run inside an emulated host), xrun (one logged, time-bounded run),
# write_setup, gradsync_flags and train_once (one training run of a configuration).
# shellcheck disable=SC2154  # name, out, hosts, timeout_s, gradsync_bin, ddp_args, gradsync_args:
# set by the sourcing script

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
python=/usr/bin/python3  # The only interpreter with torch (docs: environment.md).
report_py="$repo/scripts/experiments/report.py"
netem="$repo/scripts/netem"

die() { echo "$name: error: $*" >&2; exit 1; }

# Emulated hosts are network namespaces: without root, say so and stop with status 0 (make bench
# continues), or status 1 when NETEM_REQUIRED=1.
skip_unless_root() {
  [ "$(id -u)" -eq 0 ] && return 0
  echo "$name: skipped: emulated hosts (scripts/netem: network namespaces, veths, tc) need root;" \
    "run it as root (e.g. sudo $0 ...)" >&2
  [ "${NETEM_REQUIRED:-0}" = 1 ] && exit 1
  exit 0
}

# prepare_runs: what train.sh and tta.sh check and make before their runs (they define build,
# out, resume and threads): root, the two programs, OUT/{runs,logs}, a fresh OUT/runs.tsv unless
# --resume, out made absolute, and one compute thread per rank for both systems (OpenBLAS has
# its own pool, which torch does not set).
prepare_runs() {
  skip_unless_root
  gradsync_bin="$build/apps/gradsync/gradsync"
  [ -x "$gradsync_bin" ] || die "$gradsync_bin not found (build it: cmake --build $build --target gradsync)"
  [ -x "$python" ] || die "$python not found (PyTorch DDP needs the system python3-torch)"
  mkdir -p "$out/runs" "$out/logs"
  out="$(cd "$out" && pwd)"
  [ "$resume" -eq 1 ] || : >"$out/runs.tsv"
  touch "$out/runs.tsv"
  export OMP_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads"
}

# The commit measured, "+dirty" when tracked files differ from it (read-only git commands).
commit_id() {
  local id
  id="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  git -C "$repo" diff-index --quiet HEAD -- 2>/dev/null || id+="+dirty"
  echo "$id"
}

# The CPU count, ignoring OMP_NUM_THREADS (which GNU nproc honours and the runners set).
# shellcheck disable=SC2034  # used by the runners
host_nproc="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"

load_avg() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?'; }

# Wraps each command run inside an emulated host (sets GLOO_SOCKET_IFNAME for PyTorch's Gloo).
host_cmd=("$repo/scripts/experiments/in_host.sh")

# xrun LOG COMMAND...: runs COMMAND under `timeout` (timeout_s + 60: netem's own --timeout
# should come first), its output kept in LOG and its last line shown; appends "LOG: COMMAND" to
# run_commands. Returns the command's status (124/137: timed out).
run_commands=()
xrun() {
  local log="$1"
  shift
  local status=0
  mkdir -p "$(dirname "$log")"
  local words
  words="$(printf '%q ' "$@")"
  run_commands+=("$(basename "$log" .log): ${words% }")
  printf '+ %s\n' "${words% }" >"$log"
  timeout --kill-after=10 "$((timeout_s + 60))" "$@" >>"$log" 2>&1 || status=$?
  if [ "$status" -ne 0 ]; then
    echo "  FAILED (exit status $status), last lines of $log:" >&2
    tail -5 "$log" | sed 's/^/    /' >&2
  fi
  return "$status"
}

# write_setup FILE KEY=VALUE...: the setup of an experiment as JSON (values that look like
# numbers become numbers), plus "runs": the run_commands so far.
write_setup() {
  local file="$1"
  shift
  local args=()
  local kv run
  for kv in "$@"; do args+=(--set "$kv"); done
  for run in "${run_commands[@]}"; do args+=(--run "$run"); done
  "$python" "$report_py" setup --out "$file" "${args[@]}"
}

# gradsync_flags CONFIG: the `gradsync train` flags of a configuration name, into `flags`:
# fifo, wfbp, fusion:MB, p3[:...] -> --schedule; sync:S -> --sync S; ps -> --ps; dense -> none;
# any other name -> --compress NAME; "a+b" combines (e.g. p3+fp16).
gradsync_flags() {
  flags=()
  local part parts
  IFS=+ read -r -a parts <<<"$1"
  for part in "${parts[@]}"; do
    case "$part" in
      fifo | wfbp | fusion:* | p3 | p3:*) flags+=(--schedule "$part") ;;
      sync:*) flags+=(--sync "${part#sync:}") ;;
      ps) flags+=(--ps) ;;
      dense) ;;
      *) flags+=(--compress "$part") ;;
    esac
  done
}

# python_flags CONFIG: the flags of benchmarks/python/gs_train.py (gradsync from Python) for a
# configuration name as gradsync_flags reads it, into `flags`.
python_flags() {
  gradsync_flags "$1"
  local i
  for ((i = 0; i < ${#flags[@]}; i++)); do
    [ "${flags[$i]}" = --compress ] && flags[i]=--compression
  done
  return 0
}

# train_once MODEL RATE CONFIG: one training run of CONFIG ("ddp": PyTorch DDP; "py:NAME":
# gradsync's Python package, gs_train.py, with NAME's flags; else `gradsync train`) on the
# emulated hosts at RATE, with the caller's common arguments in the arrays ddp_args (also
# gs_train.py's) and gradsync_args; its JSON at OUT/runs/KEY.json, log at OUT/logs/KEY.log (KEY:
# MODEL-RATE-CONFIG, made file-safe), and one line appended to OUT/runs.tsv:
# MODEL RATE CONFIG SYSTEM STATUS JSON WALL_SECONDS. With --resume (resume=1), a run already
# recorded as ok is kept instead. Returns 0 even when the run failed.
train_once() {
  local model="$1" rate="$2" config="$3"
  local key="$model-$rate-${config//[^A-Za-z0-9.]/_}"
  if [ "$resume" -eq 1 ] && awk -F'\t' -v m="$model" -v r="$rate" -v c="$config" \
    '$1 == m && $2 == r && $3 == c && $5 == "ok" {found = 1} END {exit !found}' "$out/runs.tsv"; then
    echo "  $model $rate $config: kept (--resume)"
    return 0
  fi
  local json="$out/runs/$key.json" log="$out/logs/$key.log" system status=ok rc=0 start
  local net=("$netem" --hosts "$hosts" --rate "$rate" --timeout "$timeout_s")
  local cmd
  if [ "$config" = ddp ]; then
    system=ddp
    cmd=("${net[@]}" run -- "${host_cmd[@]}" "$python" "$repo/benchmarks/peers/ddp_train.py"
      --model "$model" "${ddp_args[@]}" --json "$json" --quiet)
  elif [ "${config#py:}" != "$config" ]; then
    system=gradsync-python
    python_flags "${config#py:}"
    cmd=("${net[@]}" run -- "${host_cmd[@]}" env "PYTHONPATH=$build/python" "$python"
      "$repo/benchmarks/python/gs_train.py" --model "$model" "${ddp_args[@]}" "${flags[@]}"
      --json "$json" --quiet)
  else
    system=gradsync
    gradsync_flags "$config"
    cmd=("${net[@]}" run -- "${host_cmd[@]}" "$gradsync_bin" train --model "$model"
      "${gradsync_args[@]}" "${flags[@]}" --compress-warmup 0 --metrics "$json" --quiet)
  fi
  rm -f "$json"
  start=$SECONDS
  xrun "$log" "${cmd[@]}" || rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    status=timeout
  elif [ "$rc" -ne 0 ]; then
    status="failed($rc)"
  elif [ ! -s "$json" ]; then
    status=no-json
  fi
  local where="runs/$key.json"
  [ "$status" = ok ] || where="logs/$key.log"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$model" "$rate" "$config" "$system" "$status" \
    "$where" "$((SECONDS - start))" >>"$out/runs.tsv"
  if [ "$status" = ok ]; then
    "$python" - "$json" "$system" "$model" "$rate" "$config" "$((SECONDS - start))" <<'PY'
import json, sys
path, system, model, rate, config, wall = sys.argv[1:]
d = json.load(open(path))
sps = d["samples_per_s"] if "samples_per_s" in d else d["summary"]["samples_per_s"]
dataset = d.get("dataset", d.get("config", {}).get("dataset"))
evals = d.get("evaluations") if dataset == "fashion-mnist" else []  # synthetic: meaningless
acc = f", final test accuracy {100 * evals[-1]['test_accuracy']:.2f}%" if evals else ""
print(f"  {model} {rate} {config}: {sps:,.0f} samples/s{acc} (run took {wall} s)")
PY
  else
    echo "  $model $rate $config: $status (log: $log)"
  fi
}
