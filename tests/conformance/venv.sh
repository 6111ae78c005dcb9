# Sourced by the scripts that drive the official Python SDKs: makes sure the
# virtual environment at $VENV has `anthropic` and `openai`, installing them
# from PyPI when needed. Prints "SKIPPED: <reason>" and exits 0 when PyPI
# cannot be reached (the SDKs come from there). Needs $VENV and $PYTHON.
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import anthropic, openai" 2>/dev/null; then
    if ! "$PYTHON" -c "import urllib.request; urllib.request.urlopen('${PIP_INDEX_URL:-https://pypi.org/simple}'.rstrip('/') + '/anthropic/', timeout=15).read(1)" 2>/dev/null; then
        echo "SKIPPED: PyPI is unreachable (the official SDKs come from there)"
        exit 0
    fi
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade anthropic openai
fi
