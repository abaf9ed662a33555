"""Properties of the welcome bot, for any answers the model gives."""

import asyncio
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import IncomingMessage, Role, Session, history_scope, memory_scope
from agentloop.testing import RecordingChannel, ScriptedLLM
from systems import standard_pipeline
from welcome_bot import WelcomeSystem

answers = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40).filter(str.strip)


@settings(deadline=None, max_examples=20)
@given(st.lists(answers, min_size=1, max_size=3))
def test_only_the_first_answer_is_welcomed_and_only_answers_are_stored(replies: list[str]) -> None:
    """I5: history and memory hold exactly the model's answers; only what is sent has the welcome."""
    llm, channel = ScriptedLLM(replies), RecordingChannel()
    session = Session("conversation", user_id="ada")
    with tempfile.TemporaryDirectory() as data_dir:
        with standard_pipeline(llm, channel, data_dir=data_dir).insert(WelcomeSystem("Hi!")) as pipeline:
            loop = pipeline.build()
            for _ in replies:
                loop.run_turn_sync(session, IncomingMessage("Tell me something"))
            assert pipeline.stores is not None
            history = asyncio.run(pipeline.stores.sessions.recent(history_scope(session), 100))
            memory = asyncio.run(pipeline.stores.memory.recent(memory_scope(session), 100))
    assert channel.texts == [f"Hi! {replies[0]}", *replies[1:]]
    assert [m.content for m in history if m.role is Role.ASSISTANT] == replies
    assert [entry.assistant_text for entry in memory] == replies
