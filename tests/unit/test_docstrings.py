"""Docstrings read into a summary and parameter descriptions, in the three common styles."""

from __future__ import annotations

from agentloop._docstrings import parse_docstring


def test_a_docstring_without_sections_is_all_summary() -> None:
    parsed = parse_docstring("Say hello.\n\n    To everyone.\n")
    assert parsed.description == "Say hello.\n\nTo everyone." and parsed.parameters == {}


def test_google_sections_after_the_parameters_are_not_descriptions() -> None:
    parsed = parse_docstring('''Move a file.

    Args:
        src: where it is.
        dst (str): where it goes;
            created if missing.

    Raises:
        OSError: when the disk is full.
    ''')
    assert parsed.description == "Move a file."
    assert parsed.parameters == {"src": "where it is.", "dst": "where it goes; created if missing."}


def test_numpy_and_sphinx_parameters() -> None:
    numpy = parse_docstring("Add.\n\nParameters\n----------\na : int\n    the first.\nb : int\n    the second.\n\n"
                            "Returns\n-------\nint\n    the sum.\n")
    sphinx = parse_docstring("Add.\n\n:param a: the first.\n:param int b: the second.\n:returns: the sum.\n")
    assert numpy.parameters == sphinx.parameters == {"a": "the first.", "b": "the second."}
    assert numpy.description == sphinx.description == "Add."
