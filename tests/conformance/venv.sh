# Sourced by the scripts that drive the official Python SDKs: makes sure the
# virtual environment at $VENV has `anthropic`, `openai` and `google-genai`
# (imported as `google.genai`), installing them
# from PyPI (or $PIP_INDEX_URL) when needed. When that index cannot be
# reached the check is skipped through skip_check (tests/conformance/skip.sh):
# a failure under CI=true, a "SKIPPED: …" line elsewhere. Needs $VENV,
# $PYTHON and $CHECK (the name of the check, for that line).
. "$(dirname "${BASH_SOURCE[0]}")/skip.sh"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import anthropic, openai, google.genai" 2>/dev/null; then
    index="${PIP_INDEX_URL:-https://pypi.org/simple}"
    if ! why=$(INDEX_URL="$index" "$PYTHON" - 2>&1 <<'PY'
import os, urllib.request
urllib.request.urlopen(os.environ["INDEX_URL"].rstrip("/") + "/anthropic/", timeout=15).read(1)
PY
    ); then
        skip_check "$CHECK" "the package index $index is unreachable, and the official SDKs come from there ($(printf '%s' "$why" | tail -n1))"
    fi
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade anthropic openai google-genai
fi
