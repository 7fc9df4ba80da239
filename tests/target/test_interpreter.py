"""An interpreter's facts are asked of it, and what it says about tags and markers is a TargetProfile."""

import subprocess
import sys

from packaging import tags as ptags

from wheelhouse.target import TargetProfile
from wheelhouse.target.interpreter import create_venv, inspect_interpreter


def test_an_interpreter_holds_one_target_profile(tmp_path):
    venv = create_venv(tmp_path / "v")
    assert isinstance(venv.target, TargetProfile) and venv.target.source == "captured"
    assert venv.tags == tuple(str(t) for t in ptags.sys_tags())
    assert (venv.implementation, venv.python_version, venv.abi) == (
        venv.target.implementation, venv.target.python_version, venv.target.abi)
    own = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert venv.target.evaluate(f'python_version == "{own}"')
    assert venv.target.wheel_rank(f"x-1-{venv.tags[0]}.whl") == 0
    # what the interpreter itself reports, not wh's host: its sys.prefix is the venv
    assert venv.prefix == subprocess.run([str(tmp_path / "v" / "bin" / "python"), "-c", "import sys; print(sys.prefix)"],
                                         capture_output=True, text=True, check=True).stdout.strip()


def test_the_running_interpreter_describes_itself():
    me = inspect_interpreter()
    assert me.target.glibc == me.glibc and me.markers["python_full_version"] == me.target.python_full_version
