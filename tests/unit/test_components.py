"""The standard pipeline's components: prompt rendering and small helpers."""

from __future__ import annotations

from datetime import UTC, datetime

from agentloop import ChatMessage, PromptContext, PromptSection, Role, ToolExecution, Usage


def test_prompt_renders_system_prompt_then_sections() -> None:
    prompt = PromptContext("You are terse.", (ChatMessage.user("hi"),))
    prompt = prompt.with_section(PromptSection("Memory", "likes tea", "memory"))
    prompt = prompt.with_section(PromptSection("Notes", "use grep", "notes"))
    assert prompt.render_system() == "You are terse.\n\n## Memory\nlikes tea\n\n## Notes\nuse grep"
    assert prompt.to_messages() == (ChatMessage(Role.SYSTEM, prompt.render_system()), ChatMessage.user("hi"))


def test_prompt_without_system_text_sends_only_the_messages() -> None:
    prompt = PromptContext("", (ChatMessage.user("hi"),))
    assert prompt.to_messages() == (ChatMessage.user("hi"),)


def test_with_section_leaves_the_original_untouched() -> None:
    prompt = PromptContext("base", ())
    prompt.with_section(PromptSection("x", "y", "z"))
    assert prompt.sections == ()


def test_tool_execution_success_is_the_absence_of_an_error() -> None:
    when = datetime(2026, 1, 1, tzinfo=UTC)
    ok = ToolExecution("1", "search", {"q": "x"}, when, 3.0, "s", result="found")
    failed = ToolExecution("2", "search", {}, when, 1.0, "s", error="boom")
    assert ok.succeeded and not failed.succeeded


def test_chat_message_constructors() -> None:
    assert ChatMessage.system("s").role is Role.SYSTEM
    tool = ChatMessage.tool("c1", "search", "result")
    assert (tool.role, tool.tool_call_id, tool.name, tool.content) == (Role.TOOL, "c1", "search", "result")


def test_usages_add_up_field_by_field_cached_tokens_included() -> None:
    total = Usage(100, 20, cache_read_tokens=60) + Usage(50, 5, cache_write_tokens=40)
    assert total == Usage(150, 25, cache_read_tokens=60, cache_write_tokens=40)
