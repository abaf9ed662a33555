Feature: Tenancy
  A session belongs to one tenant chain: company, org, team, project and user. What the
  bot stored for one chain never reaches another, even when the other reuses its ids.

  Scenario: Another org reusing a project id does not see the first org's answers
    Given a pipeline
    And the model replies "The shop opens at nine."
    And the model replies "I do not know the opening hours yet."
    And the model replies "It opens at nine, as I said."
    And the session is in org "acme" and project "shop"
    When the user says "When does the shop open?"
    And the session is in org "globex" and project "shop"
    And the user says "When does the shop open?"
    Then the model's prompt does not contain "The shop opens at nine."
    And the user receives "I do not know the opening hours yet."
    And memory holds "I do not know the opening hours yet."
    And the RAG index finds "I do not know the opening hours yet." for "shop opening hours"
    When the session is in org "acme" and project "shop"
    And the user starts a new session
    And the user says "When does the shop open?"
    Then the model's prompt contains "The shop opens at nine."
