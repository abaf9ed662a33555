Feature: Notes kept across attempts of a task
  Every attempt at a task appends what happened to the task's notes file, whether it
  succeeded or failed. The next attempt's prompt carries those notes as "Previous Agent
  Notes". A rejected result keeps them for the retry; an accepted one removes them.
  A claim holds for a 5-minute lease that a running attempt renews; a worker that dies
  stops renewing, and its task goes back to the queue with its notes.

  Background:
    Given the template "fix-login" asking the model to "Fix the login form"
    And a task "TASK-42" for "fix-login" in the task store

  Scenario: Notes accumulate over two failed attempts and reach the third attempt
    Given the model fails attempts 1 and 2 and succeeds afterwards
    When agent "impl-agent-1" makes 3 attempts at "TASK-42"
    Then the notes of "TASK-42" hold attempts 1 and 2 by "impl-agent-1" with "Turns: 1 | Commits: 0"
    And the prompt of attempt 3 has a "## Previous Agent Notes" section holding both attempts
    And the prompt of attempt 3 says "attempt 1 failed: the form still rejects valid passwords"
    And the prompt of attempt 3 says "attempt 2 failed: the form still rejects valid passwords"
    And "TASK-42" is provisional

  Scenario: A rejection keeps the notes and an acceptance removes them
    Given the model succeeds every attempt
    When agent "impl-agent-1" makes 1 attempt at "TASK-42"
    And "TASK-42" is rejected
    Then "TASK-42" is incoming
    And the notes of "TASK-42" hold 1 attempt
    When agent "impl-agent-2" makes 1 attempt at "TASK-42"
    Then the prompt of attempt 2 has a "## Previous Agent Notes" section holding 1 attempt
    And the notes of "TASK-42" hold 2 attempts
    When "TASK-42" is accepted
    Then "TASK-42" is done
    And "TASK-42" has no notes

  Scenario: The claim of a worker that died returns to the queue after its lease, notes intact
    Given the model fails attempt 1 and succeeds afterwards
    When agent "impl-agent-1" makes 1 attempt at "TASK-42"
    And agent "impl-agent-1" claims "TASK-42" and dies
    Then agent "impl-agent-2" finds nothing to claim
    When 5 minutes pass
    And agent "impl-agent-2" makes 1 attempt at "TASK-42"
    Then "TASK-42" is provisional
    And the prompt of attempt 2 has a "## Previous Agent Notes" section holding 1 attempt
    And the prompt of attempt 2 says "attempt 1 failed: the form still rejects valid passwords"

  Scenario: Long output is cut to its last 3,000 characters
    Given the model answers with 5000 characters ending in "FINAL STATE: login fixed"
    When agent "impl-agent-1" makes 1 attempt at "TASK-42"
    Then the notes of "TASK-42" keep only the last 3000 characters of the output after a truncation marker
    And the notes of "TASK-42" contain "FINAL STATE: login fixed"

  Scenario Outline: Task ids that could leave the notes directory are refused
    When a task "<task id>" is created
    Then the task id is refused

    Examples:
      | task id       |
      | ../etc/passwd |
      | a/b           |
      | a\b           |
      | ..            |
      | a..b          |
