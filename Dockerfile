# LSMT translation server: CTranslate2 engines on CPU (or CUDA when the host has a GPU).
# The image holds the `serve` extra only: no torch, no training code dependencies.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
RUN useradd --create-home --uid 10001 lsmt

COPY pyproject.toml README.md ./
COPY model_export ./model_export
COPY server ./server
# The server reads the corpus text normalisation and language table from training.data
# (standard library only); nothing there imports torch.
COPY training ./training
RUN pip install '.[serve]'

# models/default is the bundled default model (see MODEL_CARD.md); the server serves it when
# started without a bundle directory.
COPY models ./models

USER lsmt
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status != 200)"]
# uvicorn handles SIGTERM gracefully: stops accepting, finishes in-flight requests, exits.
CMD ["python", "-m", "server", "--host", "0.0.0.0", "--port", "8000"]
