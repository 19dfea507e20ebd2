#!/usr/bin/env bash
# whylogs' environment for benchmarks/table_peers.py: benchmarks/.venv-whylogs (gitignored), never a
# calwatch dependency. whylogs 1.6.4 (its last release, 2024-12; the project is no longer developed)
# does not import with numpy 2, so it gets its own venv with numpy 1.26, on the interpreter of the
# project's .venv (Python 3.11). The lock is the closure pip resolved for `whylogs==1.6.4 numpy<2
# pandas pyarrow`, installed with --no-deps, with one change: pyarrow pinned to 21.0.0 (the
# resolver's pyarrow 26 refuses numpy < 2 at import, as in drift_env.sh).
#
# Usage: bash benchmarks/whylogs_env.sh   (idempotent: a stamp holding the lock skips a rebuild)
set -euo pipefail
cd "$(dirname "$0")"
VENV=.venv-whylogs
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x ../.venv/bin/python ]]; then
    PYTHON="$(../.venv/bin/python -c 'import sys; print(sys._base_executable)')"
  else
    PYTHON=python3
  fi
fi

LOCK='backoff==2.2.1 certifi==2026.10.19.post1 charset-normalizer==3.5.3 idna==3.20 numpy==1.26.4
pandas==3.0.6 platformdirs==3.11.0 protobuf==7.36.2 pyarrow==21.0.0 python-dateutil==4.0.0
requests==2.34.2 typing_extensions==4.16.0 tzdata==2026.6 urllib3==2.8.0 whylabs-client==0.6.16
whylogs==1.6.4 whylogs-sketching==3.4.1.dev3'

STAMP="$VENV/.stamp-lock"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$LOCK" ]]; then
  echo "benchmarks/$VENV is up to date"
  exit 0
fi

start=$SECONDS
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
quiet() { grep -v 'is ignored: it is neither a file nor a directory' || true; }  # local index noise
# shellcheck disable=SC2086  # the lock is a whitespace-separated list of requirements
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps $LOCK 2>&1 | quiet
{ "$VENV/bin/python" -m pip check || true; } 2>&1 | quiet
WHYLOGS_NO_ANALYTICS=True "$VENV/bin/python" -c '
import importlib.metadata as md
import pyarrow.parquet, whylogs  # noqa: E401 - fail here, not later
print(", ".join(f"{n} {md.version(n)}" for n in ("whylogs", "numpy", "pandas", "pyarrow")))'
printf '%s' "$LOCK" >"$STAMP"
echo "benchmarks/$VENV built in $((SECONDS - start)) s"
