"""The benchmark scripts run: each one's `main`, with tiny numbers, prints its table.

Only the shape of the output is checked; what the figures are depends on the machine.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import attrs
import numpy as np
import numpy.typing as npt

import pytest
import structlog

from agentloop.adapters.embedders.hashing import HashingEmbedder


BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
MS = r"\d+\.\d\d ms"
MS_3 = r"\d+\.\d{3} ms"


def load(script: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"benchmark_{script}", BENCHMARKS / f"{script}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_main(script: str, *argv: str) -> None:
    """Run the script's `main` with its siblings importable, as `python benchmarks/x.py` has
    them, then put back the logging configuration it sets."""
    logging_config = structlog.get_config()
    sys.path.insert(0, str(BENCHMARKS))
    try:
        load(script).main(list(argv))
    finally:
        sys.path.remove(str(BENCHMARKS))
        structlog.configure(**logging_config)


def test_event_loop_lag_prints_a_row_of_figures_per_session_count(capsys: pytest.CaptureFixture[str]) -> None:
    run_main("event_loop_lag", "--sessions", "1,2", "--turns", "2", "--model-delay", "0.001")
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[:1] == ["sessions"] and "lag p99" in line for line in lines)
    rows = {line.split()[0]: line for line in lines if line.split() and line.split()[0] in ("idle", "1", "2")}
    assert set(rows) == {"idle", "1", "2"}
    assert re.match(rf"\s*idle\s+0\s+-\s+\d+\s+{MS}\s+{MS}\s+{MS}", rows["idle"])
    for sessions, turns in (("1", 2), ("2", 4)):
        assert re.match(rf"\s*{sessions}\s+{turns}\s+\d+\.\d\s+\d+\s+{MS}\s+{MS}\s+{MS}\s+\w+\.\w+ {MS}", rows[sessions])
    assert any(line.startswith("tool executions captured") for line in lines)


def test_workers_prints_turns_per_second_per_worker_count_and_retrieval_on_pgvector_beside_hnswlib(
    capsys: pytest.CaptureFixture[str], postgres_url: str
) -> None:
    run_main("workers", "--url", postgres_url, "--workers", "1,2", "--sessions", "3", "--messages", "2", "--concurrency", "2",
             "--model-delay", "0.001", "--notes", "300", "--queries", "3")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("6 turns (3 sessions x 2)")
    assert re.match(r"1 worker process\(es\), PostgreSQL inbox\s+\d+\.\d\s+1\.00x$", lines[2])
    assert re.match(r"2 worker process\(es\), PostgreSQL inbox\s+\d+\.\d\s+\d+\.\d\dx\s+>= 1\.6x\s+(ok|MISSED)$", lines[3])
    assert re.match(r"1 process, SQLite, no inbox\s+\d+\.\d$", lines[4])
    at = lines.index("") + 1
    assert lines[at].startswith("retrieval at 300 notes of dim 384, 100 tenants of 1% each: 3 KnowledgeBase.search calls")
    assert re.match(rf"PostgreSQL \+ pgvector \(HNSW\)\s+\d+\.\d\s+{MS}\s+{MS}$", lines[at + 2])
    assert re.match(rf"SQLite \+ hnswlib\s+\d+\.\d\s+{MS}\s+{MS}$", lines[at + 3])


def test_workers_with_a_baseline_runs_each_level_on_that_revisions_code_too_and_prints_the_ratio(
    capsys: pytest.CaptureFixture[str], postgres_url: str
) -> None:
    run_main("workers", "--url", postgres_url, "--workers", "1", "--sessions", "3", "--messages", "2", "--concurrency", "2",
             "--model-delay", "0.001", "--notes", "30", "--queries", "3", "--baseline", "HEAD", "--rounds", "2")
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("this checkout beside HEAD (stores: PostgreSQL), levels alternating in 2 round(s), median turns/s")
    assert re.match(r"setup\s+this\s+HEAD\s+this / HEAD$", lines[at + 1])
    assert re.match(r"1 worker process\(es\), PostgreSQL inbox\s+\d+\.\d\s+\d+\.\d\s+\d+\.\d\dx\s+\(\d+/\d+, \d+/\d+\)$", lines[at + 2])


def test_turn_latency_times_the_baseline_in_the_same_run_and_prints_the_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    run_main("turn_latency", "--turns", "4", "--warmup", "1", "--rounds", "2", "--baseline", "HEAD")
    lines = capsys.readouterr().out.splitlines()
    assert not any(line.startswith("no baseline") for line in lines)
    for label in ("standard turn, framework time", "until the user is answered"):
        assert any(re.match(rf"{label}, HEAD \(median\)\s+\d+\.\d{{3}} ms$", line) for line in lines)
        assert any(re.match(rf"{label}, this / HEAD\s+\d+\.\d\dx\s+<= 1\.00x\s+(ok|MISSED)$", line) for line in lines)


def test_turn_latency_reports_usage_a_baseline_from_before_prompt_cache_counts_can_hold() -> None:
    """A `--baseline` such as 355eca1 (before the code moved into packages) has a `Usage` of two fields;
    its worker once crashed building this checkout's usage with a cache count."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        turn_latency = load("turn_latency")
    finally:
        sys.path.remove(str(BENCHMARKS))

    @attrs.frozen
    class TwoFieldUsage:
        input_tokens: int
        output_tokens: int

    assert turn_latency.reported_usage(TwoFieldUsage) == TwoFieldUsage(1200, 40)
    assert turn_latency.USAGE.cache_read_tokens == 1024


