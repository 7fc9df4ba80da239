"""The one redaction function: URL credentials, and the secrets wh knows wherever they appear."""

from __future__ import annotations

from wheelhouse.redact import MASK, known_secrets, redact


def test_known_secrets_are_the_api_key_and_the_index_credentials():
    env = {"WH_API_KEY": "sk-abc123", "PIP_INDEX_URL": "https://alice:t%40ken99@idx.example/simple",
           "PIP_EXTRA_INDEX_URL": "https://plain.example/simple https://bobby:pw12@x.example/s", "OTHER": "zzzz"}
    found = set(known_secrets(env))
    assert {"sk-abc123", "alice", "t%40ken99", "t@ken99", "bobby", "pw12"} <= found and "zzzz" not in found
    assert known_secrets({"WH_API_KEY": "ab"}) == ()  # too short to mask without masking ordinary words


def test_redact_masks_given_secrets_outside_urls_and_credentials_inside_them():
    line = "args: --api-key sk-abc123 --index https://alice:pw@idx/simple"
    assert redact(line, ["sk-abc123"]) == f"args: --api-key {MASK} --index https://{MASK}@idx/simple"
    assert redact("nothing here", ["sk-abc123"]) == "nothing here"
