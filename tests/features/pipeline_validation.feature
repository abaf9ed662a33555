Feature: Pipeline mistakes are caught when the pipeline is built
  Building an AgentLoop checks the systems' declared reads and writes. A mistake is a
  PipelineError naming both systems and the component type, before any turn runs.

  Scenario: Two systems with the same name are refused
    Given a system "Greeter" at order 10
    And a system "Greeter" at order 20
    When the pipeline is built
    Then building fails with a message containing "duplicate system name 'Greeter'"

  Scenario: Reading a component that only a later system writes is refused
    Given a system "Reviewer" at order 10 that reads "Draft"
    And a system "Drafter" at order 20 that writes "Draft"
    When the pipeline is built
    Then building fails with a message containing "Reviewer (order 10) reads Draft"
    And the message also contains "written only by Drafter (order 20)"

  Scenario: The same read is accepted when the component is a turn input
    Given a system "Reviewer" at order 10 that reads "Draft"
    And a system "Drafter" at order 20 that writes "Draft"
    And "Draft" is declared as a turn input
    When the pipeline is built
    Then the pipeline runs "Reviewer, Drafter" in that order

  Scenario: An optional read that only a later system writes is refused too
    Given a system "Reviewer" at order 10 that reads "Draft" when present
    And a system "Drafter" at order 20 that writes "Draft"
    When the pipeline is built
    Then building fails with a message containing "Reviewer (order 10) reads Draft"
    And the message also contains "written only by Drafter (order 20)"

  Scenario: An optional read that no system writes is accepted
    Given a system "Reviewer" at order 10 that reads "Draft" when present
    When the pipeline is built
    Then the pipeline runs "Reviewer" in that order

  Scenario: Two systems of equal order writing the same type are refused
    Given a system "FastDrafter" at order 10 that writes "Draft"
    And a system "SlowDrafter" at order 10 that writes "Draft"
    When the pipeline is built
    Then building fails with a message containing "FastDrafter and SlowDrafter both have order 10 and both write Draft"

  Scenario: describe() renders the ordered table
    Given a system "Reviewer" at order 20 that reads "Draft" and writes "Review"
    And a system "Drafter" at order 10 that writes "Draft"
    When the pipeline is built
    Then its description is
      """
      order  name      reads  writes
      -----  --------  -----  ------
      10     Drafter   -      Draft
      20     Reviewer  Draft  Review
      """

  Scenario: describe() renders the pipeline as Mermaid
    Given a system "Reviewer" at order 20 that reads "Draft" and writes "Review"
    And a system "Drafter" at order 10 that writes "Draft"
    When the pipeline is built
    Then its Mermaid description is
      """
      flowchart TD
          s0["10 Drafter"]
          s1["20 Reviewer"]
          s0 --> s1
          s0 -. Draft .-> s1
      """
