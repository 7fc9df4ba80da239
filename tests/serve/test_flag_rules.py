"""Value-aware serve rules through the real `wh serve`: refused (value, limit, reason, source), allowed, overridden.

The engine is tests/support/fake_engine.py; the manifest carries the vLLM reference deployment's three
value traps as [[serve.rule]] tables, and FreeToken's forbidden flags stay wh's built-in rules.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from wheelhouse.manifest import ManifestError, load_manifest, parse_manifest
from wheelhouse.serve.lint import ForbiddenFlag, lint_command

sys.path.insert(0, str(Path(__file__).parent))  # the launch helpers and fixtures of test_serve.py (same folder)
from test_serve import FAKE, PY, assert_group_gone, free_port, logs, wh  # noqa: E402,F401  (fixtures)

RULES = """
[stack]
name = "rules"
[serve]
command = ["{python}", "{fake}", "--port", "{port}", "--token-interval", "0.002"]
url = "http://127.0.0.1:PORT"

[[serve.rule]]
flag = "--gpu-memory-utilization"
max = 0.97
reason = "0.98 loads, then OOMs on a 383K-token prompt"
source = "dsv41-320e-dspark known issues"

[[serve.rule]]
flag = "--max-num-batched-tokens"
max = 2048
reason = "8192 wedges the pipeline; /v1/models keeps answering"

