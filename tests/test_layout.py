"""The package layout's import rules (README, "Layout"): ``lsmt_core`` depends on none of the
other packages; ``training`` depends on neither ``model_export`` nor ``server``; the server
and the bundle reader run without torch and without any ``training`` code; bundle evaluation
runs without torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Run in a fresh interpreter: `import torch` fails, and so does any import of the packages
# named in BLOCKED (a finder placed before every other one).
_GUARD = """
import importlib.abc, sys
sys.modules["torch"] = None
BLOCKED = {blocked!r}

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{{name}} imported (blocked by tests/test_layout.py)")
        return None

sys.meta_path.insert(0, Block())
"""


def _run_blocked(blocked: set[str], code: str) -> subprocess.CompletedProcess:
    script = _GUARD.format(blocked=sorted(blocked)) + code
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def _imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_core_imports_none_of_the_other_packages():
    files = sorted((ROOT / "lsmt_core").glob("*.py"))
    assert len(files) >= 10
    for f in files:
        forbidden = _imported_packages(f) & {"training", "model_export", "server", "torch"}
        assert not forbidden, f"{f.relative_to(ROOT)} imports {sorted(forbidden)}"


def test_training_imports_neither_export_nor_server():
    files = sorted((ROOT / "training").rglob("*.py"))
    assert len(files) >= 20
    for f in files:
        forbidden = _imported_packages(f) & {"model_export", "server"}
        assert not forbidden, f"{f.relative_to(ROOT)} imports {sorted(forbidden)}"


def test_server_and_bundle_reader_import_without_torch_or_training():
    r = _run_blocked(
        {"training"},
        "import server.app, server.__main__, server.bundles, server.engines\n"
        "import lsmt_bundle, lsmt_bundle.ct2\n"
        "assert not any(m == 'training' or m.startswith('training.') for m in sys.modules)\n"
        "print('ok')\n",
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_the_guard_catches_a_training_import():
    r = _run_blocked({"training"}, "import training.data\n")
    assert r.returncode != 0 and "blocked by tests/test_layout.py" in r.stderr


def test_bundle_evaluation_imports_without_torch():
    r = _run_blocked(
        set(),
        "import model_export.evaluate\n"
        "from lsmt_core.scoring import score\n"
        "line = 'And Jesus said unto them, Follow me, and I will make you fishers of men.'\n"
        "s = score([line], [line], 'en')\n"
        "assert round(s['chrf']) == 100 and round(s['bleu']) == 100, s\n"
        "print('ok')\n",
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
