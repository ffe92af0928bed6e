#!/usr/bin/env python3
"""CTest's entry to the Python tests (tests/CMakeLists.txt): pytest on tests/python with the
package from python/ and libcoda.so from $CODA_LIBRARY (set by CTest to the one just built).

Exits 77, which CTest reports as skipped, with a message when torch or pytest is not installed.
Extra arguments go to pytest (e.g. -k swiglu).
"""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
root = here.parent.parent

missing = [m for m in ("torch", "pytest") if importlib.util.find_spec(m) is None]
if missing:
    print(f"coda: Python tests skipped: {' and '.join(missing)} not installed "
          f"(pip install torch pytest; then pip install --no-build-isolation -e {root})")
    sys.exit(77)

env = dict(os.environ)
env["PYTHONPATH"] = os.pathsep.join([str(root / "python"), *filter(None, [env.get("PYTHONPATH")])])
env.setdefault("PYTHONDONTWRITEBYTECODE", "1")  # keep the source tree clean
cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(here),
       *sys.argv[1:]]
rc = subprocess.call(cmd, env=env, cwd=here)
if rc == 5:  # pytest: no test collected; a suite that ran nothing must not pass
    print("coda: pytest collected no test")
    sys.exit(1)
sys.exit(rc)
