# Two commands on a fresh machine: `make serve` and `make test`. Every target installs what it
# needs into a local virtualenv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# torch is pinned: an unpinned torch resolves to gigabytes of CUDA wheels; 2.13.0 is the CPU build.
TORCH := torch==2.13.0
HOST ?= 127.0.0.1
PORT ?= 8000
# Bundle directories to serve; empty = the bundled default model (models/default).
BUNDLES ?=

.PHONY: serve serve-cluster cluster-status cluster-stop test test-fast lint format install-serve install-all install-browser \
	install-gettext install-promtool install-libreoffice install-podman image-check \
	corpus tokenizer default-model clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.serve-installed: pyproject.toml | $(PY)
	$(PIP) install --quiet -e '.[serve]'
	touch $@

$(VENV)/.cluster-installed: pyproject.toml | $(PY)
	$(PIP) install --quiet -e '.[serve,cluster]'
	touch $@

$(VENV)/.all-installed: pyproject.toml | $(PY)
	$(PIP) install --quiet $(TORCH)
	$(PIP) install --quiet -e '.[serve,train,dev]'
	touch $@ $(VENV)/.serve-installed

install-serve: $(VENV)/.serve-installed
install-all: $(VENV)/.all-installed

# Tools some tests drive, from Debian: installed when missing and apt-get can run (CI: root on
# a fresh Debian); otherwise those tests are skipped with the reason rather than failing the
# whole run. $(call apt-tool,COMMAND,PACKAGE,TESTS)
define apt-tool
	@if command -v $(1) >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		echo "installing $(2) for the $(3)"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends $(2) >/dev/null; } \
		|| echo "$(2) could not be installed: the $(3) will be skipped"; \
	else echo "no $(2) and no apt-get as root: the $(3) will be skipped"; fi
endef

# The web page tests drive Debian's chromium through Playwright (which cannot download its own
# browsers); LSMT_TEST_CHROMIUM names another one.
install-browser:
	$(if $(LSMT_TEST_CHROMIUM),@:,$(call apt-tool,chromium,chromium,web page tests))

# The .po tests make their catalogues with gettext's own tools (xgettext, msginit) and check
# the output with msgfmt.
install-gettext:
	$(call apt-tool,msgfmt,gettext,.po tests)

# The office round-trip tests have LibreOffice write .odt, .docx and .pptx files, translate them
# and open the translations again (90 MB download, 279 MB installed).
install-libreoffice:
	$(call apt-tool,soffice,libreoffice-writer-nogui libreoffice-impress-nogui,LibreOffice round-trip tests)

# The alert rules are checked and unit-tested by promtool, and the dashboard's queries run
# against a real Prometheus scraping a real server (Debian's prometheus package has both).
install-promtool:
	$(call apt-tool,promtool,prometheus,alert rule and dashboard tests)

# The container check builds and runs the images on podman (Debian's, with runc; debootstrap
# builds the Python base image where no registry is reachable) when no Docker daemon answers;
# where podman installs but cannot run a container, the check says so and is skipped.
install-podman:
	$(call apt-tool,podman,podman runc debootstrap,container image check)

# The images built and run on a real engine, step by step (scripts/image_check.py, docs/deploy.md):
# docker if its daemon answers, else podman. STEPS=server: the server image only (what the
# test suite runs: 77-155 s of `make test` on a fresh machine, docs/deploy.md).
STEPS ?= all
image-check: $(VENV)/.all-installed
	$(PY) -m scripts.image_check --steps $(STEPS)

serve: $(VENV)/.serve-installed
	$(PY) -m server --host $(HOST) --port $(PORT) $(BUNDLES)

# The cluster application (server.cluster) on a local Ray: Serve's proxy on 127.0.0.1:8000, the
# ingress and two translator replicas (deploy/serve.yaml). Settings: LSMT_* in the environment.
# Ray 2.60 starts a local cluster with token authentication: its CLIs must be told to use it.
RAY_CLI = RAY_AUTH_MODE=token $(VENV)/bin

serve-cluster: $(VENV)/.cluster-installed
	@echo "from another shell: make cluster-status (what runs), make cluster-stop (stop it all)"
	$(VENV)/bin/serve run deploy/serve.yaml

cluster-status:
	$(RAY_CLI)/serve status
	$(RAY_CLI)/ray status

cluster-stop:
	-pkill -TERM -f "[s]erve run deploy/serve.yaml"  # [s]: not this shell; Ray stopped after
	-@for i in $$(seq 60); do pgrep -f "[s]erve run deploy/serve.yaml" >/dev/null || exit 0; \
		sleep 1; done; echo "serve run did not stop within 60 s"; exit 1
	$(RAY_CLI)/ray stop

# pytest exits 5 when it collected nothing: a failure here, not a pass.
define pytest
	$(PY) -m pytest $(1); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc
endef

# Every tier: unit, integration (servers, browsers, engines) and slow (model trainings).
test: lint install-browser install-gettext install-promtool install-libreoffice install-podman
	$(call pytest,)

# The unit tier only (tests that are neither `integration` nor `slow`): a quick check while
# developing, not a substitute for `make test`.
test-fast: $(VENV)/.all-installed
	$(call pytest,-m "not integration and not slow")

lint: $(VENV)/.all-installed
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

format: $(VENV)/.all-installed
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

corpus: $(VENV)/.all-installed
	$(PY) -m lsmt_text.data build --out data/corpus

tokenizer: corpus
	$(PY) -m lsmt_text.tokenizer train --data data/corpus --out data/tokenizer

default-model: $(VENV)/.all-installed
	PY=$(PY) scripts/build_default_model.sh

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
