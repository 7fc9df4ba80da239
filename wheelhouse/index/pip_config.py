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
- environment variables ``PIP_INDEX_URL`` / ``PIP_EXTRA_INDEX_URL`` override every file;
  a list value (``extra-index-url``) is separated by whitespace or newlines.

``wh stage`` resolves and downloads like ``pip download``; ``[install]`` is read too, because
that is where most people put their index.
"""

from __future__ import annotations

import configparser
import functools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from wheelhouse.errors import UsageError

__all__ = ["PipIndexConfig", "NoIndexConfigured", "UNCONFIGURED", "pip_config_files", "read_pip_index_config",
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
    """``index_url`` (None when nothing configures one) and ``extra_index_urls``, with where the
    index URL came from."""

    index_url: str | None
    extra_index_urls: tuple[str, ...] = ()
    source: str | None = None  # "PIP_INDEX_URL", a config file path, or None
    no_index: bool = False  # PIP_NO_INDEX / no-index: pip would use no index, so no default either


class NoIndexConfigured(UsageError):
    """Neither a flag, the manifest, PIP_INDEX_URL nor a pip configuration file names an index."""

    code = "no-index"


def pip_config_files(env: Mapping[str, str] | None = None, prefix: str | None = None,
                     home: Path | None = None) -> list[Path]:
    """The configuration files pip reads here, in load order (later overrides earlier); only
    those that exist. ``env``/``prefix``/``home`` default to this process's."""
    env = os.environ if env is None else env
    prefix = sys.prefix if prefix is None else prefix
    home = Path(env.get("HOME") or Path.home()) if home is None else home
    env_file = env.get("PIP_CONFIG_FILE")
    if env_file and env_file == os.devnull:
        return []
    xdg_dirs = [d for d in (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(os.pathsep) if d]
    files = [Path(d) / "pip" / "pip.conf" for d in xdg_dirs] + [Path("/etc/pip.conf")]
    if not (env_file and Path(env_file).is_file()):
        xdg_home = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
        files += [home / ".pip" / "pip.conf", xdg_home / "pip" / "pip.conf"]
    files.append(Path(prefix) / "pip.conf")
    if env_file:
        files.append(Path(env_file))
    return [f for f in files if f.is_file()]


def _values(files: Sequence[Path]) -> dict[str, tuple[str, str]]:
    """key -> (value, file) after merging ``files``: every file's [global], then every file's
    [install], then [download] (a command's section overrides [global] wherever it is)."""
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
    extras = values.get("extra-index-url", ("", ""))[0]
    if env.get("PIP_EXTRA_INDEX_URL"):
        extras = env["PIP_EXTRA_INDEX_URL"]
    no_index = env.get("PIP_NO_INDEX", values.get("no-index", ("", ""))[0])
    return PipIndexConfig(index, tuple(extras.split()), source, no_index.strip().lower() in _TRUE)


def default_index_url() -> str:
    """The index pip would use here: PIP_INDEX_URL, else pip's configuration files, else (unless
    pip is configured with no-index) the default pip itself states, else ``UNCONFIGURED`` (asking it
    raises NoIndexConfigured)."""
    config = read_pip_index_config()
    if config.index_url or config.no_index:
        return config.index_url or UNCONFIGURED
    return pip_stated_default() or UNCONFIGURED


@functools.lru_cache(maxsize=None)
def pip_stated_default() -> str | None:
    """The default index as pip's own command line states it (``pip download --help``:
    "Base URL of the Python Package Index (default URL)"), or None without a pip.

    wh carries no registry address and imports nothing of pip; the help text is pip's public
    statement of its default, asked once, out of process, only when nothing is configured.
    """
    for cmd in ([sys.executable, "-m", "pip"], [shutil.which("pip3") or ""], [shutil.which("pip") or ""]):
        if not cmd[0]:
            continue
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
