"""wh's commands: each one's module under ``wheelhouse.cli``, its attribute and its one-line help, and the
top-level help's description and epilog. Read by ``_fast`` (``wh --help`` without click) and ``_group``."""

from __future__ import annotations

__all__ = ["DESCRIPTION", "EPILOG", "_COMMANDS"]

DESCRIPTION = "wh: stage a Python GPU serving stack where the network is, install it where the GPUs are."

# command name -> (module under wheelhouse.cli, attribute, one-line help)
_COMMANDS = {
    "target": ("target", "target", "Capture or show a target profile."),
    "stage": ("stage", "stage", "Resolve for the target and download a verified wheelhouse."),
    "cache": ("cache", "cache", "Show, prune or clean wh's download cache."),
    "bytecode": ("bytecode", "bytecode", "Compile a wheelhouse's modules for the target's Python, once."),
    "pack": ("carry", "pack", "Write a wheelhouse as one deterministic archive (optionally in parts)."),
    "push": ("registry", "push", "Publish a wheelhouse to an OCI registry (wheels as shared blobs)."),
    "pull": ("registry", "pull", "Fetch a wheelhouse from an OCI registry, every blob verified."),
    "verify": ("carry", "verify", "Check a wheelhouse or its archive offline, before anything is installed."),
    "install": ("install", "install", "Install a wheelhouse offline into a venv or interpreter."),
    "links": ("links", "links", "Check, add or undo unversioned NVIDIA soname links."),
    "env": ("env", "env", "Print the environment the engine needs (PATH, CUDA_HOME, LD_LIBRARY_PATH)."),
    "doctor": ("doctor", "doctor", "Run executed probes and known-bug rules; gate CI on the result."),
    "drop": ("doctor", "drop", "Uninstall distributions whose executed probe failed."),
    "build": ("build", "build", "Build the engine from source at an exact commit."),
    "patch": ("patch", "patch", "Apply, verify or revert a one-file patch with preconditions."),
    "serve": ("serve", "serve", "Launch the engine and wait for its real readiness."),
    "stop": ("serve", "stop", "Stop a detached engine and its whole process group."),
    "smoke": ("serve", "smoke", "One streamed chat request: model id, TTFT and decode tok/s."),
}

EPILOG = (
    "Exit codes: 0 ok; 1 failed (doctor: a check failed); 2 bad input, nothing changed "
    "(doctor --strict: warnings only); 3 wh itself could not run. The data asked for goes to stdout, progress, "
    "notes and errors to stderr; -v/-q go before or after the command; NO_COLOR turns colour off."
)
