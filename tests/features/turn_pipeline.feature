Feature: The standard turn pipeline
  A user always gets an answer, the finish reason says why the turn ended, and the bot
  stores exactly the canonical answer, after it was delivered.

  Scenario: Happy path with two tool calls
    Given a pipeline
    And the model calls the tool "weather" with {"city": "Oslo"}
    And the model calls the tool "weather" with {"city": "Bergen"}
    And the model replies "Oslo is sunny and Bergen is rainy."
    When the user says "Weather in Oslo and Bergen?"
    Then the user receives "Oslo is sunny and Bergen is rainy."
    And the finish reason is SUCCESS
    And no failure is recorded
    And the tools ran in order: weather, weather
    And history holds the user message and "Oslo is sunny and Bergen is rainy."
    And memory holds "Oslo is sunny and Bergen is rainy."
    And the RAG index finds "Oslo is sunny and Bergen is rainy." for "is Bergen rainy"

  Scenario: The model fails
    Given a pipeline
    And the model fails with a rate limit error
    When the user says "Hello?"
    Then the user receives a fallback message
    And the finish reason is ERROR
    And a failure from LLM of kind RATE_LIMIT is recorded
    And history holds only the user message
    And memory is empty
    And the RAG index is empty

  Scenario: A failed turn after an answered one stores only its user message
    Given a pipeline
    And the model replies "Hello, Ada."
    And the model fails with a rate limit error
    When the user says "Hi, I am Ada"
    And the user says "What is my name?"
    Then the user receives a fallback message
    And history holds only the user message
    And memory holds "Hello, Ada."

  Scenario: The model produces no output at all
    Given a pipeline
    And the model returns an empty reply
    When the user says "Hello?"
    Then the user receives a fallback message
    And the finish reason is ERROR
    And a failure from LLM of kind VALIDATION is recorded
    And history holds only the user message
    And memory is empty
    And the RAG index is empty

  Scenario: The transport fails
    Given a pipeline
    And the model replies "Here is your answer."
    And the channel cannot deliver
    When the user says "Hello?"
    Then the user receives nothing
    And the delivery failed with "the chat service is unreachable"
    And a failure from TRANSPORT of kind EXCEPTION is recorded
    And the finish reason is SUCCESS
    And history holds the user message and "Here is your answer."
    And memory holds "Here is your answer."

  Scenario: Plan mode proposes tool calls without running them
    Given a pipeline in plan mode
    And the model calls the tool "weather" with {"city": "Oslo"}
    When the user says "Weather in Oslo?"
    Then the user receives the plan "1. weather(city='Oslo')"
    And the finish reason is PLAN_MODE
    And no tool ran

  Scenario: A voice response
    Given a pipeline
    And the model calls the tool "send_voice" with {"text": "It is sunny in Oslo."}
    And the model replies "It is sunny in Oslo."
    When the user says "Say the weather"
    Then the user receives a voice message "It is sunny in Oslo."
    And the user receives no text
    And the finish reason is SUCCESS
    And memory holds "It is sunny in Oslo."

  Scenario: A response with only an attachment
    Given a pipeline
    And the model calls the tool "chart" with {"title": "sales"}
    And the model returns an empty reply
    When the user says "Chart the sales"
    Then the user receives the attachment "sales.png"
    And the user receives no text
    And the finish reason is SUCCESS
    And no failure is recorded
    And memory is empty

  Scenario: The iteration limit stops a looping model
    Given a pipeline that allows 2 model calls
    And the model calls the tool "weather" with {"city": "Oslo"}
    And the model calls the tool "weather" with {"city": "Oslo"}
    And the model calls the tool "weather" with {"city": "Oslo"}
    When the user says "Weather?"
    Then the user receives a fallback message
    And the finish reason is ITERATION_LIMIT
    And memory is empty
    And the RAG index is empty

  Scenario: The turn deadline passes while the model thinks
    Given a pipeline with a turn deadline of 0.05 seconds
    And the model takes 1 seconds to answer
    And the model replies "Too late."
    When the user says "Hello?"
    Then the user receives a fallback message
    And the finish reason is DEADLINE
    And a failure from SYSTEM of kind TIMEOUT is recorded
    And history is empty
    And memory is empty

  Scenario: A system that raises does not stop the turn
    Given a pipeline with a system "FlakySystem" that raises
    And the model replies "Still here."
    When the user says "Hello?"
    Then the user receives "Still here."
    And a failure from the system "FlakySystem" is recorded
    And the finish reason is SUCCESS
    And memory holds "Still here."

  Scenario: A system that reads what it did not declare is stopped, and the turn goes on
    Given a pipeline with a system "Snooper" that reads the prompt without declaring it
    And the model replies "Still here."
    When the user says "Hello?"
    Then the user receives "Still here."
    And a failure from SYSTEM of kind VALIDATION is recorded
    And a failure from the system "Snooper" is recorded
    And memory holds "Still here."

  Scenario: A tool that raises is reported to the model
    Given a pipeline
    And the model calls the tool "explode"
    And the model replies "That tool is broken, sorry."
    When the user says "Try the tool"
    Then the user receives "That tool is broken, sorry."
    And a failure from TOOL of kind EXCEPTION is recorded
    And the model was told "error: RuntimeError: the tool is broken"
    And the finish reason is SUCCESS

  Scenario: An auto-mode turn sends nothing but builds its outcome
    Given a pipeline
    And the model replies "Summary: all good."
    When an automatic task says "Summarize the day"
    Then the user receives nothing
    And the assistant text is "Summary: all good."
    And the finish reason is SUCCESS
    And routing was not attempted
    And memory holds "Summary: all good."
