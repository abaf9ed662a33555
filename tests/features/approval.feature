Feature: Tool approval
  A tool that acts for good waits for the user's approval before each call. The bot says
  which call waits and keeps it in its stores, so the user may answer after a restart;
  approving runs the call once and the model goes on to its answer, denying tells the
  model, which answers without it.

  Scenario: A call that needs approval waits for the user
    Given a pipeline with the tool "delete_file" that needs approval
    And the model calls the tool "delete_file" with {"path": "a.txt"}
    When the user says "Delete a.txt"
    Then the user is asked to approve the tool "delete_file" with {"path": "a.txt"}
    And the user receives "Before I run delete_file(path='a.txt'), I need your approval: approve or deny it."
    And the finish reason is AWAITING_APPROVAL
    And no tool ran
    And history holds only the user message

  Scenario: An approval granted after a restart
    Given a pipeline with the tool "delete_file" that needs approval
    And the model calls the tool "delete_file" with {"path": "a.txt"}
    And the model replies "a.txt is deleted."
    When the user says "Delete a.txt"
    And the bot restarts
    And the user approves the pending call
    Then the tool "delete_file" ran with {"path": "a.txt"}
    And the model was told "deleted a.txt"
    And the user receives "a.txt is deleted."
    And the finish reason is SUCCESS
    And history holds the user message and "a.txt is deleted."

  Scenario: An approval denied
    Given a pipeline with the tool "delete_file" that needs approval
    And the model calls the tool "delete_file" with {"path": "a.txt"}
    And the model replies "I left a.txt alone."
    When the user says "Delete a.txt"
    And the user denies the pending call saying "keep it"
    Then no tool ran
    And the model was told "the user denied this call: keep it"
    And the user receives "I left a.txt alone."
    And the finish reason is SUCCESS

  Scenario: An approval is used once
    Given a pipeline with the tool "delete_file" that needs approval
    And the model calls the tool "delete_file" with {"path": "a.txt"}
    And the model replies "a.txt is deleted."
    When the user says "Delete a.txt"
    And the user approves the pending call
    And the user approves the pending call again
    Then no tool ran
    And the user receives "Sorry, that approval was already answered or does not exist."
    And the finish reason is ERROR
