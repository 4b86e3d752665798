"""Run a check in Triton's interpreter on this CPU: a subprocess, because TRITON_INTERPRET is
read when triton is imported. The check is ``tests.MODULE.FUNCTION(*args)``; it returns a
JSON-able value (the cases it checked), which comes back."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def interpreted(module: str, function: str, *args):
    """``tests.module.function(*args)`` run under TRITON_INTERPRET=1; its JSON answer."""
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    code = (f"import json; from tests.{module} import {function}; "
            f"print(json.dumps({function}(*json.loads({json.dumps(json.dumps(args))}))))")
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"interpreter check {module}.{function} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
