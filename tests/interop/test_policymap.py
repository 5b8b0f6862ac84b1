"""The mapping YAML of an external policy server: the shipped examples load, bad ones are refused
naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.policymap import PolicyMapError, load_policy_map
from tests.support.wirekit import REPO


@pytest.mark.parametrize("path", sorted((REPO / "docs" / "policy_maps").glob("*.yaml")), ids=lambda p: p.name)
def test_the_shipped_examples_load(path: Path) -> None:
    mapping = load_policy_map(path)
    assert mapping.action_dim == 10 and len(mapping.sha256) == 64


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("protocol: grpc\npolicy: p\naction_dim: 10\n", "protocol: expected one of ['openpi', 'vla-eval']"),
        ("protocol: openpi\npolicy: p\naction_dim: 0\n", "action_dim: expected a positive integer"),
        ("protocol: openpi\npolicy: a/b\naction_dim: 10\n", "policy: expected a name"),
        ("protocol: openpi\npolicy: p\naction_dim: 10\ncamera: {}\n", "unknown field(s) ['camera']"),
        ("protocol: openpi\npolicy: p\naction_dim: 10\nproprio: [state, 3]\n", "proprio: expected a key"),
        ("protocol: openpi\npolicy: p\naction_dim: 10\nimage_size: [1, 2, 3]\n", "image_size: expected"),
        ("- just a list\n", "expected a mapping of settings"),
        ("protocol: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_maps_are_refused_naming_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "map.yaml"
    path.write_text(text)
    with pytest.raises(PolicyMapError) as refused:
        load_policy_map(path)
    assert str(path) in str(refused.value) and message in str(refused.value)


def test_a_missing_map_names_the_knob(tmp_path: Path) -> None:
    with pytest.raises(PolicyMapError, match=r"POLICY_SERVER_MAP=.*cannot read it"):
        load_policy_map(tmp_path / "absent.yaml")
