"""The index pip would use on this host, read from pip's documented configuration: no pip import.

pip's documentation ("Configuration", pip.pypa.io/en/stable/topics/configuration/) defines it:

- files, loaded in this order, a later value overriding an earlier one:
  global (``$XDG_CONFIG_DIRS/pip/pip.conf`` for each folder, default ``/etc/xdg``, then
  ``/etc/pip.conf``), user (legacy ``~/.pip/pip.conf``, then ``$XDG_CONFIG_HOME/pip/pip.conf``,
  default ``~/.config/pip/pip.conf``; skipped when ``PIP_CONFIG_FILE`` names an existing file),
  site (``<sys.prefix>/pip.conf``), then the file ``PIP_CONFIG_FILE`` names;
  ``PIP_CONFIG_FILE=/dev/null`` loads no file at all;
- inside them, INI sections: ``[global]`` applies to every command, a command's own section
  (``[install]``, ``[download]``) overrides it; keys are written ``index-url`` or ``index_url``;
- environment variables ``PIP_INDEX_URL``, ``PIP_EXTRA_INDEX_URL``, ``PIP_FIND_LINKS``,
  ``PIP_TRUSTED_HOST`` override every file's value of the same key (a variable replaces the
  files' list, it does not add to it); a list value (``extra-index-url``, ``find-links``,
  ``trusted-host``) is separated by whitespace or newlines;
- the command line comes last: a single value (``--index-url``) replaces the configured one, a
  list option (``--extra-index-url``, ``--find-links``) adds to the configured list (optparse
  appends to the default pip sets from its configuration).

``wh stage`` resolves and downloads like ``pip download``; ``[install]`` is read too, because
that is where most people put their index.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from wheelhouse.cachedir import default_cache_dir
from wheelhouse.errors import UsageError

__all__ = ["PipIndexConfig", "NoIndexConfigured", "UNCONFIGURED", "pip_config_files", "pip_config_candidates",
           "read_pip_index_config",
           "default_index_url", "pip_stated_default"]

# What default_index_url() answers when nothing names an index and no pip states its default.
# wh carries no built-in registry address; this reserved name (RFC 2606 .invalid) never resolves, and PackageSource raises
# NoIndexConfigured the moment it would be asked, so the user's other mistakes (a bad
# requirement, a missing file) are still reported first.
UNCONFIGURED = "https://no-index-configured.invalid/simple"

_SECTIONS = ("global", "install", "download")  # later overrides earlier
_TRUE = ("1", "true", "yes", "on")  # pip's strtobool


@dataclass(frozen=True)
class PipIndexConfig:
    """``index_url`` (None when nothing configures one), ``extra_index_urls``, ``find_links`` and
    ``trusted_hosts``, with where the index URL came from."""

    index_url: str | None
    extra_index_urls: tuple[str, ...] = ()
    source: str | None = None  # "PIP_INDEX_URL", a config file path, or None
    no_index: bool = False  # PIP_NO_INDEX / no-index: pip would use no index, so no default either
    find_links: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()  # host or host:port (pip's --trusted-host)

    def sources(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(index URLs, find-links) pip would use: none of its indexes with no-index, as pip."""
        if self.no_index:
            return (), self.find_links
        return ((self.index_url,) if self.index_url else ()) + self.extra_index_urls, self.find_links


class NoIndexConfigured(UsageError):
    """Neither a flag, the manifest, PIP_INDEX_URL nor a pip configuration file names an index."""

    code = "no-index"


def pip_config_files(env: Mapping[str, str] | None = None, prefix: str | None = None,
                     home: Path | None = None) -> list[Path]:
    """The configuration files pip reads here, in load order (later overrides earlier); only
    those that exist. ``env``/``prefix``/``home`` default to this process's."""
    env = os.environ if env is None else env
    env_file = env.get("PIP_CONFIG_FILE")
    if env_file and env_file == os.devnull:
        return []
    user = set(_user_files(env, home)) if env_file and Path(env_file).is_file() else set()
    return [f for f in pip_config_candidates(env, prefix, home) if f not in user and f.is_file()]


