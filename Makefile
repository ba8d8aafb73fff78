# Quick start:   make train   (set up .venv with what the main job needs, run it)
#                make test    (set up .venv with every extra the tests use, run the test suite)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
TEST_EXTRAS := dev,tasks,onnx,plot,search,mlflow,wandb,cv2,lightning

.PHONY: setup setup-test train test test-fast lint format bench clean

setup: $(STAMP)

setup-test: $(TEST_STAMP)

$(STAMP): setup.cfg pyproject.toml constraints-ci.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -c constraints-ci.txt torch==2.13.0
	$(PY) -m pip install -q -c constraints-ci.txt -e '.[tasks]'
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)  # the heavy optional extras (ONNX, MLflow, W&B, ...) install for the tests only
	$(PY) -m pip install -q -c constraints-ci.txt -e '.[$(TEST_EXTRAS)]'
	touch $(TEST_STAMP)

train: setup  # each run gets its own work dir (a rerun never mixes with an earlier run)
	$(PY) tools/run_train.py --cfg configs/cate_recognition/digits_mlp.yaml SOLVER.WORK_DIR=work_dir/digits_mlp/$$(date +%Y%m%d-%H%M%S)

# pytest-xdist workers of make test (0: the whole suite in pytest's own process); three on two cores: a third of
# the suite's time is spent waiting (processes starting, ranks meeting), which the third worker fills
TEST_WORKERS ?= 3

test: setup-test  # everything (CI): the tests that start processes too
	$(PY) -m pytest -q -n $(TEST_WORKERS)

test-fast: setup-test  # while working: the tests that run in this process (tests/conftest.py marks the rest slow)
	$(PY) -m pytest -q -m "not slow" -n auto

lint: setup-test  # ruff, and mypy on the core's annotated API (pyproject.toml [tool.mypy])
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . && $(VENV)/bin/mypy

format: setup-test
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

bench: setup-test  # the figures of benchmarks/results/ (run on an idle machine; ~15 minutes)
	$(PY) benchmarks/overhead.py
	$(PY) benchmarks/startup.py
	$(PY) benchmarks/checkpoint.py
	$(PY) benchmarks/ddp.py
	$(PY) benchmarks/preemption.py

clean:
	rm -rf $(VENV) work_dir
