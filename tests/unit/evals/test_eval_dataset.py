"""Reading eval datasets: YAML, JSON and JSONL, the JSON schema users validate against, and the
one-line errors naming the case and the field."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from agentloop.evals import DatasetError, dataset_schema, load_dataset

FEATURES = Path(__file__).parents[2] / "features" / "evals"


def test_every_shipped_dataset_validates_against_the_schema() -> None:
    schema = dataset_schema()
    for path in sorted(FEATURES.glob("*.yaml")) + [Path(__file__).parents[2] / "fixtures" / "evals" / "support.yaml"]:
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
        assert load_dataset(path).cases


def test_the_schema_refuses_what_loading_refuses() -> None:
    bad = {"name": "x", "cases": [{"name": "a", "messages": ["hi"], "expect": {"answers": {}}}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, dataset_schema())


def test_a_jsonl_file_is_one_case_a_line_named_after_the_file(tmp_path: Path) -> None:
    path = tmp_path / "smoke.jsonl"
    lines = [{"name": "a", "messages": ["hi"]}, {"name": "b", "messages": ["x", "y"], "tags": ["two turns"]}]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    dataset = load_dataset(path)
    assert (dataset.name, [c.name for c in dataset.cases], dataset.cases[1].messages) == ("smoke", ["a", "b"], ["x", "y"])


def test_a_json_file_holds_the_dataset_as_yaml_does(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"name": "d", "cases": [{"name": "a", "messages": ["hi"], "expect": {"output": {"schema": {"type": "object"}}}}]}))
    assert load_dataset(path).cases[0].expect.output.json_schema == {"type": "object"}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("name: d\ncases:\n  - name: a\n    messages: []\n", "case 'a'.messages: List should have at least 1 item"),
        ("name: d\ncases:\n  - {name: a, messages: [hi]}\n  - {name: a, messages: [ho]}\n", "two cases are named 'a'"),
        ("name: d\ncases:\n  - messages: [hi]\n    expect: {answer: {matches: '('}}\n", "case 1.name: Field required"),
        ("name: d\ncases:\n  - name: a\n    messages: [hi]\n    expect: {answer: {matches: '('}}\n", "case 'a'.expect.answer.matches"),
        ("name: d\ncases: [\n", "is not valid YAML"),
    ],
)
def test_a_broken_dataset_is_a_dataset_error_saying_where(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "d.yaml"
    path.write_text(text)
    with pytest.raises(DatasetError) as raised:
        load_dataset(path)
    assert said in str(raised.value) and str(path) in str(raised.value)


def test_a_file_of_another_kind_or_missing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="cannot read the dataset"):
        load_dataset(tmp_path / "absent.yaml")
    (tmp_path / "d.txt").write_text("x")
    with pytest.raises(DatasetError, match=r"a \.yaml, \.yml, \.json or \.jsonl file"):
        load_dataset(tmp_path / "d.txt")
