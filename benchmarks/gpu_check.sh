#!/usr/bin/env bash
# One command for a short GPU slot (at most 9 minutes): GPU tests, paper-size StyleGAN speed and memory, the JVP
# rate, the classifier loop, every chapter's paper dry run, then the GPU-tier generators with the time left; all in
# one folder of at most 8 files (summary.json, log.txt, CSV rows, generator tars). See benchmarks/gpu_check.py.
#
#   bash benchmarks/gpu_check.sh OUT_DIR               # on the GPU machine (or OUT=DIR bash benchmarks/gpu_check.sh)
#   bash benchmarks/gpu_check.sh --rehearse OUT_DIR    # the same steps on the CPU with tiny sizes (about a minute)
#
# Python: $PYTHON if set, else the project's .venv, else python3.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
exec "$PYTHON" benchmarks/gpu_check.py "$@"
