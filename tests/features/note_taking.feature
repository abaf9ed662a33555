Feature: Note-taking: the agent learns from its tool use across sessions
  Tool executions are captured off the tool's path, a successful session's trajectory is
  distilled into a draft note, and later sessions get the note as context. Usage and
  feedback move notes through their lifecycle; unhelpful notes fade out.

  Background:
    Given a note-taking setup on a fake clock
    And session "s1" of user "u1" in project "p1" of team "t1" in org "o1"

  Scenario: Capture tool execution sequence
    When the agent runs these tools in session "s1":
      | tool        | parent      | after_seconds |
      | search_docs |             | 0             |
      | read_file   | search_docs | 5             |
      | run_tests   |             | 20            |
    And the capture buffer is flushed
    Then the trajectory of session "s1" lists "search_docs, read_file, run_tests" in that order
    And "read_file" is recorded as a child of "search_docs"
    And every recorded execution has its arguments, result, start time and duration
    And every recorded execution belongs to session "s1" and user "u1"

  Scenario: Capture trajectory metadata
    When the agent runs "write_file" with arguments '{"path": "a.py"}' in session "s1" and it fails with "permission denied"
    And the capture buffer is flushed
    Then the recorded "write_file" execution has arguments '{"path": "a.py"}' and error "permission denied"
    And the recorded "write_file" execution has a context snapshot with the user's message
    And the trajectory of session "s1" has the same content hash after reopening the store

  Scenario: Distill successful trajectory
    Given session "s1" ran 3 tools over 45 seconds
    When session "s1" ends successfully
    Then the model was asked once to analyse the trajectory of session "s1"
    And distillation of session "s1" reports "stored"
    And the stored note has the sections "Context, Solution, Key Patterns, Code Examples, Tags"

  Scenario: Distillation prompt structure
    Given session "s1" ran 3 tools over 45 seconds
    When session "s1" ends successfully
    Then the distillation prompt asks for these sections:
      | heading          | question                                |
      | ## Context       | What problem was being solved?          |
      | ## Solution      | What approach worked?                   |
      | ## Key Patterns  | What reusable patterns emerged?         |
      | ## Code Examples | Relevant code snippets (if applicable)  |
      | ## Tags          | Suggested categorization tags           |
    And the distillation prompt shows the 3 tool executions

  Scenario Outline: Skip distillation for trivial trajectories
    Given session "s1" ran <tools> tools over <seconds> seconds
    When session "s1" ends successfully
    Then distillation of session "s1" reports "skipped"
    And the model was not called
    And no note is stored
    And the log says distillation was skipped because "<reason>"

    Examples:
      | tools | seconds | reason                      |
      | 2     | 60      | fewer than 3                |
      | 5     | 20      | less than 30 s              |

  Scenario: Store note as pattern knowledge item
    Given session "s1" ran 3 tools over 45 seconds
    When session "s1" ends successfully
    Then the stored note has type "pattern", status "draft" and layer "project"
    And the stored note is owned by project "p1" of team "t1" in org "o1"
    And the stored note's metadata cites the trajectory of session "s1"

  Scenario: Note metadata requirements
    Given session "s1" ran 3 tools over 45 seconds
    When session "s1" ends successfully
    Then the stored note's metadata has source_trajectory_id, distillation_timestamp and llm_model_used
    And the stored note's metadata has session "s1", user "u1" and project "p1"
    And the stored note's embedding is the embedding of its markdown

  Scenario: Search notes by semantic similarity
    Given these notes in the project of session "s1":
      | title                   | text                                                            |
      | Retrying network calls  | retry flaky network calls with exponential backoff and jitter   |
      | Network timeouts        | set timeouts on network calls so a slow server cannot hang us   |
      | Baking bread            | knead the dough and let it rise for two hours                   |
    When session "s1" searches notes for "how to retry flaky network calls" with k 2 above 0.1
    Then the results are "Retrying network calls, Network timeouts" in that order
    And every result is at least 0.1 similar to the query

  Scenario: Filter notes by scope
    Given the note "deploy checklist for releases" at layer "company"
    And the note "deploy checklist for releases" at layer "org" of org "o1"
    And the note "deploy checklist for releases" at layer "team" of team "t1" in org "o1"
    And the note "deploy checklist for releases" at layer "project" of project "p1" of team "t1" in org "o1"
    And the note "deploy checklist for releases" at layer "project" of project "p9" of team "t1" in org "o1"
    And the note "deploy checklist for releases" at layer "org" of org "o2"
    When session "s1" searches notes for "deploy checklist" at layer "team"
    Then the results come from the layers "team, org, company" in that order
    When session "s1" searches notes for "deploy checklist" at layer "project"
    Then the results come from the layers "project, team, org, company" in that order

  Scenario: Track note retrieval
    Given these notes in the project of session "s1":
      | title                  | text                                                          |
      | Retrying network calls | retry flaky network calls with exponential backoff and jitter |
    When session "s2" of the same project asks the bot "how do I retry network calls?"
    Then the prompt context of that turn includes the note "Retrying network calls"
    And the note "Retrying network calls" has been retrieved 1 time
    And its retrieval is recorded with the query "how do I retry network calls?" and session "s2"

  Scenario: Track note usefulness
    Given these notes in the project of session "s1":
      | title                  | text                                                          |
      | Retrying network calls | retry flaky network calls with exponential backoff and jitter |
      | Baking bread           | knead the dough and let it rise for two hours                 |
    When session "s2" of the same project asks the bot "how do I retry network calls?"
    And the user gives positive feedback on session "s2"
    And the user gives positive feedback on session "s2"
    Then the note "Retrying network calls" has usefulness score 1
    And the note "Baking bread" has usefulness score 0

  Scenario: Deprecate low-quality notes
    Given these notes in the project of session "s1":
      | title           | text                                                     |
      | Outdated advice | retry network calls with exponential backoff             |
      | Current advice  | retry network calls with exponential backoff and jitter  |
    When session "s1" retrieves the best note for "retry network calls with exponential backoff" 11 times
    Then the note "Outdated advice" has been retrieved 11 times
    And the note "Outdated advice" is flagged for review
    And a maintainer was told that "Outdated advice" was flagged
    And the best note for "retry network calls with exponential backoff" is now "Current advice"

  Scenario: Detect duplicate during distillation
    Given session "s1" ran 3 tools over 45 seconds
    And session "s1" ended successfully
    And session "s3" of the same project ran 4 tools over 50 seconds
    When session "s3" ends successfully
    Then distillation of session "s3" reports "duplicate"
    And there is 1 note stored
    And the note distilled from session "s1" has reference count 1
    And the log says a duplicate was detected

  Scenario: Merge similar notes
    Given these notes in the project of session "s1":
      | title               | text                                                                                                                |
      | Retry with backoff  | retry failed network calls with exponential backoff and a cap on the total wait so a dead server does not stall the agent   |
      | Retry using backoff | retry failed network calls with exponential backoff and a cap on the overall wait so a dead server does not stall the agent |
      | Retry drafts        | retry failed network calls with exponential backoff and a cap on the total wait so a dead server does not stall the agent   |
    When the notes "Retry with backoff, Retry using backoff" are proposed and accepted
    Then a merge of "Retry with backoff" and "Retry using backoff" is suggested to a maintainer
    And no merge with "Retry drafts" is suggested
    And the notes "Retry with backoff, Retry using backoff, Retry drafts" are all still stored unchanged

  Scenario: Note lifecycle states
    Given session "s1" ran 3 tools over 45 seconds
    When session "s1" ends successfully
    Then the stored note has status "draft"
    When the stored note moves to "proposed", "accepted", "deprecated"
    Then the stored note has status "deprecated"
    And moving the stored note to "accepted" is refused as an invalid transition
    And a draft note can be rejected but a rejected note cannot be proposed

  Scenario: Auto-propose high-quality notes
    Given these notes in the project of session "s1":
      | title                  | text                                                          |
      | Retrying network calls | retry flaky network calls with exponential backoff and jitter |
    When 5 sessions each ask the bot "how do I retry network calls?" and give positive feedback
    Then the note "Retrying network calls" has status "draft"
    When 1 more session asks the bot "how do I retry network calls?" and gives positive feedback
    Then the note "Retrying network calls" has status "proposed"
    And a maintainer was told that "Retrying network calls" was proposed

  Scenario: Emit distillation metrics
    Given session "s1" ran 3 tools over 45 seconds
    And session "s2" ran 1 tools over 45 seconds
    And session "s4" ran 3 tools over 45 seconds and the model will fail on it
    When sessions "s1, s2, s4" end successfully
    Then the counter "note_taking.distillation.total" with status "success" is 1
    And the counter "note_taking.distillation.total" with status "skip" is 1
    And the counter "note_taking.distillation.total" with status "error" is 1
    And the histogram "note_taking.distillation.duration_ms" has 3 observations

  Scenario: Emit retrieval metrics
    Given these notes in the project of session "s1":
      | title                  | text                                                          |
      | Retrying network calls | retry flaky network calls with exponential backoff and jitter |
      | Network timeouts       | set timeouts on network calls so a slow server cannot hang us |
    When session "s1" searches notes for "network calls" with k 5 above 0.1
    Then the histogram "note_taking.retrieval.results_count" recorded 2
    And the histogram "note_taking.retrieval.latency_ms" has 1 observations

  Scenario: Asynchronous trajectory capture
    Given the trajectory store blocks every write until it is released
    And the background writer is running
    When the agent runs 12 tools in session "s1"
    Then every hand-off returned while the store was still blocked
    And the executions wait in the buffer for a batch write
    When the store is released and capture shuts down
    Then the trajectory of session "s1" holds 12 executions

  Scenario: Batch trajectory writes
    When the agent runs 9 tools in session "s1"
    And the background writer wakes
    Then 0 executions are stored
    When the agent runs 1 tools in session "s1"
    And the background writer wakes
    Then 10 executions are stored
    And the histogram "note_taking.capture.batch_size" recorded 10
    When the agent runs 3 tools in session "s1"
    And 5 seconds pass and the background writer wakes
    Then 13 executions are stored
    When the trajectory store starts failing
    And the agent runs 10 tools in session "s1"
    And the background writer wakes
    Then 13 executions are stored
    And 10 executions wait in the retry queue
    When the trajectory store recovers
    And 1 seconds pass and the background writer wakes
    Then 23 executions are stored

  Scenario: Sampling for high-volume operations
    When session "busy" runs 100 successful tools within a minute
    Then all 100 executions are kept
    When session "busy" runs 500 successful and 20 failing tools within the same minute
    Then the log says sampling is active for session "busy"
    And all 20 failing executions are kept
    And between 5% and 15% of the 500 successful executions are kept
    And the executions sampled out are counted
