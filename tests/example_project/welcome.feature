Feature: A welcome on the first answer of a conversation
  The bot puts a welcome in front of its first answer in each conversation. Only the
  user sees it: history and memory keep the model's own words.

  Scenario: The first answer starts with the welcome
    Given a pipeline
    And the model replies "Hello, how can I help?"
    When the user says "Hi"
    Then the user receives "Welcome! Hello, how can I help?"
    And the finish reason is SUCCESS
    And no failure is recorded
    And history holds the user message and "Hello, how can I help?"
    And memory holds "Hello, how can I help?"

  Scenario: Later answers come without it
    Given a pipeline
    And the model replies "Hello."
    And the model replies "It is noon."
    When the user says "Hi"
    And the user says "What time is it?"
    Then the user receives "It is noon."

  Scenario: A new conversation is welcomed again, and remembers the last one
    Given a pipeline
    And the model replies "Hello."
    And the model replies "Hello again."
    When the user says "Hi"
    And the user starts a new session
    And the user says "Hi"
    Then the user receives "Welcome! Hello again."
    And the model's prompt contains "You: Hello."

  Scenario: The welcome can be changed
    Given the bot welcomes with "Hej!"
    And a pipeline
    And the model replies "Hello."
    When the user says "Hi"
    Then the user receives "Hej! Hello."

  Scenario: A fallback is not dressed up as a welcome
    Given a pipeline
    And the model fails with a timeout error
    When the user says "Hi"
    Then the user receives a fallback message
    And the finish reason is ERROR
    And a failure from LLM of kind TIMEOUT is recorded
    And memory is empty
