"""benchmarks/served_overhead.py: the server's own time per target pass, auto against speculation off."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
served_overhead = importlib.import_module("served_overhead")


def test_spread_is_the_median_and_the_range():
    assert served_overhead.spread([1.27, 0.91, 1.07]) == "1.07 (0.91-1.27)"
    assert served_overhead.spread([0.5]) == "0.50"


def test_runs_and_counts_the_passes():
    # Short: 2 clients x 1 request x 8 tokens, fast fake passes; this code only ("before" needs git, which a checkout may lack).
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "served_overhead.py"), "--before", "", "--repeats", "2", "--clients", "1", "2",
                           "--requests", "1", "--max-tokens", "8", "--pass-ms", "0.5", "--draft-ms", "0.2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith("| ") and not line.startswith("| clients")]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [("1", "auto"), ("1", "off"), ("2", "auto"), ("2", "off")]
    assert all(len(r) == 5 for r in rows), rows  # one version: wall and CPU per pass, then the draft passes
    for r in rows:
        for cell in r[2:4]:  # median (range) of the 2 repeats, the CPU's never nothing
            median, low, high = (float(x) for x in cell.replace("(", " ").replace(")", " ").replace("-", " ").split())
            assert low <= median <= high, cell
        assert float(r[3].split()[0]) > 0, r
    assert [r[4].strip() for r in rows if r[1].strip() == "off"] == ["0", "0"]  # speculation off: no draft pass