def test_turn_latency_without_the_baseline_commit_says_so_and_times_this_checkout(capsys: pytest.CaptureFixture[str]) -> None:
    run_main("turn_latency", "--turns", "2", "--warmup", "1", "--baseline", "no-such-revision")
    lines = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("no baseline: git cannot give no-such-revision here") for line in lines) == 1
    assert any(re.match(r"standard turn, framework time \(median\)\s+\d+\.\d{3} ms\s+<= 1\.0 ms", line) for line in lines)
    assert not any("this /" in line for line in lines)


def test_turn_latency_with_a_baseline_embedder_times_both_embedders_in_one_run_and_prints_their_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_main("turn_latency", "--turns", "2", "--warmup", "1", "--rounds", "2", "--notes", "--baseline-embedder", "hashing")
    lines = capsys.readouterr().out.splitlines()
    for label in ("standard turn, framework time", "until the user is answered"):
        assert any(re.match(rf"{label}, hashing embedder \(median\)\s+\d+\.\d{{3}} ms$", line) for line in lines)
        assert any(re.match(rf"{label}, this / hashing embedder\s+\d+\.\d\dx\s+<= 1\.30x\s+(ok|MISSED)$", line) for line in lines)


def test_embedders_prints_a_row_per_way_of_embedding(capsys: pytest.CaptureFixture[str]) -> None:
    run_main("embedders", "--calls", "3", "--server-delay", "0")
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines[1:]] == [
        ["hashing", "aembed"], ["hashing", "to_thread(embed)"], ["openai", "aembed"], ["openai", "to_thread(embed)"],
    ]
    assert all(len(re.findall(r"\d+\.\d+ ms", line)) == 2 for line in lines[1:])


