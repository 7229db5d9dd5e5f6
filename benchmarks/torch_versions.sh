#!/usr/bin/env bash
# Which torch versions the trainer works on: one venv per version from the package registry (the
# default wheel is the CUDA build, ~4.6 GB installed, several minutes; it runs on a machine without a
# GPU), the trainer's CPU tests in each, and a table of the results. Outside CI.
#
#   benchmarks/torch_versions.sh [VERSION ...]        (default: 2.11.0 2.13.0 2.14.1 2.15.0)
#
# VENVS (default ~/.cache/fsdp-tui/torch-venvs) holds the venvs; one that exists is reused, so a second
# run only tests. Each venv imports this checkout (pip install -e), so the table is this tree's.
# PYTEST_ARGS (default: tests/trainer -m "not gpu"; words split on spaces) picks what runs. A pip constraint file that caps
# torch (PIP_CONSTRAINT, or one named in pip's config) is lifted for these installs only.
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENVS="${VENVS:-$HOME/.cache/fsdp-tui/torch-venvs}"
PYTHON="${PYTHON:-python3}"
ARGS=(tests/trainer -m "not gpu")
[ -n "${PYTEST_ARGS:-}" ] && read -r -a ARGS <<< "$PYTEST_ARGS"
VERSIONS=("$@")
[ ${#VERSIONS[@]} -eq 0 ] && VERSIONS=(2.11.0 2.13.0 2.14.1 2.15.0)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"  # this checkout, whichever one a venv was built from
mkdir -p "$VENVS"
rows=()
for v in "${VERSIONS[@]}"; do
  venv="$VENVS/torch-$v"
  log="$VENVS/torch-$v.log"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$v')" 2>/dev/null; then
    echo "== torch $v: building $venv (log: $log)" >&2
    rm -rf "$venv"
    if ! { "$PYTHON" -m venv "$venv" && PIP_CONSTRAINT=/dev/null "$venv/bin/pip" install -q \
        "torch==$v" -e "$ROOT[trainer,test]"; } > "$log" 2>&1; then
      why="$(grep -E '^ERROR' "$log" | head -1 | cut -c1-100)"
      rows+=("| $v | - | - | does not install: ${why:-see $log} |")
      continue
    fi
  fi
  echo "== torch $v: ${ARGS[*]}" >&2
  out="$VENVS/torch-$v.pytest.txt"
  (cd "$ROOT" && "$venv/bin/python" -m pytest -q -p no:cacheprovider -rf "${ARGS[@]}") > "$out" 2>&1
  summary="$(grep -E '^=+ .*(passed|failed|error).* =+$|^[0-9]+ (passed|failed)' "$out" | tail -1 | tr -d '=' | xargs)"
  passed="$(grep -oE '[0-9]+ passed' <<< "$summary" | cut -d' ' -f1)"
  failed="$(grep -oE '[0-9]+ (failed|error)' <<< "$summary" | awk '{s+=$1} END {print s+0}')"
  failures="$(grep -E '^(FAILED|ERROR) ' "$out" | sed -E 's/^(FAILED|ERROR) tests\/trainer\///; s/ - .*//' | paste -sd ';' - | sed 's/;/; /g')"
  rows+=("| $("$venv/bin/python" -c 'import torch; print(torch.__version__)') | ${passed:-0} | ${failed:-0} | ${failures:--} |")
done
echo "| torch | passed | failed | failures |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
