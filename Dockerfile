# syntax=docker/dockerfile:1
# LSMT images; docs/deploy.md explains building and running them. Targets:
#   server       CPU translation server: the `serve` extra only (no torch), default model inside
#   server-cuda  the same server for GPU hosts (adds cuBLAS 12; the host's driver comes in at run)
#   cluster      the cluster application on Ray Serve (adds ray[serve]): KubeRay's pods
#   train        training and export: torch 2.13.0 (CPU wheel) and the `train` extra
#   loadtest     locust with loadtests/locustfile.py (the compose `loadtest` profile)
# tests/test_image_install.py replays the server-build and server stages in a fresh virtualenv,
# so keep their COPY and RUN lines plain (one command each, no shell tricks).

FROM python:3.11-slim-bookworm AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
RUN useradd --create-home --uid 10001 --user-group lsmt
WORKDIR /app

# ---------------------------------------------------------------------------------------------
# The server's virtualenv, built from the package (not editable) and copied into `server`, so
# sources and build leftovers stay out of the final image.
FROM base AS server-build
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY pyproject.toml README.md ./
# The shared contracts, the bundle package and the server: no training or export code
# (tests/test_layout.py).
COPY lsmt_core ./lsmt_core
COPY lsmt_bundle ./lsmt_bundle
COPY server ./server
# postgres: the driver for a PostgreSQL keys database (LSMT_KEYS_DB=postgresql://...)
RUN --mount=type=cache,target=/root/.cache/pip pip install './[serve,postgres]'

# ---------------------------------------------------------------------------------------------
FROM base AS server
COPY --from=server-build /opt/venv /opt/venv
# models/default is the bundled default model (MODEL_CARD.md). More bundles: mount them under
# /models and name them in LSMT_BUNDLES (e.g. /app/models/default,/models/mine).
COPY models/default ./models/default
# The package lives in the venv, so the server cannot find models/ relative to its source.
ENV PATH=/opt/venv/bin:$PATH \
    LSMT_DEFAULT_BUNDLE_DIR=/app/models/default
USER 10001:10001
EXPOSE 8000
# /readyz answers 200 once every bundle is open and verified and the warm-up routes have
# translated once (the first route of each bundle unless LSMT_WARMUP_ROUTES says otherwise);
# 503 before. Engines load lazily, so the start period covers that warm-up, not every route.
# server.healthcheck probes the port the server was started with (`--port` in this CMD or the
# one a `docker run` gives). No --start-interval: podman's buildah (4.3) refuses the flag.
# podman keeps a HEALTHCHECK only in Docker's image format: `podman build --format docker`.
HEALTHCHECK --interval=10s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-m", "server.healthcheck"]
# SIGTERM: stop accepting, finish in-flight requests (LSMT_GRACEFUL_TIMEOUT_S, default 30 s),
# exit 0. Give the container longer than that to stop (docker run --stop-timeout 40; compose
# stop_grace_period).
CMD ["python", "-m", "server", "--host", "0.0.0.0", "--port", "8000"]

# ---------------------------------------------------------------------------------------------
# GPU hosts (run with --gpus or the compose GPU override). The ctranslate2 wheel carries CUDA 12
# (runtime linked in, built with 12.8) and opens libcublas.so.12 at run time; cuDNN is not needed
# for text models. cuBLAS comes as NVIDIA's wheel rather than a CUDA base image because the
# project needs Python 3.11, which the Ubuntu-based CUDA images do not ship.
FROM server AS server-cuda
USER 0:0
RUN --mount=type=cache,target=/root/.cache/pip pip install nvidia-cublas-cu12==12.8.4.1
USER 10001:10001
ENV LD_LIBRARY_PATH=/opt/venv/lib/python3.11/site-packages/nvidia/cublas/lib \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    LSMT_DEVICE=cuda

# ---------------------------------------------------------------------------------------------
# The cluster application (server.cluster) for the head and worker pods of a KubeRay RayService
# (deploy/kuberay/rayservice.yaml): the server's packages plus the cluster extra.
FROM server-build AS cluster-build
RUN --mount=type=cache,target=/root/.cache/pip pip install './[serve,postgres,cluster]'

FROM base AS cluster
COPY --from=cluster-build /opt/venv /opt/venv
COPY models/default ./models/default
COPY deploy/serve.yaml ./deploy/serve.yaml
# KubeRay starts Ray in a login shell, whose /etc/profile resets PATH: link the entry points
# where that PATH looks. The config binds loopback (a local run); a container listens on every
# interface, so the image rewrites that one line (and fails to build if it is not there).
RUN ln -s /opt/venv/bin/ray /opt/venv/bin/serve /usr/local/bin/ \
    && sed -i 's/^  host: 127\.0\.0\.1$/  host: 0.0.0.0/' deploy/serve.yaml \
    && grep -qx '  host: 0.0.0.0' deploy/serve.yaml
ENV PATH=/opt/venv/bin:$PATH \
    LSMT_DEFAULT_BUNDLE_DIR=/app/models/default
USER 10001:10001
# Serve's HTTP proxy. KubeRay replaces the command with `ray start`; alone, the image runs the
# application on a one-container Ray.
EXPOSE 8000
CMD ["serve", "run", "deploy/serve.yaml"]

# ---------------------------------------------------------------------------------------------
# Training and export. torch comes from PyTorch's CPU index: PyPI's Linux torch pulls gigabytes
# of CUDA packages. Mount data/, runs/ and models/ to keep what it produces.
FROM base AS train
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install --index-url "${TORCH_INDEX_URL}" torch==2.13.0
COPY pyproject.toml README.md ./
COPY lsmt_core ./lsmt_core
COPY lsmt_bundle ./lsmt_bundle
COPY model_export ./model_export
COPY server ./server
COPY lsmt_text ./lsmt_text
COPY training ./training
COPY lsmt_study ./lsmt_study
COPY scripts ./scripts
# Installed from a copy of the sources, whose build leftovers are removed with it.
RUN --mount=type=cache,target=/root/.cache/pip pip install './[train]' \
    && rm -rf build ./*.egg-info
RUN mkdir -p data runs models && chown lsmt:lsmt data runs models
USER 10001:10001
CMD ["python", "-m", "training.train", "--help"]

# ---------------------------------------------------------------------------------------------
FROM base AS loadtest
# Same pin as the dev extra in pyproject.toml (tests/test_deploy.py checks).
RUN --mount=type=cache,target=/root/.cache/pip pip install locust==2.47.0
COPY loadtests/locustfile.py ./loadtests/
USER 10001:10001
EXPOSE 8089
CMD ["locust", "-f", "loadtests/locustfile.py"]
