"""The package layout's import rules (README, "Layout"): ``lsmt_core`` depends on none of the
other packages; ``lsmt_text`` (tokenizer and corpus) and ``lsmt_bundle`` (the bundle reader,
assembly, fusion rules, engine builder) only on ``lsmt_core``; the server only on ``lsmt_core``
and ``lsmt_bundle``; ``training`` only on ``lsmt_core`` and ``lsmt_text``; ``model_export`` on
those and ``lsmt_bundle`` and ``training``, and only the study (``lsmt_study``) above it runs
it. A ``python -m PACKAGE`` in a subprocess's arguments counts as an import. The server and
the bundle reader run without torch and without any ``training`` or export code; bundle
evaluation runs without torch and without ``training``."""

from __future__ import annotations

import ast
import itertools
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
        elif isinstance(node, ast.List | ast.Tuple):
            names.update(module.split(".")[0] for module in _run_modules(node.elts))
    return names


def _run_modules(items: list[ast.expr]) -> list[str]:
    """The modules a command line runs: the strings after ``"-m"`` in a list or tuple
    (``[sys.executable, "-m", "model_export", ...]``)."""
    return [
        after.value
        for before, after in itertools.pairwise(items)
        if isinstance(before, ast.Constant) and before.value == "-m"
        if isinstance(after, ast.Constant) and isinstance(after.value, str)
    ]


# Every package of the repository; each rule below names the ones a package may import.
PACKAGES = {
    "lsmt_core",
    "lsmt_text",
    "lsmt_bundle",
    "training",
    "model_export",
    "lsmt_study",
    "server",
    "loadtests",
    "tests",
}


def _forbidden_imports(
    package: str, allowed: set[str], at_least: int, root: Path = ROOT
) -> dict[str, list[str]]:
    """Files of ``package`` that import torch or a repository package outside ``allowed``
    (anywhere in the file, function-local imports included): path -> those packages."""
    files = sorted((root / package).rglob("*.py"))
    assert len(files) >= at_least, f"{package}: only {len(files)} files found"
    forbidden = (PACKAGES | {"torch"}) - allowed - {package}
    found = {str(f.relative_to(root)): sorted(_imported_packages(f) & forbidden) for f in files}
    return {path: names for path, names in found.items() if names}


def test_core_imports_none_of_the_other_packages():
    assert _forbidden_imports("lsmt_core", set(), at_least=10) == {}


def test_text_package_imports_only_core():
    assert _forbidden_imports("lsmt_text", {"lsmt_core"}, at_least=15) == {}


def test_bundle_package_imports_only_core():
    assert _forbidden_imports("lsmt_bundle", {"lsmt_core"}, at_least=10) == {}


def test_server_imports_only_core_and_bundle():
    assert _forbidden_imports("server", {"lsmt_core", "lsmt_bundle"}, at_least=20) == {}


def test_training_imports_only_core_and_text():
    assert _forbidden_imports("training", {"lsmt_core", "lsmt_text", "torch"}, at_least=20) == {}


def test_export_imports_neither_the_server_nor_the_study():
    allowed = {"lsmt_core", "lsmt_text", "lsmt_bundle", "training", "torch"}
    assert _forbidden_imports("model_export", allowed, at_least=8) == {}


def test_only_the_study_runs_model_export():
    """Of the code packages, only ``lsmt_study`` (and the benchmarks and tests) import or run
    ``model_export``: the study is the one package above it."""
    users = {
        package
        for package in PACKAGES - {"model_export"}
        for path in (ROOT / package).rglob("*.py")
        if "model_export" in _imported_packages(path)
    }
    assert users <= {"lsmt_study", "loadtests", "tests"}, users
    assert "lsmt_study" in users  # the rule sees a `python -m model_export` subprocess


def test_the_study_imports_no_server_or_bundle():
    allowed = {"lsmt_core", "lsmt_text", "training", "model_export"}
    assert _forbidden_imports("lsmt_study", allowed, at_least=2) == {}


