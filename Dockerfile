# The llm-operator image: the operator (`llm-operator run`, what the Helm chart runs) and
# the source the tuning Job's init container copies the tuner from (`python3 -c ...`, see
# operator/llm_operator/tuning/job.py). Built and pushed to your registry by
# `bash tools/push_image.sh REGISTRY/REPO:TAG` (docker, else buildah), or by hand:
# `docker build -t llm-operator:dev .` (the build context is what .dockerignore lets
# through: pyproject.toml, README.md and operator/). BASE: any Debian-like Python 3.11
# image with pip and venv; tools/build_images.sh builds one from Debian's packages for
# the nodes test tier, where no registry of base images is reachable.
#
# Runs as UID/GID 65532 (the chart's podSecurityContext) on a read-only root filesystem:
# nothing is written at run time except under /tmp (HOME), which the chart mounts as an
# emptyDir. Both stages use the same base, because the venv's python is a symlink to the
# base image's python3.

ARG BASE=python:3.11-slim

FROM ${BASE} AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/

# A real wheel (not an editable install), then the wheel with its dependencies in a venv;
# pip byte-compiles it here, so nothing needs writing at run time. The hub extra
# (huggingface_hub): the operator's facts Job runs `llm-operator facts` in this image.
RUN pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/venv \
 && for wheel in /wheels/llm_operator-*.whl; do /opt/venv/bin/pip install "${wheel}[hub]"; done \
 && /opt/venv/bin/llm-operator --help >/dev/null \
 && /opt/venv/bin/python -c "import llm_operator.inpod.tuner.main" \
 && /opt/venv/bin/python -c "import huggingface_hub"


FROM ${BASE}

ARG VERSION=0.0.0-dev
ARG REVISION=unknown

LABEL org.opencontainers.image.title="llm-operator" \
      org.opencontainers.image.description="Kubernetes operator that deploys LLMs with vLLM and keeps their batch settings tuned" \
      org.opencontainers.image.source="https://github.com/llmops-dev/llm-operator" \
      org.opencontainers.image.url="https://github.com/llmops-dev/llm-operator" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"

# An /etc/passwd entry for the numeric user the chart runs as (some libraries look the
# user up); no home directory: HOME is /tmp. --no-log-init: a high UID would otherwise
# grow /var/log/lastlog and faillog to megabytes in the layer.
RUN groupadd --system --gid 65532 llmop \
 && useradd --system --no-log-init --uid 65532 --gid 65532 --no-create-home \
      --home-dir /tmp --shell /usr/sbin/nologin llmop

COPY --from=builder /opt/venv /opt/venv

# `python3` on PATH is the venv's: the tuning Job's init container runs
# `python3 -c COPY_SCRIPT`, which imports llm_operator to find the tuner.
ENV PATH="/opt/venv/bin:${PATH}" \
    VIRTUAL_ENV=/opt/venv \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp

USER 65532:65532
WORKDIR /tmp

ENTRYPOINT ["llm-operator"]
CMD ["run"]
