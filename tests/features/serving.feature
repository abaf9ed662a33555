Feature: Serving a bot over HTTP
  `agentloop serve` puts a bot behind an HTTP API: each bearer token stands for one user in
  one tenant chain, a session belongs to the chain that created it, replies stream as
  Server-Sent Events, and a user's feedback teaches the bot which notes helped.

  Background:
    Given a bot served over HTTP where alice works in org "acme" team "support" and bob in org "globex"

  Scenario: A reply streams to the client while the model is still writing
    Given the model writes "Hel" and then, after a pause, "lo there"
    And alice has a session
    When alice sends "hi" asking for a stream
    Then alice sees the delta "Hel" before the model has finished
    And the stream ends with one outcome whose text is "Hello there"

  Scenario: A wrong token is refused
    Given alice has a session
    When someone sends "hi" to alice's session with the token "not-a-token-anyone-was-given"
    Then the answer is 401 with the code "unauthorized"

  Scenario: Another tenant's session does not exist for them
    Given alice has a session
    And alice has said "our launch date is secret"
    When bob reads the history of alice's session
    Then the answer is 404 with the code "not_found"
    And the answer does not contain "launch date"

  Scenario: A token over its rate limit is told when to come back
    Given the server allows each token 2 requests at once
    When alice asks who she is 3 times
    Then the answer is 429 with the code "rate_limited"
    And the answer says to retry after some seconds
    And bob can still ask who he is

  Scenario: Feedback on an answer credits the note it was shown
    Given a note for alice's team says "page through rate-limited APIs and verify the totals"
    And alice has a session
    When alice sends "how do I page through rate-limited APIs?"
    And alice rates that answer as good
    Then 1 note is credited
    And the note's usefulness is 1

  Scenario: A tool call approved after the server restarted runs once
    Given the bot's tool delete_file runs only with the user's approval
    And the model asks to delete "a.txt" and then says "a.txt is gone."
    And alice has a session
    When alice sends "please delete a.txt"
    Then the answer awaits approval of delete_file for "a.txt"
    And nothing is deleted
    When the server restarts
    And alice approves that call
    Then "a.txt" is deleted
    And the answer says "a.txt is gone."
    When alice approves that call
    Then the answer is 404 with the code "not_found"
    And "a.txt" is deleted once

  Scenario: A denied tool call does not run and the model is told
    Given the bot's tool delete_file runs only with the user's approval
    And the model asks to delete "a.txt" and then says "Understood, I left a.txt alone."
    And alice has a session
    When alice sends "please delete a.txt"
    And alice denies that call
    Then nothing is deleted
    And the answer says "Understood, I left a.txt alone."
    And the model was told the call was denied

  Scenario: An A2A agent's task waits for the user's approval and resumes with it
    Given the bot's tool delete_file runs only with the user's approval
    And the model asks to delete "a.txt" and then says "a.txt is gone."
    When an A2A client with alice's token sends "please delete a.txt"
    Then the A2A task is input-required for delete_file
    And nothing is deleted
    When the A2A client answers the task with "approve"
    Then the A2A task is completed with the answer "a.txt is gone."
    And "a.txt" is deleted once
    And bob's A2A client does not find that task

  Scenario: An AG-UI client runs the bot, answers its interrupt on the same thread, and another tenant cannot join
    Given the bot's tool delete_file runs only with the user's approval
    And the model asks to delete "a.txt" and then says "a.txt is gone."
    When alice runs "please delete a.txt" over AG-UI in the thread "chat-1"
    Then the AG-UI run ends with an interrupt for delete_file
    And nothing is deleted
    When alice resumes the thread "chat-1" over AG-UI approving the call
    Then the AG-UI run shows the tool's result "deleted a.txt" and then says "a.txt is gone."
    And "a.txt" is deleted
    When bob runs "let me in" over AG-UI in alice's session
    Then the answer is 404 with the code "not_found"

  Scenario: An OpenAI client's conversation is a session its tenant alone continues
    When alice asks through the OpenAI API "one"
    And alice asks through the OpenAI API "two" in the same session
    Then the OpenAI answer is "echo: two"
    And the session's history through the native API is "one", "echo: one", "two", "echo: two"
    When bob asks through the OpenAI API "what was said?" in alice's session
    Then the OpenAI API answers 404 with the code "not_found"

  Scenario: An MCP client asks the bot through the ask tool, in a session only its tenant sees
    When alice asks "hello" through MCP
    And alice asks "again" through MCP in the same session
    Then the MCP answer says "echo: again"
    And alice's session holds both exchanges over the native API
    When bob asks "what did alice say?" through MCP in alice's session
    Then the MCP answer is an error saying there is no such session
