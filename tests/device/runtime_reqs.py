"""Print a pyproject.toml's [project] dependencies as a requirements file (stdin -> stdout).

    git --git-dir .device/freetoken.git show HEAD:pyproject.toml | python3 tests/device/runtime_reqs.py --drop flashlib
"""

import argparse
import re
import sys
import tomllib

parser = argparse.ArgumentParser()
parser.add_argument("--drop", action="append", default=[], help="leave out this project (repeatable)")
args = parser.parse_args()
deps = tomllib.loads(sys.stdin.read())["project"]["dependencies"]
drop = {re.sub(r"[-_.]+", "-", d).lower() for d in args.drop}
for dep in deps:
    name = re.split(r"[\s<>=!~;\[(]", dep, maxsplit=1)[0]
    if re.sub(r"[-_.]+", "-", name).lower() not in drop:
        print(dep)