[[serve.rule]]
flag = "--speculative-config"
key = "num_speculative_tokens"
multiple-of = 5
reason = "below 5 is rejected, 7 runs out of shared memory"
hint = "use 5 draft tokens"
"""


@pytest.fixture
def manifest(tmp_path):
    port = free_port()
    m = tmp_path / "rules.toml"
    m.write_text(RULES.replace("PORT", str(port)).replace("{python}", PY).replace("{fake}", str(FAKE)))
    return m, port


@pytest.mark.parametrize("extra, said", [
    (["--gpu-memory-utilization", "0.98"], ["--gpu-memory-utilization 0.98 is above the limit 0.97",
                                            "OOMs on a 383K-token prompt", "dsv41-320e-dspark known issues",
                                            "set --gpu-memory-utilization to at most 0.97"]),
    (["--max_num_batched_tokens=8192"], ["--max-num-batched-tokens 8192 is above the limit 2048", "wedges"]),
    (["--gpu-memory-util", "0.98"], ["--gpu-memory-utilization 0.98 is above the limit 0.97"]),  # argparse prefix
    (["--speculative-config", '{"method":"dspark","num_speculative_tokens":7}'],
     ["--speculative-config.num_speculative_tokens 7 is not a multiple of 5", "shared memory", "use 5 draft tokens"]),
    (["--speculative-config.num_speculative_tokens", "6"], ["num_speculative_tokens 6 is not a multiple of 5"]),
])
def test_a_value_past_its_rule_is_refused_naming_value_limit_reason_and_source(env, logs, manifest, extra, said):
    m, _port = manifest
    log = logs()
    r = wh(["serve", str(m), "--no-preflight", "--log", str(log), "--", *extra], env)
    assert r.returncode == 2, r.stderr
    for text in said:
        assert text in r.stderr
    assert f"rule from {m} [[serve.rule]]" in r.stderr and "--allow-flag" in r.stderr
    assert "let the engine size memory itself" not in r.stderr  # the hint is the rule's, not a fixed sentence
    assert not log.exists()  # refused before anything started


def test_values_within_the_rules_serve(env, logs, manifest):
    m, port = manifest
    log = logs()
    extra = ["--gpu-memory-utilization", "0.97", "--max-num-batched-tokens=2048",
             "--speculative-config", '{"num_speculative_tokens":10}']
    r = wh(["serve", str(m), "--no-preflight", "--detach", "--json", "--interval", "0.1", "--log", str(log),
            "--", *extra], env)
    try:
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["allowed_flags"] == []
        assert f"engine settings: {json.dumps(extra)}" in log.read_text()  # the engine got them as written
    finally:
        wh(["stop", "--grace", "2"], env)
    assert_group_gone(log, port)


def test_allow_flag_overrides_one_rule_and_is_recorded_in_the_serve_state(env, logs, manifest, tmp_path):
    m, port = manifest
    log = logs()
    over = ["--gpu-memory-utilization", "0.98", "--max-num-batched-tokens", "8192"]
    # One override does not let the other rule's value through.
    r = wh(["serve", str(m), "--no-preflight", "--allow-flag", "--gpu-memory-utilization", "--log", str(log),
            "--", *over], env)
    assert r.returncode == 2 and "--max-num-batched-tokens 8192 is above the limit 2048" in r.stderr
    assert "--gpu-memory-utilization 0.98" not in r.stderr.split("hint:")[0].split("error:")[-1]
    assert not log.exists()
    r = wh(["serve", str(m), "--no-preflight", "--detach", "--json", "--interval", "0.1", "--log", str(log),
            "--allow-flag", "--gpu-memory-utilization", "--allow-flag", "--max-num-batched-tokens", "--", *over], env)
    try:
        assert r.returncode == 0, r.stderr
        assert "allowed by --allow-flag --gpu-memory-utilization: --gpu-memory-utilization 0.98 is above the limit" \
               in r.stderr
        assert json.loads(r.stdout)["allowed_flags"] == ["--gpu-memory-utilization", "--max-num-batched-tokens"]
        state = json.loads((tmp_path / "state" / "serve.json").read_text())
        assert state["allowed_flags"] == ["--gpu-memory-utilization", "--max-num-batched-tokens"]
    finally:
        wh(["stop", "--grace", "2"], env)
    assert_group_gone(log, port)


def test_a_refusal_never_quotes_the_api_key(env, manifest):
    m, _port = manifest
    r = wh(["serve", str(m), "--no-preflight", "--", "--gpu-memory-utilization", "{api_key}"],
           {**env, "WH_API_KEY": "0.99"})
    assert r.returncode == 2 and "--gpu-memory-utilization *** is not a number" in r.stderr
    assert "0.99" not in r.stderr


def test_allow_flag_naming_no_rule_is_refused(env, manifest):
    m, _port = manifest
    r = wh(["serve", str(m), "--no-preflight", "--allow-flag", "--gpu-memory-utilisation", "--",
            "--gpu-memory-utilization", "0.99"], env)
    assert r.returncode == 2 and "no rule of this command has that name" in r.stderr
    assert "--gpu-memory-utilization" in r.stderr.split("hint:")[1]


def test_freetoken_builtin_rule_refuses_with_its_own_hint_and_allow_flag_overrides(env, logs):
    cmd = ["ft", "serve", "--model-path", "/m", "--num-tokens", "32768"]
    r = wh(["serve", "--no-preflight", "--", *cmd], env)
    assert r.returncode == 2 and "--num-tokens is forbidden" in r.stderr
    assert "let the memory solver size the KV pool" in r.stderr and "wh's built-in rules for `ft serve`" in r.stderr
    # Overridden, the launch goes ahead (and fails here only because there is no `ft`).
    r = wh(["serve", "--no-preflight", "--allow-flag", "--num-tokens", "--log", str(logs()), "--", *cmd], env)
    assert "allowed by --allow-flag --num-tokens" in r.stderr and "'ft' not found" in r.stderr


def test_rule_tables_are_checked_when_the_manifest_is_read():
    base = '[serve]\ncommand = ["e"]\n'
    for body, said in [
        ('[[serve.rule]]\nflag = "--x"\nreason = "r"\n', "sets no limit"),
        ('[[serve.rule]]\nflag = "--x"\nmax = "high"\nreason = "r"\n', "max must be a number"),
        ('[[serve.rule]]\nflag = "--x"\nmax = 1\n', "has no reason"),
        ('[[serve.rule]]\nflag = "--x"\nmaxx = 1\nreason = "r"\n', "did you mean 'max'"),
        ('[serve.forbid-flags]\n"--x" = "r"\n[[serve.rule]]\nflag = "--x"\nforbid = true\nreason = "r"\n',
         "forbid-flags and in [[serve.rule]]"),
    ]:
        with pytest.raises(ManifestError, match=re.escape(said)):
            parse_manifest(base + body)


def test_bundled_vllm_manifest_carries_the_three_value_traps():
    v = load_manifest("vllm-dsv41-pp5-5x170hx")
    assert v.engine_recipe.name == "vllm-dsv41-pp5.toml" and v.engine_recipe.is_file()  # the engine it serves
    assert {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
            "HF_HUB_OFFLINE": "1"}.items() <= dict(v.serve.env).items()
    assert "--trust-remote-code" in v.serve.command
    cfg = json.loads(v.serve.command[v.serve.command.index("--compilation-config") + 1])
    assert cfg["cudagraph_mode"] == "FULL_AND_PIECEWISE" and cfg["cudagraph_capture_sizes"] == [1, 2, 4, 8]
    key = v.serve.command[v.serve.command.index("--api-key") + 1]
    assert key == "{api_key}"  # from WH_API_KEY, never a literal
    argv = [a.replace("{model}", "/m").replace("{api_key}", "k") for a in v.serve.command]
    assert lint_command(argv, v.serve.rules) == ()  # its own command keeps its rules
    for extra, name in [(["--gpu-memory-utilization", "0.98"], "--gpu-memory-utilization"),
                        (["--max-num-batched-tokens", "8192"], "--max-num-batched-tokens"),
                        (["--speculative-config", '{"method":"dspark","num_speculative_tokens":7}'],
                         "--speculative-config.num_speculative_tokens")]:
        with pytest.raises(ForbiddenFlag) as info:
            lint_command(argv + extra, v.serve.rules, allow=["--speculative-config"])
        assert [x.rule.name for x in info.value.violations] == [name]
        assert str(v.path) in info.value.violations[0].rule.source
    # DSpark with 5 draft tokens passes the value rule; the presence rule still needs its own override.
    dspark = ["--speculative-config", '{"method":"dspark","num_speculative_tokens":5}']
    with pytest.raises(ForbiddenFlag, match="--speculative-config is forbidden"):
        lint_command(argv + dspark, v.serve.rules)
    with pytest.raises(ForbiddenFlag, match="--speculative-config is forbidden"):  # given in pieces, vLLM-style
        lint_command(argv + ["--speculative-config.method", "dspark"], v.serve.rules)
    assert [x.rule.name for x in lint_command(argv + dspark, v.serve.rules, allow=["--speculative-config"])] == \
        ["--speculative-config"]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
