"""lock: pylock.toml is PEP 751 as packaging.pylock reads it; wh's own data stays under [tool.wh]."""

from __future__ import annotations

import sys

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from packaging.pylock import Pylock

from wheelhouse.lock import Lock, LockedFile, LockError, read_pylock, render_pylock, write_pylock

SHA = "ab" * 32


def _lock(**kw) -> Lock:
    f = LockedFile("app", "1.0", "app-1.0-py3-none-any.whl", "wheels/app-1.0-py3-none-any.whl", SHA, 10,
                   index="http://127.0.0.1/simple", tool={"parents": ["<root>"], "source": "build"}, **kw)
    return Lock(files=(f,), environments=('python_version == "3.12"',), requires_python="==3.12.*", created_by="wh 9")


def test_written_lock_validates_with_packaging_pylock(tmp_path):
    write_pylock(tmp_path, _lock())
    data = tomllib.loads((tmp_path / "pylock.toml").read_text())
    pylock = Pylock.from_dict(data)
    (pkg,) = pylock.packages
    assert pkg.wheels[0].hashes == {"sha256": SHA} and pkg.tool == {"wh": {"parents": ["<root>"], "source": "build"}}
    back = read_pylock(tmp_path)
    assert back.files == _lock().files


@pytest.mark.parametrize("edit, what", [
    (lambda t: t.replace('"python_version == \\"3.12\\""', '"python_version =="'),
     r"environments\[0\]: Expected a marker .* \(python_version ==\)"),
    (lambda t: t.replace('requires-python = "==3.12.*"', 'requires-python = "=>3.12"'), "requires-python"),
    (lambda t: t.replace('\nversion = "1.0"\n', '\nversion = "not a version"\n'), r"packages\[0\]\.version"),
    (lambda t: t.replace('name = "app"\n', 'name = "not a name!"\n'), r"packages\[0\]\.name"),
])
def test_a_lock_packaging_refuses_is_a_bad_lock_error(tmp_path, edit, what):
    """Hand edits that PEP 751 forbids are caught when the lock is read, not when pip trips on it."""
    text = render_pylock(_lock())
    (tmp_path / "pylock.toml").write_text(edit(text))
    with pytest.raises(LockError, match=what) as info:
        read_pylock(tmp_path)
    assert "pylock.toml" in str(info.value) and info.value.hint
    assert "\n" not in info.value.message  # wh's one-line error, even for packaging's caret drawings
