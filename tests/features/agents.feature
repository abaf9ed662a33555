Feature: Several bots
  A bot may ask another bot as one of its tools: the child answers one question in a child
  session of the user's (its own history, model and tools), and its answer is the tool's
  result. Or a bot may hand the whole conversation to another, which holds it until it hands
  it back. Either way the user gets one answer per message, and never silence.

  # The triage bot may ask the billing bot (its tool "billing"); the billing bot has the tool
  # "refund", which needs the user's approval.

  Scenario: The parent asks the child and quotes its answer
    Given a triage bot that may ask the billing bot
    And the model calls the tool "billing" with {"question": "Why was I charged twice?"}
    And the billing model replies "The second charge is a hold that drops in 3 days."
    And the model replies "Billing says: the second charge is a hold that drops in 3 days."
    When the user says "Why was I charged twice?"
    Then the user receives "Billing says: the second charge is a hold that drops in 3 days."
    And the model was told "The second charge is a hold that drops in 3 days."
    And the billing bot was asked "Why was I charged twice?" in the child session "bdd-session/billing"
    And the billing bot's history holds "Why was I charged twice?" and "The second charge is a hold that drops in 3 days."
    And the billing bot sent nothing to the user

  Scenario: A second question continues the child's session
    Given a triage bot that may ask the billing bot
    And the model calls the tool "billing" with {"question": "What is invoice 12?"}
    And the billing model replies "Invoice 12 is for March."
    And the model replies "It is for March."
    And the model calls the tool "billing" with {"question": "And its total?"}
    And the billing model replies "Invoice 12 totals 40 euros."
    And the model replies "40 euros."
    When the user says "What is invoice 12?"
    And the user says "And its total?"
    Then the user receives "40 euros."
    And the billing model's last prompt contains "Invoice 12 is for March."

  Scenario: The child's failure is the parent's tool failure, and the user is still answered
    Given a triage bot that may ask the billing bot
    And the model calls the tool "billing" with {"question": "Why was I charged twice?"}
    And the billing model fails
    And the model replies "Billing cannot answer right now; please try again later."
    When the user says "Why was I charged twice?"
    Then a failure from TOOL of kind EXCEPTION is recorded
    And the model was told that the agent "billing" did not answer
    And the user receives "Billing cannot answer right now; please try again later."
    And the finish reason is SUCCESS

  Scenario: The child's failure and the parent's: the user still gets the fallback
    Given a triage bot that may ask the billing bot
    And the model calls the tool "billing" with {"question": "Why was I charged twice?"}
    And the billing model fails
    And the model fails with a timeout error
    When the user says "Why was I charged twice?"
    Then the user receives a fallback message

  Scenario: An approval the child needs reaches the user through the parent
    Given a triage bot that may ask the billing bot
    And the model calls the tool "billing" with {"question": "Refund order 7"}
    And the billing model calls the tool "refund" with {"order": 7}
    And the billing model replies "Order 7 is refunded."
    And the model replies "Done: order 7 is refunded."
    When the user says "Refund order 7"
    Then the user is asked to approve the tool "refund" with {"order": 7}
    And the finish reason is AWAITING_APPROVAL
    And no refund was made
    When the user approves the pending call
    Then order 7 was refunded once
    And the model was told "Order 7 is refunded."
    And the user receives "Done: order 7 is refunded."
    And the finish reason is SUCCESS

  Scenario: A denial reaches the child, which answers without the call
    Given a triage bot that may ask the billing bot
    And the model calls the tool "billing" with {"question": "Refund order 7"}
    And the billing model calls the tool "refund" with {"order": 7}
    And the billing model replies "I did not refund order 7."
    And the model replies "Billing left order 7 as it was."
    When the user says "Refund order 7"
    And the user denies the pending call saying "not yet"
    Then no refund was made
    And the billing model was told "the user denied this call: not yet"
    And the user receives "Billing left order 7 as it was."

  Scenario: The child's spending counts toward the parent's budget
    # Every model call uses 1,000 tokens; the triage bot may spend 1,500 a day in a session.
    Given a triage bot with a session budget of 1500 tokens a day that may ask the billing bot
    And the model calls the tool "billing" with {"question": "Why was I charged twice?"}
    And the billing model replies "The second charge is a hold."
    When the user says "Why was I charged twice?"
    Then the finish reason is BUDGET_EXCEEDED
    And the session's budget line holds 2000 tokens
    And the usage recorded for the user's session is 2000 tokens over 2 model calls
    And nothing is recorded for the billing bot's session

  Scenario: A cycle of agents is refused when the pipeline is built
    When a triage bot that asks a billing bot that asks the triage bot is built
    Then building fails with "the agent tools form a cycle: billing -> triage -> billing"

  Scenario: A chain of agents deeper than the limit is refused when it is built
    When a chain of 3 bots each asking the next is built with max_depth 1
    Then building fails with "more than max_depth=1"

  # The help desk: the triage bot may transfer to the billing bot, which may hand back.

  Scenario: A handoff and a hand-back
    Given a help desk of a triage bot and a billing bot
    And the triage model calls the tool "transfer_to_billing" with {"reason": "a billing question"}
    And the triage model replies "Our billing assistant takes it from here."
    When the user tells the desk "Why was I charged twice?"
    Then the desk answers "Our billing assistant takes it from here."
    And the desk's session is held by "billing"
    And the session's history records the handoff from "triage" to "billing"
    Given the billing model replies "The second charge is a hold."
    When the user tells the desk "And when does it drop?"
    Then the desk answers "The second charge is a hold."
    And the billing model's last prompt contains "Why was I charged twice?"
    Given the billing model calls the tool "hand_back" with {"reason": "done"}
    And the billing model replies "Anything else? Triage can help."
    When the user tells the desk "Thanks"
    Then the desk answers "Anything else? Triage can help."
    Given the triage model replies "Hello again."
    When the user tells the desk "Something else"
    Then the desk answers "Hello again."
    And every message of the desk got exactly one answer

  Scenario: The desk finds the holder again after a restart
    Given a help desk of a triage bot and a billing bot
    And the triage model calls the tool "transfer_to_billing" with {"reason": "a billing question"}
    And the triage model replies "Billing takes it from here."
    When the user tells the desk "Why was I charged twice?"
    And the desk restarts
    Then the desk's session is held by "billing"
