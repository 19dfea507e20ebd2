#!/usr/bin/env bash
# The competitors' environment for benchmarks/shift_table.py: benchmarks/.venv-drift (gitignored),
# never a calwatch dependency. NannyML 0.13.1, Evidently 0.7.23 and alibi-detect 0.13.0 (its online
# MMD detector runs on the PyTorch backend: the CPU wheel torch==2.13.0+cpu from the local wheel
# folder, never CUDA torch) in one venv, on the interpreter of the project's .venv (Python 3.11).
#
# The lock below is the full closure pip resolved for
#   nannyml==0.13.1 evidently==0.7.23 alibi-detect[torch]==0.13.0 torch==2.13.0
# installed with --no-deps, with two changes. FLAML's AutoML extra (which NannyML imports at
# import time) declares xgboost, whose Linux wheel declares the CUDA library nvidia-nccl-cu12
# (~300 MB); xgboost-cpu 2.1.4 ships the same `xgboost` module for the CPU alone and needs neither.
# And pyarrow is pinned to 21.0.0: the resolver's pyarrow 26 declares no numpy requirement but
# refuses numpy < 2 at import, and alibi-detect 0.13.0 needs numpy < 2.
#
# Usage: bash benchmarks/drift_env.sh   (idempotent: a stamp holding the lock skips a rebuild)
set -euo pipefail
cd "$(dirname "$0")"
VENV=.venv-drift
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x ../.venv/bin/python ]]; then
    PYTHON="$(../.venv/bin/python -c 'import sys; print(sys._base_executable)')"
  else
    PYTHON=python3
  fi
fi

LOCK='aiobotocore==3.10.0 aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aioitertools==0.13.0 aiosignal==1.4.0
alibi-detect==0.13.0 annotated-doc==0.0.7 annotated-types==0.8.0 anyio==4.16.0 appdirs==1.4.4
APScheduler==3.11.3 attrs==26.1.0 botocore==1.43.117 catalogue==2.0.10 category_encoders==2.11.2
certifi==2026.10.18 cffi==2.1.1 charset-normalizer==3.5.2 click==8.5.1 cloudpickle==3.1.2
contourpy==1.3.3 cryptography==50.0.2 cycler==0.12.1 decorator==5.3.1 defusedxml==0.7.1
deprecation==2.1.0 dill==0.3.9 distro==1.9.0 dynaconf==3.3.5 evidently==0.7.23 Faker==40.54.0
filelock==4.2.11 FLAML==2.7.0 fonttools==4.68.0 formulaic==1.2.2 frozenlist==1.8.0 fsspec==2026.9.0
gcsfs==2026.10.1 google-api-core==2.44.0 google-auth==2.62.2 google-auth-oauthlib==1.5.0
google-cloud-core==2.8.0 google-cloud-storage==3.17.1 google-cloud-storage-control==1.17.0
google-crc32c==1.9.0 google-resumable-media==2.11.0 googleapis-common-protos==1.76.0
grpc-google-iam-v1==0.14.6 grpcio==1.85.1 grpcio-status==1.85.1 h11==0.16.0 hf-xet==1.8.0
httpcore==1.0.9 httptools==0.9.0 httpx==0.28.1 huggingface_hub==0.36.2 idna==3.20 ImageIO==2.38.1
interface_meta==2.0.1 iterative-telemetry==0.0.10 Jinja2==3.1.6 jmespath==1.1.0 joblib==1.6.0
kaleido==0.2.1 kiwisolver==1.5.1 lazy-loader==0.6 lightgbm==4.5.0 litestar==2.25.0
litestar-htmx==0.5.0 llvmlite==0.42.0 markdown-it-py==4.3.0 MarkupSafe==3.0.4 matplotlib==3.11.2
mdurl==0.1.2 mpmath==1.3.0 msgspec==0.22.0 multidict==7.2.1 multipart==2.0.1 mypy_extensions==1.2.0
nannyml==0.13.1 narwhals==2.29.0 networkx==3.6.1 nltk==3.10.4 numba==0.59.1 numpy==1.26.4
oauthlib==4.0.1 opencv-python==4.11.0.86 opentelemetry-api==1.45.2 opentelemetry-proto==1.45.2
packaging==26.3 pandas==2.3.3 patsy==1.0.3 pillow==10.4.0 plotly==5.24.1 polyfactory==3.5.0
propcache==0.5.4 proto-plus==1.29.0 protobuf==7.36.2 pyarrow==21.0.0 pyasn1==0.6.5
pyasn1_modules==0.4.2 pycparser==3.12 pydantic==2.14.3 pydantic_core==2.50.4 pyfiglet==0.8.post1
Pygments==2.21.0 PyJWT==2.15.1 pyparsing==3.3.3 python-dateutil==2.9.0.post0 python-dotenv==1.2.4
pytz==2026.6 PyYAML==6.0.3 regex==2026.11.15 requests==2.34.2 requests-oauthlib==2.0.0 rich==15.0.0
rich-click==1.9.9 s3fs==2026.9.0 safetensors==0.8.0 scikit-image==0.24.0 scikit-learn==1.9.1
scipy==1.17.1 seaborn==0.13.2 segment-analytics-python==2.4.0 setuptools==84.2.1 shellingham==1.5.4
six==1.17.0 sniffio==1.3.1 statsmodels==0.15.0 sympy==1.14.0 tenacity==9.2.1 threadpoolctl==3.8.0
tifffile==2026.3.3 tokenizers==0.22.2 toml==0.10.2 torch==2.13.0+cpu tqdm==4.70.1
transformers==4.57.6 typer==0.29.2 typing-inspect==0.9.0 typing-inspection==0.4.5
typing_extensions==4.16.0 tzdata==2026.6 tzlocal==5.4.5 ujson==6.1.0 urllib3==2.8.0 uuid6==2025.0.1
uvicorn==0.54.0 uvloop==0.23.0 watchdog==7.1.0 watchfiles==1.3.0 websockets==17.4 wrapt==2.5.2
xgboost-cpu==2.1.4 yarl==1.25.1'

STAMP="$VENV/.stamp-lock"
if [[ -f "$STAMP" ]] && [[ "$(cat "$STAMP")" == "$LOCK" ]]; then
  echo "benchmarks/$VENV is up to date"
  exit 0
fi

start=$SECONDS
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps)
quiet() { grep -v 'is ignored: it is neither a file nor a directory' || true; }  # local index noise
FIND_LINKS=()
if [[ -d /opt/wheels ]]; then
  FIND_LINKS=(--find-links /opt/wheels)
fi
# torch first, from the CPU wheel alone (--no-index: pip may never reach for a CUDA build).
"${PIP[@]}" --no-index "${FIND_LINKS[@]}" torch==2.13.0+cpu 2>&1 | quiet
# shellcheck disable=SC2086  # the lock is a whitespace-separated list of requirements
"${PIP[@]}" "${FIND_LINKS[@]}" $LOCK 2>&1 | quiet
{ "$VENV/bin/python" -m pip check || true; } 2>&1 | quiet
"$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
import warnings

warnings.filterwarnings("ignore")
import alibi_detect.cd, evidently.presets, nannyml, pyarrow, torch  # noqa: E401,F401 - fail here, not later

print(", ".join(f"{n} {md.version(n)}" for n in ("nannyml", "evidently", "alibi-detect", "torch", "numpy", "pandas")))
EOF
printf '%s' "$LOCK" >"$STAMP"
echo "benchmarks/$VENV built in $((SECONDS - start)) s"
