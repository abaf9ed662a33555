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

  # ---- A model that fails ----
  # The bot has two models, "big" then a second one: "big" is asked first, the second answers
  # when "big" fails.

  Scenario: When the first model server answers 503, the second model answers
    Given a bot whose first model server is overloaded and answers 503, and whose second answers "Hello from the spare."
    When the user says "hi"
    Then the user receives "Hello from the spare."
    And the finish reason is SUCCESS
    And the first model server was asked for "big" once and the second for "spare" once
    And the turn records "model 'big' failed, so 'spare' was asked instead: the model server failed (HTTP 503): overloaded"

  Scenario: A stream that breaks before its first word moves to the second model, with nothing withdrawn
    Given a bot with two models, "big" then "small", where "small" answers "1+2 is 3"
    And "big" breaks before it has streamed anything
    When the user says "what is 1+2?"
    Then the user saw "1+2 is 3" appear piece by piece
    And the streamed message was closed with "1+2 is 3"
    And the turn records "model 'big' failed, so 'small' was asked instead: the connection to the model closed in the middle of its answer"

  Scenario: A stream that breaks after its first words is withdrawn, and the second model answers
    Given a bot with two models, "big" then "small", where "small" answers "1+2 is 3"
    And "big" streams "I think the answer is 4" in pieces of 4 characters and breaks after the first piece
    When the user says "what is 1+2?"
    Then the user saw "I th" in a message that was then withdrawn
    And the user receives "1+2 is 3"
    And the finish reason is SUCCESS
    And the turn records "model 'big' failed, so 'small' was asked instead; what 'big' had streamed was withdrawn: the connection to the model closed in the middle of its answer"

  # ---- A long session ----
  # The model answers only from what its prompt shows; as older turns no longer fit, they are
  # summarised (by the same scripted model, which keeps every line that starts with "FACT:").

  Scenario: A 2,000-turn session keeps its prompt within budget and still knows what turn 3 said
    Given a bot with a context window of 2000 tokens, 200 of them kept for the answer
    When the user chats for 2000 turns, saying "FACT: my cat is called Tom" at turn 3
    And the user says "What is my cat called?"
    Then the user receives "Your cat is called Tom."
    And no prompt of the session was over 1800 tokens
    And every version of the session's summary still says "FACT: my cat is called Tom"
