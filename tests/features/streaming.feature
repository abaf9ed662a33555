Feature: Streamed answers
  The user watches the answer appear while the model writes it. What they are left with
  is the canonical answer, the one the bot stores; an answer cut off midway is withdrawn,
  the user is told, and nothing of it is stored.

  Scenario: A streamed answer
    Given a pipeline
    And the model streams in pieces of 5 characters
    And the model replies "It is sunny in Oslo today."
    When the user says "Weather in Oslo?"
    Then the user saw "It is sunny in Oslo today." appear piece by piece
    And the streamed message was closed with "It is sunny in Oslo today."
    And the user receives "It is sunny in Oslo today."
    And the finish reason is SUCCESS
    And history holds the user message and "It is sunny in Oslo today."
    And memory holds "It is sunny in Oslo today."

  Scenario: A stream cut off midway
    Given a pipeline
    And the model streams in pieces of 5 characters
    And the model starts replying "It is sunny in Oslo today." but its stream is cut off after 3 pieces
    When the user says "Weather in Oslo?"
    Then the user saw "It is sunny in " appear piece by piece
    And the streamed message was withdrawn
    And the user receives "My answer was cut off before I could finish it. Please try again."
    And the finish reason is ERROR
    And a failure from LLM of kind UNKNOWN is recorded
    And history holds only the user message
    And memory is empty
    And the RAG index is empty

  Scenario: A streamed tool call
    Given a pipeline
    And the model streams in pieces of 4 characters
    And the model says "Let me check. " and calls the tool "weather" with {"city": "Oslo"}
    And the model replies "It is sunny in Oslo."
    When the user says "Weather in Oslo?"
    Then the tool "weather" ran with {"city": "Oslo"}
    And the model was told "sunny"
    And the user saw "Let me check. It is sunny in Oslo." appear piece by piece
    And the streamed message was closed with "It is sunny in Oslo."
    And history holds the user message and "It is sunny in Oslo."

  Scenario: A slow first token under a deadline
    Given a pipeline with a turn deadline of 0.05 seconds
    And the model takes 1 seconds to answer
    And the model replies "Too late."
    When the user says "Hello?"
    Then nothing was streamed
    And the user receives "I ran out of time before finishing. Please try again."
    And the finish reason is DEADLINE
    And history is empty
    And memory is empty
