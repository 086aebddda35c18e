"""Where a benchmark or study writes what it measured: the whole result as JSON, its rows as
CSV (for a spreadsheet or a plot); and how a check-style run (churn, soak) prints its
verdicts."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any


def write_results(
    out: Path, result: Any, rows: list[dict[str, Any]], name: str = "results"
) -> tuple[Path, Path]:
    """``out/<name>.json`` (``result``) and ``out/<name>.csv`` (``rows``, one line each, the
    first row's keys as the header); returns the two paths."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = out / f"{name}.json", out / f"{name}.csv"
    json_path.write_text(json.dumps(result, indent=2) + "\n")
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return json_path, csv_path


def print_checks(checks: list[dict[str, Any]]) -> bool:
    """One PASS/FAIL line per check (``check``, ``passed``, ``detail``); whether all passed."""
    for c in checks:
        print(f"{'PASS' if c['passed'] else 'FAIL'}  {c['check']}: {c['detail']}")
    return all(c["passed"] for c in checks)
