"""Run a command and record its peak resident memory (largest over the process tree's waited-for processes).

Usage: python -m bench.perf.peak_rss OUT.json LABEL -- command args...
Appends {"label", "command", "peak_rss_mb", "seconds", "returncode"} as one JSON line to OUT.json.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time


def main() -> None:
    out, label, sep, *command = sys.argv[1:]
    if sep != "--" or not command:
        raise SystemExit(__doc__)
    t0 = time.perf_counter()
    returncode = subprocess.call(command)
    seconds = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # Linux: kilobytes
    record = {
        "label": label,
        "command": " ".join(command),
        "peak_rss_mb": round(peak_kb / 1024, 1),
        "seconds": round(seconds, 1),
        "returncode": returncode,
    }
    with open(out, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    print(json.dumps(record))
    sys.exit(returncode)


if __name__ == "__main__":
    main()