def pip_config_candidates(env: Mapping[str, str] | None = None, prefix: str | None = None,
                          home: Path | None = None) -> list[Path]:
    """Every file whose presence or content decides what ``pip_config_files`` reads, in load order: the
    user's are listed even where ``PIP_CONFIG_FILE`` names an existing file (which skips them)."""
    env = os.environ if env is None else env
    prefix = sys.prefix if prefix is None else prefix
    env_file = env.get("PIP_CONFIG_FILE")
    if env_file and env_file == os.devnull:
        return []
    xdg_dirs = [d for d in (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(os.pathsep) if d]
    files = [Path(d) / "pip" / "pip.conf" for d in xdg_dirs] + [Path("/etc/pip.conf")]
    files += [*_user_files(env, home), Path(prefix) / "pip.conf"]
    if env_file:
        files.append(Path(env_file))
    return files


def _user_files(env: Mapping[str, str], home: Path | None) -> list[Path]:
    home = Path(env.get("HOME") or Path.home()) if home is None else home
    xdg_home = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    return [home / ".pip" / "pip.conf", xdg_home / "pip" / "pip.conf"]


def _values(files: Sequence[Path]) -> dict[str, tuple[str, str]]:
    """key -> (value, file) after merging ``files``: every file's [global], then every file's
    [install], then [download] (a command's section overrides [global] wherever it is)."""
    if not files:
        return {}
    import configparser  # here: where no pip.conf exists, no parser is loaded

    parsed = []
    for f in files:
        parser = configparser.RawConfigParser()
        try:
            parser.read(f, encoding="utf-8")
        except (OSError, UnicodeDecodeError, configparser.Error):
            continue  # pip warns and goes on; an unreadable file must not stop `wh stage`
        parsed.append((f, parser))
    out: dict[str, tuple[str, str]] = {}
    for section in _SECTIONS:
        for f, parser in parsed:
            if parser.has_section(section):
                for key, value in parser.items(section):
                    out[key.replace("_", "-")] = (value, str(f))
    return out


def read_pip_index_config(env: Mapping[str, str] | None = None, prefix: str | None = None,
                          home: Path | None = None) -> PipIndexConfig:
    """The index URL and extra index URLs pip would use (environment over files over default)."""
    env = os.environ if env is None else env
    values = _values(pip_config_files(env, prefix, home))
    index, source = None, None
    if "index-url" in values:
        index, source = values["index-url"][0].strip(), values["index-url"][1]
    if env.get("PIP_INDEX_URL"):
        index, source = env["PIP_INDEX_URL"].strip(), "PIP_INDEX_URL"
    lists = {}
    for key in ("extra-index-url", "find-links", "trusted-host"):
        var = "PIP_" + key.upper().replace("-", "_")
        lists[key] = tuple((env[var] if env.get(var) else values.get(key, ("", ""))[0]).split())
    no_index = env.get("PIP_NO_INDEX", values.get("no-index", ("", ""))[0])
    return PipIndexConfig(index, lists["extra-index-url"], source, no_index.strip().lower() in _TRUE,
                          find_links=lists["find-links"], trusted_hosts=lists["trusted-host"])


def default_index_url() -> str:
    """The index pip would use here: PIP_INDEX_URL, else pip's configuration files, else (unless
    pip is configured with no-index) the default pip itself states, else ``UNCONFIGURED`` (asking it
    raises NoIndexConfigured)."""
    config = read_pip_index_config()
    if config.index_url or config.no_index:
        return config.index_url or UNCONFIGURED
    return pip_stated_default() or UNCONFIGURED


@functools.lru_cache(maxsize=None)
def pip_stated_default(cache_dir: Path | None = None) -> str | None:
    """The default index as pip's own command line states it (``pip download --help``:
    "Base URL of the Python Package Index (default URL)"), or None without a pip.

    wh carries no registry address and imports nothing of pip; the help text is pip's public
    statement of its default, asked out of process, only when nothing is configured. Asking costs
    a pip start-up (~0.3-0.5 s), so first the installed pip's own source files are read as text
    (``_stated_in_source``: the constant that help text prints, never imported nor run); only when
    they do not say it in the expected words is pip asked. That answer is kept in wh's cache
    (``cache_dir``, default ``$WH_CACHE_DIR`` or ``~/.cache/wh``) under the identity of every pip that
    would be asked (path, version, mtime): a pip upgraded, replaced or added is asked again.
    """
    commands = _pip_commands()
    if not commands:
        return None
    if commands[0][1:] == ["-m", "pip"]:  # this interpreter's pip: its source says it, no start-up needed
        stated = _stated_in_source()
        if stated is not None:
            return stated
    key = [_identity(cmd) for cmd in commands]
    path = _cache_file(cache_dir)
    cached = _read_cached(path, key)
    if cached is not None:
        return cached
    answer = _ask_pip(commands)
    if answer is not None:  # a pip that failed this time (timeout, broken) is asked again next time
        _write_cached(path, key, answer)
    return answer


# What the help text's "(default URL)" is made of, in pip's source: the `--index-url` option's default is
# `PyPI.simple_url`, which is `urljoin(PyPI.url, "simple")`, and `PyPI = PackageIndex("<url>", ...)`.
_PYPI_CONSTANT = re.compile(r'^PyPI = PackageIndex\(\s*"(https?://[^"\s]+/)"', re.M)
_SIMPLE_URL = ('self.simple_url = self._url_for_path("simple")', "return urllib.parse.urljoin(self.url, path)")
_OPTION_DEFAULT = re.compile(r'"--index-url",[^)]*?default=PyPI\.simple_url,', re.S)


def _stated_in_source() -> str | None:
    """The default index of this interpreter's pip, read from its source files as text, or None.

    Reading text is not using pip's private API: nothing of pip is imported or run, and the value is
    the one ``pip download --help`` prints (see ``_PYPI_CONSTANT``). Its modules are private and may
    change, so the answer counts only when all three facts are found as written (exactly one
    constant, the URL join, the option's default); otherwise None, and pip is asked out of process.
    """
    import importlib.util
    import urllib.parse

    spec = importlib.util.find_spec("pip")  # finds pip without importing it
    if spec is None or not spec.origin:
        return None
    internal = Path(spec.origin).parent / "_internal"
    try:
        index = (internal / "models" / "index.py").read_text(encoding="utf-8")
        options = (internal / "cli" / "cmdoptions.py").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    found = _PYPI_CONSTANT.findall(index)
    if len(found) != 1 or not all(text in index for text in _SIMPLE_URL) or not _OPTION_DEFAULT.search(options):
        return None
    return urllib.parse.urljoin(found[0], "simple")


def _pip_commands() -> list[list[str]]:
    """The pips wh would ask, in order: this interpreter's (``-m pip``), then pip3 and pip on PATH."""
    import importlib.util

    cmds = []
    if importlib.util.find_spec("pip") is not None:  # finds pip without importing it
        cmds.append([sys.executable, "-m", "pip"])
    for name in ("pip3", "pip"):
        found = shutil.which(name)
        if found and [found] not in cmds:
            cmds.append([found])
    return cmds


def _identity(cmd: Sequence[str]) -> list:
    """What changes when the answer could: the executable's path and mtime, and for ``-m pip`` the
    version and mtime of the pip package that runs (a dist-info folder's name carries the version)."""
    exe = Path(cmd[0])
    out: list = [list(cmd), _mtime(exe)]
    if cmd[1:] == ["-m", "pip"]:
        import importlib.util

        spec = importlib.util.find_spec("pip")
        origin = Path(spec.origin) if spec and spec.origin else None
        if origin is not None:
            site = origin.parent.parent
            out += [str(origin), _mtime(origin), sorted(p.name for p in site.glob("pip-*.dist-info"))]
    return out


def _mtime(path: Path) -> int | None:
    try:
        return os.stat(path).st_mtime_ns  # follows links: a venv's python is a link to the real one
    except OSError:
        return None


def _cache_file(cache_dir: Path | None) -> Path:
    return Path(cache_dir or default_cache_dir()) / "pip-stated-default.json"


_KEEP_ANSWERS = 16  # one per set of pips (interpreters, venvs): runs from different ones do not evict each other


def _answers(path: Path) -> list[dict]:
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return []
    rows = data.get("answers") if isinstance(data, dict) else None
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def _read_cached(path: Path, key: list) -> str | None:
    for row in _answers(path):
        url = row.get("url")
        if row.get("key") == key and isinstance(url, str) and re.fullmatch(r"https?://\S+", url):
            return url
    return None


def _write_cached(path: Path, key: list, url: str) -> None:
    import json

    from wheelhouse.atomic import write_atomic

    rows = [r for r in _answers(path) if r.get("key") != key][-(_KEEP_ANSWERS - 1):] + [{"key": key, "url": url}]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"answers": rows}, indent=1) + "\n")
    except OSError:
        pass  # a read-only cache costs one pip start-up per run, nothing else


def _ask_pip(commands: Sequence[Sequence[str]]) -> str | None:
    for cmd in commands:
        try:
            r = subprocess.run([*cmd, "download", "--help"], capture_output=True, text=True, timeout=30,
                               env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
        except (OSError, subprocess.SubprocessError):
            continue
        found = _STATED_DEFAULT.search(" ".join(r.stdout.split()))
        if r.returncode == 0 and found:
            return found.group(1).rstrip(").,")
    return None


# pip's help wraps the line; it is matched on the text with whitespace collapsed.
_STATED_DEFAULT = re.compile(r"--index-url <url> Base URL of the Python Package Index \(default (https?://\S+?)\)")


def no_index_configured() -> NoIndexConfigured:
    return NoIndexConfigured(
        "no package index configured: no --index-url, no index-url in the manifest, "
        "no PIP_INDEX_URL, no index-url in a pip configuration file, and no pip default (no pip, or no-index set)",
        hint="pass --index-url https://HOST/simple (or set PIP_INDEX_URL, or put "
             "index-url under [global] in ~/.config/pip/pip.conf)",
    )