def test_a_breach_is_reported(tmp_path):
    """The rules above can fail: absolute imports and ``-m`` subprocesses are seen anywhere in
    a file (relative imports stay inside the package), and each forbidden package is named."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(
        "import lsmt_core.tags\n"
        "from model_export.from_torch import export_bundle\n"
        "from . import sibling\n"
        "def f():\n"
        "    import torch\n"
        "    from training import model\n"
        "    subprocess.run([sys.executable, '-m', 'server.keys', 'list'])\n"
    )
    found = _forbidden_imports("pkg", {"lsmt_core"}, at_least=1, root=tmp_path)
    assert found == {"pkg/m.py": ["model_export", "server", "torch", "training"]}


def test_server_and_bundle_reader_import_without_torch_training_or_export():
    r = _run_blocked(
        {"training", "model_export"},
        "import server.app, server.__main__, server.bundles, server.engine_registry\n"
        "import lsmt_bundle, lsmt_bundle.ct2, lsmt_bundle.fusions\n"
        "assert not any(m.split('.')[0] in ('training', 'model_export') for m in sys.modules)\n"
        "print('ok')\n",
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_the_guard_catches_a_training_import():
    r = _run_blocked({"training"}, "import training.recipe\n")
    assert r.returncode != 0 and "blocked by tests/test_layout.py" in r.stderr


def test_text_package_imports_without_torch_training_or_export():
    r = _run_blocked(
        {"training", "model_export", "lsmt_bundle", "server"},
        "import lsmt_text.tokenizer, lsmt_text.data, lsmt_text.data.testsets\n"
        "import lsmt_text.data.corpus, lsmt_text.data.sources\n"
        "print('ok')\n",
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_bundle_evaluation_imports_without_torch_or_training():
    r = _run_blocked(
        {"training"},
        "import model_export.evaluate\n"
        "from lsmt_core.scoring import score\n"
        "line = 'And Jesus said unto them, Follow me, and I will make you fishers of men.'\n"
        "s = score([line], [line], 'en')\n"
        "assert round(s['chrf']) == 100 and round(s['bleu']) == 100, s\n"
        "print('ok')\n",
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


# Import circles ------------------------------------------------------------------------------


def _module_imports(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the repository modules it imports (function-local and TYPE_CHECKING imports
    included: a circle hidden in a function is still a circle)."""
    files = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            files[name] = path
    imports: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                while target and target not in files:  # a name inside a module: the module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    found.add(target)
        imports[name] = found
    return imports


def _circles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(imports.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for v in sorted(imports):
        if v not in index:
            visit(v)
    return circles


CODE_PACKAGES = tuple(sorted(PACKAGES - {"tests"}))


def test_no_module_imports_itself_through_others():
    assert _circles(_module_imports(ROOT, CODE_PACKAGES)) == []


def test_an_import_circle_is_found(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import x\n")
    (pkg / "b.py").write_text("def f():\n    from pkg import a\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    assert _circles(_module_imports(tmp_path, ("pkg",))) == [["pkg.a", "pkg.b"]]


# The translation service knows no HTTP ---------------------------------------------------------

# The service and the modules of its steps (server/service.py's docstring): they fail with
# ``server.failures``' kinds, which ``server.errors`` maps to HTTP, and are run outside any
# request too (the warm-up), so none of them imports FastAPI or the HTTP layer.
SERVICE_STEPS = (
    "service",
    "validation",
    "catalogue",
    "detection",
    "plans",
    "decoders",
    "output_retry",
    "results",
)
HTTP_MODULES = {"server.app", "server.dependencies", "server.errors", "server.middleware"}


def _http_imports(root: Path, modules: tuple[str, ...]) -> dict[str, list[str]]:
    """Module -> the HTTP frameworks and HTTP-layer modules of ``server`` it imports."""
    imports = _module_imports(root, ("server",))
    found = {}
    for module in modules:
        name = f"server.{module}"
        frameworks = _imported_packages(root / "server" / f"{module}.py") & {"fastapi", "starlette"}
        layer = {m for m in imports[name] if m in HTTP_MODULES or m.startswith("server.routes")}
        if frameworks | layer:
            found[name] = sorted(frameworks | layer)
    return found


def test_the_service_and_its_steps_import_no_http():
    assert _http_imports(ROOT, SERVICE_STEPS) == {}


def test_an_http_import_of_a_step_is_found(tmp_path):
    server = tmp_path / "server"
    (server / "routes").mkdir(parents=True)
    for name in ("__init__", "errors", "routes/__init__", "routes/translate"):
        (server / f"{name}.py").write_text("")
    (server / "plans.py").write_text("from fastapi import Request\nfrom .errors import x\n")
    (server / "results.py").write_text("def f():\n    from .routes import translate\n")
    assert _http_imports(tmp_path, ("plans", "results")) == {
        "server.plans": ["fastapi", "server.errors"],
        "server.results": ["server.routes.translate"],
    }
