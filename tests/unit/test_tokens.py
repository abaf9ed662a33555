"""Counting tokens: the estimate that learns from reported usage, and a local tokenizer's exact counts."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import ChatMessage, EstimatedTokens
from agentloop.tokens import MESSAGE_OVERHEAD, TokenizerTokens, message_tokens

TEXT = "x" * 400
"""100 tokens at the default four characters a token."""


def test_learning_moves_a_models_ratio_toward_the_usage_it_reported() -> None:
    """A report of twice the estimate moves the model's ratio a `smoothing` step toward 2, and what it estimates with it."""
    counter = EstimatedTokens()
    assert counter.count(TEXT, "m") == 100
    counter.learn("m", estimated=100, reported=200)
    assert counter.ratio("m") == 1.2
    assert counter.count(TEXT, "m") == 120
    assert counter.count(TEXT, "other") == 100 and counter.ratio("other") == 1.0


def test_repeated_reports_bring_the_estimate_to_what_the_provider_counts() -> None:
    """Learning from each prompt it estimated, the counter's estimate of a 300-token prompt converges to 300."""
    counter = EstimatedTokens()
    for _ in range(60):
        counter.learn("m", estimated=counter.count(TEXT, "m"), reported=300)
    assert 299 <= counter.count(TEXT, "m") <= 301


def test_an_empty_report_teaches_nothing() -> None:
    """A call that reported no input tokens (or a prompt estimated at none) leaves the ratio as it was."""
    counter = EstimatedTokens()
    counter.learn("m", estimated=100, reported=0)
    counter.learn("m", estimated=0, reported=100)
    assert counter.ratio("m") == 1.0


@settings(max_examples=100, deadline=None)
@given(reports=st.lists(st.tuples(st.integers(1, 10**6), st.integers(1, 10**6)), max_size=30))
def test_a_learnt_ratio_stays_within_a_quarter_and_four(reports: list[tuple[int, int]]) -> None:
    """Learnt ratio bound: whatever the reports, a model's ratio stays within [1/4, 4], so one odd report cannot run away with it."""
    counter = EstimatedTokens()
    for estimated, reported in reports:
        counter.learn("m", estimated, reported)
    assert 0.25 <= counter.ratio("m") <= 4.0


def test_a_tokenizer_counts_with_its_encode_function_and_remembers_each_text() -> None:
    """`TokenizerTokens` counts the ids its `encode` gives, whatever the model, and encodes a text it counted once only."""
    encoded: list[str] = []

    def encode(text: str) -> list[int]:
        encoded.append(text)
        return [len(word) for word in text.split()]

    counter = TokenizerTokens(encode)
    assert counter.count("one two three", "m") == 3
    assert counter.count("one two three", "other") == 3
    assert counter.count("four") == 1
    assert message_tokens(counter, ChatMessage.user("five six")) == MESSAGE_OVERHEAD + 2
    assert encoded == ["one two three", "four", "five six"]


_TEXTS = st.one_of(st.none(), st.text(max_size=300))


@settings(max_examples=200, deadline=None)
@given(
    contents=st.lists(_TEXTS, max_size=12),
    tools=st.lists(st.tuples(st.text(min_size=1, max_size=20), st.text(max_size=200)), max_size=4),
    ratio=st.floats(0.25, 4.0),
    with_call=st.booleans(),
)
def test_a_requests_estimate_in_one_pass_is_the_sum_of_its_messages_and_tools_counted_one_by_one(
    contents: list[str | None], tools: list[tuple[str, str]], ratio: float, with_call: bool
) -> None:
    """`request_tokens` counts an `EstimatedTokens` request in one pass over messages and tools; whatever the texts
    and the learnt ratio, it is what counting each message (`message_tokens`) and each tool spec's text gives."""
    from agentloop import ToolCall, ToolSpec
    from agentloop.tokens import request_tokens, texts_tokens, tool_texts

    counter = EstimatedTokens()
    counter._ratios["m"] = ratio
    messages = [ChatMessage.user(content) if content is not None else ChatMessage.assistant(None) for content in contents]
    if with_call:  # a message with tool calls is counted with its calls' arguments, one by one
        messages.append(ChatMessage.assistant("looking", (ToolCall("c1", "lookup", {"q": "x"}),)))
    specs = [ToolSpec(name, description, {"type": "object"}) for name, description in tools]
    one_by_one = sum(message_tokens(counter, m, "m") for m in messages) + texts_tokens(counter, tool_texts(specs), "m")
    assert request_tokens(counter, messages, specs, "m") == one_by_one
