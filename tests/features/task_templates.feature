Feature: XML task templates
  A template describes work as atomic, sequential, reduce and script tasks. Each
  operator has context-management defaults (the table in docs/tasks.md); a template may override
  any of them, and the merged settings are checked when the template is registered.
  The evaluator runs an atomic task as one auto-mode turn of an AgentLoop.

  Scenario Outline: Each operator loads with its defaults
    Given the templates in "operators.xml" are registered with scripts allowed
    Then "<task>" has inherit_context "<inherit>", accumulate_data "<accumulate>", accumulation_format "<format>" and fresh_context "<fresh>"

    Examples:
      | task                  | inherit | accumulate | format     | fresh    |
      | summarize             | full    | n/a        | n/a        | disabled |
      | lookup                | none    | n/a        | n/a        | enabled  |
      | report                | full    | true       | notes_only | disabled |
      | total                 | none    | n/a        | n/a        | enabled  |
      | total.inner_task      | full    | n/a        | n/a        | disabled |
      | total.reduction_task  | full    | n/a        | n/a        | disabled |
      | count-lines           | full    | n/a        | n/a        | disabled |

  Scenario: A template overrides part of the settings and keeps the other defaults
    When this template is registered:
      """
      <task name="brief" type="sequential">
        <description>Write a brief</description>
        <context_management>
          <accumulation_format>full_output</accumulation_format>
        </context_management>
        <steps><task type="atomic"><description>Draft</description></task></steps>
      </task>
      """
    Then "brief" has inherit_context "full", accumulate_data "true", accumulation_format "full_output" and fresh_context "disabled"

  Scenario Outline: An invalid combination is refused at registration with file and line
    When the template file "<file>" is registered
    Then registration fails with "<file> line <line>: <message>"

    Examples:
      | file                     | line | message                                                   |
      | fresh_with_full.xml      | 5    | fresh_context=enabled needs inherit_context=none (it is full)   |
      | fresh_with_subset.xml    | 6    | fresh_context=enabled needs inherit_context=none (it is subset) |
      | fresh_sequence.xml       | 5    | fresh_context=enabled needs inherit_context=none (it is full)   |
      | accumulate_on_atomic.xml | 4    | accumulate_data applies only to sequential tasks, not to atomic tasks |
      | format_on_reduce.xml     | 6    | accumulation_format applies only to sequential tasks, not to reduce tasks |

  Scenario: A task that would see no context at all loads with a warning
    When this template is registered:
      """
      <task name="blind" type="atomic">
        <description>Guess</description>
        <context_management>
          <inherit_context>none</inherit_context>
        </context_management>
      </task>
      """
    Then registration warns "line 3: inherit_context=none with no accumulation and fresh_context=disabled gives the task no context at all"
    And "blind" is registered

  Scenario: With notes_only the next step sees the notes of the earlier step and not its output
    Given the templates in "report.xml" are registered
    And the model answers "List facts about cats" with "Cats purr and sleep." and notes {"facts": ["purr", "sleep"], "confidence": 0.9}
    When "report-notes" runs with topic "cats"
    Then turn 2 sees the previous steps exactly:
      """
      ### step-1
      Notes: {"facts": ["purr", "sleep"], "confidence": 0.9}
      """
    And turn 2 keeps no output of "step-1"

  Scenario: With full_output the next step sees the output and the notes of the earlier step
    Given the templates in "report.xml" are registered
    And the model answers "List facts about cats" with "Cats purr and sleep." and notes {"facts": ["purr", "sleep"], "confidence": 0.9}
    When "report-full" runs with topic "cats"
    Then turn 2 sees the previous steps exactly:
      """
      ### step-1
      Notes: {"facts": ["purr", "sleep"], "confidence": 0.9}
      Output:
      Cats purr and sleep.
      """

  Scenario: Reduce folds three inputs with an accumulator
    Given the templates in "operators.xml" are registered with scripts allowed
    When "total" runs over the items "a, b, c"
    Then the result is "Merge [Merge [Merge [] with [Summarize a]] with [Summarize b]] with [Summarize c]"
    And 6 turns ran

  Scenario: A script task runs a command without a shell
    Given the templates in "operators.xml" are registered with scripts allowed
    And a file "poem.txt" with 3 lines
    When "count-lines" runs with path of "poem.txt"
    Then the result starts with "3 "
    And the result notes say exit_code 0

  Scenario: A script task is refused unless scripts are allowed
    When the template file "operators.xml" is registered
    Then registration fails with "operators.xml line 21: script task 'count-lines' is refused"

  Scenario: CONTINUATION spawns a subtask with the subtask defaults
    Given these templates are registered:
      """
      <templates>
        <task name="research" type="atomic"><description>Research {{topic}}</description></task>
        <task name="lookup" type="atomic"><description>Look up {{query}}</description></task>
      </templates>
      """
    And the model asks for subtask "lookup" with query "cat sleep" before answering "Research cats"
    When "research" runs with topic "cats" and context "conversation" = "we talked about pets"
    Then turn 1 is "Research cats" with fresh_context off and context "conversation"
    And turn 2 is "Look up cat sleep" with fresh_context on and no context
    And turn 3 sees the subtask results exactly:
      """
      ### lookup
      Notes: {"answered": "Look up cat sleep"}
      Output:
      answer to Look up cat sleep
      """
    And the result is "answer to Research cats"

  Scenario: A subtask cycle is refused
    Given these templates are registered:
      """
      <templates>
        <task name="ping" type="atomic"><description>Ping</description></task>
        <task name="pong" type="atomic"><description>Pong</description></task>
      </templates>
      """
    And the model asks "Ping" for subtask "pong" and "Pong" for subtask "ping"
    When "ping" runs
    Then the run fails with reason "subtask_cycle" and a message containing "ping -> pong -> ping"

  Scenario: Subtasks nest no deeper than the depth limit
    Given a chain of 7 templates "level-0" to "level-6", each asking for the next as a subtask
    When "level-0" runs with a depth limit of 5
    Then the run exhausts "subtask_depth" at 6 of 5
    And 6 turns ran

  Scenario: A failing step stops the sequence and keeps the partial results
    Given the templates in "report.xml" are registered
    And the model answers "Fetch the feed" with "raw rows" and notes {"rows": 3}
    And the model fails "Parse the data" because "the rows are not CSV"
    When "pipeline" runs with source "the feed"
    Then the run fails with reason "subtask_failure" and a message containing "stopped at step 2 of 3"
    And the failure names step 2 of 3 with the partial result of "fetch" being "raw rows"
    And 2 turns ran
