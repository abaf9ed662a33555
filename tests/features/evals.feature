Feature: Evaluating a bot on a dataset
  Each case of a dataset is a conversation on a fresh session of the bot; each of its
  expectations is a check in the report, and a later report is compared with an earlier one.

  Background:
    Given a pipeline

  Scenario: A case that meets its expectations passes and one that does not fails
    Given the model replies "Hello! How can I help?"
    And the model replies "I am not sure."
    And the eval dataset "evals/greetings.yaml"
    When the dataset is evaluated
    Then the case "greets" passes
    And the case "knows the capital" fails
    And the check "answer" of the case "knows the capital" fails saying "does not contain 'Paris'"
    And the pass rate is at least 0.5

  Scenario: The tools called are checked by name, order and arguments
    Given the model calls the tool "find_order" with {"order_id": "A-17"}
    And the model calls the tool "refund" with {"order_id": "A-17", "amount": 20}
    And the model replies "Refunded 20 on order A-17."
    And the model calls the tool "refund" with {"order_id": "B-2", "amount": 5}
    And the model replies "Refunded."
    And the eval dataset "evals/refunds.yaml"
    When the dataset is evaluated
    Then the case "refunds after looking the order up" passes
    And the check "tools" of the case "never refunds blind" fails saying "expected find_order -> refund in that order, ran refund"

  Scenario: An LLM judge decides criteria from the transcript
    Given the model replies "Sorry for the wait: your parcel arrives on Tuesday."
    And the judge model answers {"pass": true, "reason": "it apologises and gives a day"}
    And the judge model answers {"pass": false, "reason": "it gives no tracking number"}
    And the eval dataset "evals/judged.yaml"
    When the dataset is evaluated
    Then the check "judge: apologises for the delay" of the case "late parcel" passes
    And the check "judge: gives a tracking number" of the case "late parcel" fails saying "no tracking number"

  Scenario: A budget expectation bounds the model calls and tokens of a conversation
    Given the model calls the tool "find_order" with {"order_id": "A-17"}
    And the model replies "Order A-17 ships today."
    And the eval dataset "evals/budget.yaml"
    When the dataset is evaluated
    Then the check "budget" of the case "answers in one call" fails saying "2 LLM calls > 1"
    And the check "finish_reason" of the case "answers in one call" passes

  Scenario: A case passing less often than in the baseline is a regression, and the command fails
    Given a baseline written by agentloop eval of "evals/greetings.yaml" on "eval_kit:knowing_bot"
    When agentloop eval runs "evals/greetings.yaml" on "eval_kit:unsure_bot" against the baseline
    Then the command exits with status 1 naming the regression "knows the capital: pass rate 100% -> 0%"
