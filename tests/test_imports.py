"""wh's own modules are imported plainly: an ImportError in one is a bug to see, never a feature to skip."""

import ast
from pathlib import Path

import wheelhouse

# Third-party modules that may be absent where wh runs (tomllib before Python 3.11).
OPTIONAL = {"tomllib", "tomli"}


def _guarded_imports(tree: ast.AST):
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        caught = {ast.unparse(h.type) for h in node.handlers if h.type is not None}
        if not caught & {"ImportError", "ModuleNotFoundError"}:
            continue
        for stmt in ast.walk(ast.Module(body=node.body, type_ignores=[])):
            if isinstance(stmt, ast.Import):
                yield node.lineno, [a.name for a in stmt.names]
            elif isinstance(stmt, ast.ImportFrom):
                yield node.lineno, ["." * stmt.level + (stmt.module or "")]


def test_no_import_of_wh_itself_is_guarded():
    root = Path(wheelhouse.__file__).parent
    bad = []
    for path in sorted(root.rglob("*.py")):
        for line, names in _guarded_imports(ast.parse(path.read_text(encoding="utf-8"))):
            own = [n for n in names if n.split(".")[0] not in OPTIONAL]
            if own:
                bad.append(f"{path.relative_to(root.parent)}:{line} guards {', '.join(own)}")
    assert not bad, "\n".join(bad)


def test_the_box_side_commands_load_no_http_client():
    """DESIGN.md: nothing on the box side imports what can open a socket to a remote host. `wh install`
    and `wh doctor` (run through the real entry point, so every module their commands load is loaded)
    import neither urllib3 nor wh's own HTTP client (wheelhouse.index.http)."""
    import subprocess
    import sys

    code = ("import sys\nfrom wheelhouse.cli import main\n"
            "for cmd in (['install', '--help'], ['doctor', '--help']):\n"
            "    try:\n        main(cmd)\n    except SystemExit:\n        pass\n"
            "import wheelhouse.install, wheelhouse.install.wheel, wheelhouse.doctor, wheelhouse.cli.install, "
            "wheelhouse.cli.doctor\n"
            "print([m for m in sys.modules if m.split('.')[0] in ('urllib3', 'requests') "
            "or m.startswith('wheelhouse.index.http')], file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stderr.strip().splitlines()[-1] == "[]", r.stderr