def test_serve_prints_each_sse_figure_of_agentloop_serve_next_to_the_floor_and_each_protocols_next_to_native(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_main("serve", "--quick")
    lines = capsys.readouterr().out.splitlines()
    assert "tokens: one token shared by every client, --rate-limit" in lines[1]
    assert any("(target <= 1.20x latency)" in line for line in lines)
    number = r"\d+\.\d\d"
    for clients in ("1", "5"):
        for figure in ("requests/s", "latency p50 (ms)", "latency p99 (ms)", "first delta p50 (ms)"):
            assert any(re.match(rf"\s*{clients}\s+{re.escape(figure)}\s+{number}\s+{number}\s+{number}x$", line) for line in lines)
            for protocol in ("openai", "a2a", "agui", "mcp"):
                shown = r"-\s+" + number + r"\s+-" if protocol == "mcp" and figure.startswith("first") else rf"{number}\s+{number}\s+{number}x"
                assert any(re.match(rf"\s*{clients}\s+{protocol}\s+{re.escape(figure)}\s+{shown}$", line) for line in lines), (protocol, figure)
    assert not any("errors" in line for line in lines)


def test_turn_peers_prints_each_contestants_text_and_tool_turn_and_the_ratios_to_their_targets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_main("turn_peers", "--turns", "2", "--rounds", "1", "--warmup", "1", "--session-turns", "5", "--embedder", "hashing")
    lines = capsys.readouterr().out.splitlines()
    for name in ("agentloop, SQLite stores + note-taking", "agentloop, no storage"):
        assert any(re.match(rf"{re.escape(name)}\s+{MS_3}\s+{MS_3}$", line) for line in lines)
    for name in ("pydantic-ai Agent.run, FunctionModel", "LangGraph model+tools graph", "Haystack Agent"):
        assert any(re.match(rf"{re.escape(name)}\s+({MS_3}\s+{MS_3}|not installed\s+pip install '\.\[bench\]')$", line) for line in lines)
    for ratio, target in (("pydantic-ai / agentloop with storage", 10), ("LangGraph / agentloop no storage", 15)):
        assert any(re.match(rf"{ratio}\s+(\d+\.\dx\s+\d+\.\dx\s+>= {target}x\s+(ok|MISSED)|not installed)$", line) for line in lines)


def test_turn_peers_times_one_session_kept_in_sqlite_by_each_contestant_by_fifths_and_prints_the_ratios(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_main("turn_peers", "--turns", "1", "--rounds", "1", "--warmup", "1", "--session-turns", "5", "--embedder", "hashing")
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("like for like with storage: text turns 1-5 of one session"))
    assert lines[at].endswith("agentloop's embedder: hashing-v1/384")
    assert re.match(r"\s+median\s+turns 1-1\s+turns 5-5\s+last/first$", lines[at + 1])
    figures = rf"{MS_3}\s+{MS_3}\s+{MS_3}\s+\d+\.\d\dx"
    assert re.match(rf"agentloop standard \+ note-taking, SQLite\s+{figures}\s+<= 1\.2x\s+(ok|MISSED)$", lines[at + 2])
    for row, name in ((3, "LangGraph + SQLite checkpointer"), (4, "OpenAI Agents SDK + SQLiteSession")):
        assert re.match(rf"{re.escape(name)}\s+({figures}|not installed\s+pip install '\.\[bench\]')$", lines[at + row])
    for row, name in ((5, "LangGraph"), (6, "OpenAI Agents SDK")):
        assert re.match(rf"{name} / agentloop \(median\)\s+(\d+\.\dx\s+>= 20x\s+(ok|MISSED)|not installed)$", lines[at + row])


def test_turn_latency_with_notes_times_the_turn_with_note_taking(capsys: pytest.CaptureFixture[str]) -> None:
    run_main("turn_latency", "--turns", "2", "--warmup", "1", "--baseline", "none", "--notes")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("history/memory/RAG/notes growing")
    assert any(re.match(r"standard turn, framework time \(median\)\s+\d+\.\d{3} ms\s+<= 1\.0 ms", line) for line in lines)


def test_event_loop_lag_with_a_bound_on_turns_in_flight_says_so_and_runs_every_session(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_main("event_loop_lag", "--sessions", "3", "--turns", "2", "--model-delay", "0.001", "--max-concurrent-turns", "2")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("at most 2 turns in flight")
    assert any(re.match(rf"\s*3\s+6\s+\d+\.\d\s+\d+\s+{MS}", line) for line in lines)


def test_turn_flat_prints_the_ratio_by_session_length_and_by_store_size(capsys: pytest.CaptureFixture[str]) -> None:
    run_main("turn_flat", "--session-turns", "6", "--rows", "50", "--small", "5", "--rounds", "1", "--per-round", "2")
    lines = capsys.readouterr().out.splitlines()
    row = rf"{MS_3}\s+\S+ rows {MS_3}\s+\d+\.\d\dx\s+<= 1\.2x\s+(ok|MISSED)$"
    assert re.match(rf"per-turn time by session length\s+turn ~100 {MS_3}\s+turn 6\+ {MS_3}\s+\d+\.\d\dx\s+<= 1\.2x\s+(ok|MISSED)$", lines[1])
    assert re.match(r"prompt size by session length \(tokens\)\s+turn ~100 median \d+ max \d+\s+turn 6\+ median \d+ max \d+\s+"
                    r"budget \d+\s+(ok|MISSED)$", lines[2])
    assert lines[3].startswith("store size: 5 vs 50 history and memory rows of 1,000 other users")
    assert re.match(rf"per-turn time, a user with few rows\s+5 rows {row}", lines[4])
    assert re.match(rf"per-turn time, a session in the shared project\s+5 rows {row}", lines[5])


def test_notes_prints_what_capture_adds_to_a_tool_call_and_the_batch_write_rate_next_to_their_targets(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the script imports its sibling vector_index
    run_main("notes", "--notes", "300", "--queries", "3", "--events", "400", "--tool-turns", "3", "--rounds", "1",
             "--corpus", "low-rank")
    lines = capsys.readouterr().out.splitlines()
    assert any(re.match(r"capture: added to a tool call end to end \(median\)\s+-?\d+\.\d\d us\s+target <= 2 us$", line) for line in lines)
    assert any(re.match(r"tool call through the tool loop, no capture \(median\)\s+\d+\.\d\d us", line) for line in lines)
    assert any(re.match(r"capture: CPU added per tool call, all threads\s+-?\d+\.\d\d us", line) for line in lines)
    for thread in ("the loop's thread, added", "the writer thread", "the store's thread"):
        assert any(re.match(rf"capture: CPU per tool call, {thread}\s+-?\d+\.\d\d us", line) for line in lines)
    writes = [line for line in lines if line.startswith("batch writes:")]
    assert len(writes) == 2 and all(re.search(r"\d ev/s\s+target >= 100,000 events/s$", line) for line in writes)


def test_retrieval_prints_one_table_of_every_backend_on_real_text_the_stress_shapes_and_the_rag_growth(
    capsys: pytest.CaptureFixture[str], postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTLOOP_BENCH_CACHE", str(tmp_path))
    run_main("retrieval", "--texts", "300", "--queries", "5", "--embedder", "hashing", "--postgres", postgres_url,
             "--peers", "lancedb", "sqlite-vec", "--data", "low-rank", "hashed-text", "--n", "400", "--dim", "16",
             "--rag-sizes", "200,400")
    lines = capsys.readouterr().out.splitlines()
    assert re.match(r"real text: 300 docstrings of the installed packages \(305 found, 5 held out as queries\), hashing-v1/384", lines[0])
    cells = r"(\s+\d+\.\d{3}\s+[01]\.\d{3}){3}$"
    for name in ("agentloop SQLite \\+ hnswlib", "numpy exact \\(floor\\)", "agentloop PostgreSQL \\+ pgvector"):
        assert sum(bool(re.match(rf"\s+{name}{cells}", line)) for line in lines) == 1
    assert any(re.match(r"\s+target\s+<= 0\.5\s+>= 0\.99\s+-\s+-\s+<= 1\.0\s+>= 0\.95$", line) for line in lines)
    for peer in ("lancedb", "sqlite-vec"):
        assert any(re.match(rf"\s+{peer}({cells}|\s+not (installed|available))", line) for line in lines)
    assert any(re.match(r"\s+target, SQLite 1%: <= 0\.5 ms, >= 0\.99\s+(ok|MISSED)$", line) for line in lines)
    assert any(re.match(r"\s+target, SQLite unfiltered: <= 1\.0 ms, >= 0\.95\s+(ok|MISSED)$", line) for line in lines)
    assert any(re.match(r"\s+ingest, notes/s: agentloop SQLite [\d,]+, PostgreSQL [\d,]+ \(one add_many\)", line) for line in lines)
    for shape in ("low-rank", "hashed-text"):
        assert f"{shape} (stress shape, no target): notes 400 x 16, SQLite + hnswlib" in lines
    figures = r"\s+\d+\.\d{3}\s+[01]\.\d{3}$"
    for label in ("filter 1%", "filter 10%", "every note visible"):
        assert sum(bool(re.match(rf"\s+agentloop, {label}{figures}", line)) for line in lines) == 2
    assert sum(bool(re.match(rf"\s+numpy exact over the visible rows{figures}", line)) for line in lines) == 6
    assert any(re.match(r"\s+ingest, add_many batches of 5,000\s+[\d,]+ notes/s\s+>= 20,000", line) for line in lines)
    assert [line.split()[0] for line in lines if re.match(r"\s+\d+\s+\d+\.\d{3}\s+\d\.\d\dx\s+\d+\.\d{3}\s+\d\.\d\dx", line)] == ["200", "400"]


def test_retrieval_quality_prints_hit_rates_and_mrr_per_set_and_search_next_to_the_targets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_main("retrieval_quality", "--embedder", "hashing", "--families", "2", "--incidents", "8", "--misses")
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["paraphrases: 12 notes, 9 questions", "exact ids: 8 notes, 8 questions"]
    figures = r"\d\.\d\d\s+\d\.\d\d\s+\d\.\d{3}\s+\d+\s+-"
    for name in ("paraphrases", "exact ids"):
        assert any(re.match(rf"{name}\s+hashing\s+hashing-v1/384\s+vectors\s+{figures}$", line) for line in lines)
        assert any(re.match(rf"{name}\s+hashing\s+hashing-v1/384\s+hybrid\s+(n/a|{figures})$", line) for line in lines)
    assert all(re.match(r"(paraphrases|exact ids) / hashing / (vectors|hybrid): .+ wants \S+, got \S+$", line)
               for line in lines[lines.index("") + 1:])


def test_retrieval_quality_generates_the_same_exact_identifier_set_each_run_with_one_distinct_id_per_note() -> None:
    module = load("retrieval_quality")
    first, again = module.identifier_set(40), module.identifier_set(40)
    assert first == again
    assert len({note.key for note in first.notes}) == 40
    assert all(question.key in question.text and question.key in note.text
               for question, note in zip(first.questions, first.notes, strict=True))


def _corpus() -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return load("corpus")
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_the_docstring_corpus_keeps_distinct_long_docstrings_in_file_order_then_paragraphs_when_short(tmp_path: Path) -> None:
    corpus = _corpus()
    (tmp_path / "pkg").mkdir()
    (tmp_path / "a.py").write_text(
        '"""The module a explains what it is for, at length enough to count."""\n'
        'def f():\n    """Too short."""\n'
        'class C:\n    """The class C keeps   its state\n    over   several lines of text.\n\n'
        '    Its second paragraph says more about it than the first one does."""\n'
    )
    (tmp_path / "pkg" / "b.py").write_text('def g():\n    """The module a explains what it is for, at length enough to count."""\n')
    (tmp_path / "pkg" / "bad.py").write_text('"""A file that does not parse is skipped, whatever it holds."""\ndef h(:\n')
    (tmp_path / "pkg" / "c.py").write_text('"""The module c is found after a, as the folders are walked in order."""\n')
    whole = [
        "The module a explains what it is for, at length enough to count.",
        "The class C keeps its state over several lines of text. Its second paragraph says more about it than the first one does.",
        "The module c is found after a, as the folders are walked in order.",
    ]
    assert corpus.docstring_corpus(3, min_chars=30, roots=[tmp_path]) == whole
    assert corpus.docstring_corpus(10, min_chars=30, roots=[tmp_path]) == [
        *whole,
        "The class C keeps its state over several lines of text.",
        "Its second paragraph says more about it than the first one does.",
    ]


def test_the_corpus_embeds_with_agentloops_wordllama_adapter_and_keeps_no_loader_of_its_own() -> None:
    from agentloop.adapters.embedders.wordllama import WordLlamaEmbedder

    corpus = _corpus()
    assert not hasattr(corpus, "WordLlama")
    assert isinstance(corpus.embedder_named("wordllama"), WordLlamaEmbedder)


def test_the_embedded_corpus_is_read_from_the_cache_on_a_rerun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = _corpus()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text("".join(f'def f{i}():\n    """Function number {i} does its own thing well."""\n' for i in range(6)))
    calls: list[int] = []

    class Counting(HashingEmbedder):
        def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
            calls.append(len(texts))
            return super().embed(texts)

    monkeypatch.setattr(corpus, "source_roots", lambda: [tmp_path / "src"])
    texts, vectors = corpus.embedded_corpus(4, Counting(32), min_chars=20, cache=tmp_path / "cache")
    again, cached = corpus.embedded_corpus(4, Counting(32), min_chars=20, cache=tmp_path / "cache")
    assert texts == again == [f"Function number {i} does its own thing well." for i in range(4)]
    assert vectors.shape == (4, 32) and np.array_equal(vectors, cached)
    assert calls == [4]


def test_control_cost_prints_what_usage_recording_and_budgets_add_next_to_the_target(capsys: pytest.CaptureFixture[str]) -> None:
    run_main("control_cost", "--turns", "4", "--rounds", "2", "--warmup", "2")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("the standard turn, 4 turns")
    assert lines[1] == "framework time:" and lines[6] == "until the user is answered:"
    for block in (lines[2:6], lines[7:11]):
        assert re.match(rf"  without usage recording\s+{MS_3}$", block[0])
        for line, label in zip(block[1:3], ("with usage recording \\(as shipped\\)", "with usage recording and two budgets"), strict=True):
            assert re.match(rf"  {label}\s+{MS_3}\s+\d+\.\d\dx\s+<= 1\.10x\s+(ok|MISSED)$", line)
        assert re.match(rf"  noise floor: a second bot without it\s+{MS_3}\s+\d+\.\d\dx$", block[3])


def test_control_cost_rotates_the_order_so_each_bot_runs_first_as_often_as_the_others() -> None:
    """Over four rounds each bot runs once in each position: the baseline is not always the first, slow, one."""
    names = ("none", "usage", "budgets", "floor")
    orders = [load("control_cost").rotated(names, round_) for round_ in range(4)]
    assert all(sorted(order) == sorted(names) for order in orders)
    assert all(sorted(order[position] for order in orders) == sorted(names) for position in range(4))


def test_erase_prints_the_time_of_each_erase_beside_the_first(capsys: pytest.CaptureFixture[str]) -> None:
    run_main("erase", "--others", "200,400", "--victim-rows", "40,80")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["other", "rows", "user", "rows", "erased", "erase", "ms", "vs", "first"]
    rows = [line.split() for line in lines[1:4]]
    assert [row[:3] for row in rows] == [["200", "40", "62"], ["400", "40", "62"], ["400", "80", "124"]]
    assert all(re.match(r"\d+\.\d$", row[3]) and re.match(r"\d+\.\d\dx$", row[4]) for row in rows)
    assert rows[0][4] == "1.00x" and lines[4].startswith("flat down the first rows")


def test_prune_prints_file_size_and_read_time_before_and_after_as_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    run_main("prune", "--sessions", "6", "--turns", "3", "--texts", "60", "--queries", "2")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("retention: 6 sessions x 3 turns") and lines[4] == ""
    assert lines[5].startswith("compaction: 60 RAG texts")
    for at in (2, 7):
        assert re.match(r"file bytes.*\s+[\d,]+\s+[\d,]+\s+\d+\.\d\dx$", lines[at])
        assert re.match(rf".*p50\s+{MS}\s+{MS}\s+\d+\.\d\dx$", lines[at + 1])
