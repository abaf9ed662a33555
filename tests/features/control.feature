Feature: A conversation under control
  What a bot does when it is pushed: limits, budgets, fallbacks, a long session, a message
  that arrives while it is still answering the last one.

  # ---- A message that arrives mid-turn ----
  # The user sends "first"; while the bot works on it (it has said a few words and asked for
  # a tool), the user sends "second". The bot's mid-turn policy says what happens.

  Scenario: Under the queue policy a message sent mid-turn waits its turn
    Given a bot whose mid-turn policy is queue
    When the user says "first" and, while the bot works on it, "second"
    Then the turn of "first" finishes with SUCCESS
    And the lookup tool ran 1 time
    And the answer to "second" is "answering first + second"

  Scenario: Under the reject policy a message sent mid-turn is refused
    Given a bot whose mid-turn policy is reject
    When the user says "first" and, while the bot works on it, "second"
    Then "second" is refused because a turn is still running
    And the turn of "first" finishes with SUCCESS
    And the lookup tool ran 1 time
    And history holds "first" and not "second"

  Scenario: Under the interrupt policy a message sent mid-turn stops the running turn
    Given a bot whose mid-turn policy is interrupt
    When the user says "first" and, while the bot works on it, "second"
    Then the turn of "first" finishes with INTERRUPTED
    And the lookup tool ran 0 times
    And what "first" streamed was withdrawn, never sent as an answer
    And the answer to "second" is "answering first + second"
    And history holds "first", "second" and "answering first + second", in that order
