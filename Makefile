# anonpaper: the two set-up commands are `make book` and `make test` (see README.md).
PROFILE ?= quick
VENV ?= .venv
PYTHON_BASE ?= python3
PY := $(VENV)/bin/python
ANONPAPER := $(VENV)/bin/anonpaper
# Never fetch weights or data at run time; the cache lives where the user says (default ~/.cache/anonpaper).
export HF_HUB_OFFLINE := 1

.PHONY: install book read reproduce test test-unit test-notebooks clean-runs gpu-check

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON_BASE) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, from the pinned CUDA build (runs on CPU too); then the package and its test tools. Every library at
	# the version the published results were computed with (constraints.txt: the phantoms' pixels depend on them).
	$(PY) -m pip install --quiet -c constraints.txt torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $@

install: $(VENV)/.installed

## Reproduce the study on the phantoms at $(PROFILE) and build the book (runs/$(PROFILE)/book/_build/html).
book: install
	$(ANONPAPER) reproduce --profile $(PROFILE)

## Read the book without rerunning anything: build it from the executed notebooks committed in results/$(PROFILE)/
## (written by `anonpaper publish --profile $(PROFILE)`) into runs/results-$(PROFILE)/book/_build/html.
read: install
	$(ANONPAPER) book --profile $(PROFILE) --results

## Unit tests, every notebook at the smoke profile through the runner, assertions on their records, strict book.
test: install
	$(PY) -m pytest -m "not notebooks" --doctest-modules anonpaper tests
	# The numerics-sensitive tests again with the CPU kernels capped at AVX2 (what an AVX2-only processor runs):
	# oneDNN's, ATen's and NumPy's.
	ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL" \
		$(PY) -m pytest -m numerics -p no:cacheprovider tests
	$(ANONPAPER) reproduce --profile smoke
	$(PY) -m pytest -m notebooks tests

## One command for a short GPU slot (at most 9 minutes): GPU tests, paper-size benchmarks, dry runs, generators,
## all into OUT (at most 8 files; see benchmarks/gpu_check.py). REHEARSE=1: the same steps on the CPU, tiny sizes.
gpu-check:
	bash benchmarks/gpu_check.sh $(if $(REHEARSE),--rehearse) $(OUT)

clean-runs:
	rm -rf runs/
