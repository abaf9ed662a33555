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

  # ---- Budgets ----
  # Every model call of this bot uses 1,000 tokens and costs $0.10.

  Scenario: A budget stops a tool loop mid-turn
    Given a bot with a budget of 2000 tokens a turn, whose model asks for a lookup on every call
    When the user asks "look it up"
    Then the turn finishes with BUDGET_EXCEEDED after 2 model calls and 1 lookup
    And the user is told the budget is used up
    And history holds "look it up" with no answer

  Scenario: A tenant's daily cost cap is reached across two workers
    Given two workers of one bot on PostgreSQL, with a daily cost cap of $0.25 a tenant
    When users of one tenant send 6 messages, each to the other worker than the last
    Then 3 turns are answered and 3 finish with BUDGET_EXCEEDED
    And the tenant spent at most one call beyond its cap
    And a user of another tenant is still answered
