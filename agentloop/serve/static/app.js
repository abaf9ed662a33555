// The chat page of `agentloop serve`: plain JavaScript over the server's /v1 HTTP API, no build step.
"use strict";

(() => {
  const TOKEN_KEY = "agentloop.token";
  const SESSION_KEY = "agentloop.session";
  const UNREACHABLE = "The server cannot be reached. Check that it is running and that you are online, then try again.";
  const CUT_OFF = "The connection closed before the answer was complete. Send your message again.";

  const $ = (id) => document.getElementById(id);
  let token = sessionStorage.getItem(TOKEN_KEY);
  let sessionId = sessionStorage.getItem(SESSION_KEY);

  /** An error whose message a user can read and act on; `reached` is false when the request never got to the server. */
  class PageError extends Error {
    constructor(message, { reached = true, status = null } = {}) {
      super(message);
      this.reached = reached;
      this.status = status;
    }
  }

  function showError(message) {
    $("error").textContent = message;
    $("error").hidden = false;
  }

  function clearError() {
    $("error").textContent = "";
    $("error").hidden = true;
  }

  function setStatus(text) {
    $("status").textContent = text;
  }

  /** Calls the API with the token; a network failure or an error answer becomes a PageError with the server's message. */
  async function call(method, path, body, accept = "application/json") {
    const headers = { Authorization: `Bearer ${token}`, Accept: accept };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    } catch (_) {
      throw new PageError(UNREACHABLE, { reached: false });
    }
    if (!response.ok) throw new PageError(await errorMessage(response), { status: response.status });
    return response;
  }

  async function errorMessage(response) {
    try {
      const body = await response.json();
      if (body && body.error && body.error.message) return body.error.message;
    } catch (_) {
      // not the API's JSON error: say what the server answered instead
    }
    return `The server answered ${response.status} ${response.statusText}. Try again later.`;
  }

  async function callJson(method, path, body) {
    return (await call(method, path, body)).json();
  }

  /** Server-Sent Events read from a fetch response (EventSource cannot send the Authorization header). */
  async function* serverEvents(response) {
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (_) {
        throw new PageError(CUT_OFF);
      }
      if (chunk.done) return;
      buffer = (buffer + chunk.value).replace(/\r\n/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = parseEvent(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
        if (event) yield event;
      }
    }
  }

  function parseEvent(block) {
    let name = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line === "" || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") name = value;
      else if (field === "data") data.push(value);
    }
    return data.length ? { name, data: JSON.parse(data.join("\n")) } : null;
  }

  function addMessage(role, text) {
    const item = document.createElement("li");
    item.className = `message ${role}`;
    const who = document.createElement("span");
    who.className = "visually-hidden";
    who.textContent = role === "user" ? "You said:" : "Assistant:";
    const body = document.createElement("div");
    body.className = "text";
    body.textContent = text;
    item.append(who, body);
    $("transcript").append(item);
    item.scrollIntoView({ block: "end" });
    return item;
  }

  function addNotice(text) {
    const item = document.createElement("li");
    item.className = "notice";
    item.textContent = text;
    $("transcript").append(item);
  }

  /** The API path of `suffix` in a session: the current one unless an answer names the session it belongs to. */
  function sessionPath(suffix, session = sessionId) {
    return `/v1/sessions/${encodeURIComponent(session)}/${suffix}`;
  }

  /** Runs one turn (a message, or an approval decision) and streams its answer into a new assistant bubble. */
  async function runTurn(suffix, body, session) {
    const bubble = addMessage("assistant", "");
    const text = bubble.querySelector(".text");
    bubble.setAttribute("aria-busy", "true");
    try {
      const response = await call("POST", sessionPath(suffix, session), body, "text/event-stream");
      let outcome = null;
      if (!(response.headers.get("Content-Type") || "").startsWith("text/event-stream")) {
        outcome = await response.json();
      } else {
        for await (const event of serverEvents(response)) {
          if (event.name === "delta") text.textContent += event.data.text;
          else if (event.name === "reset") text.textContent = "";
          else if (event.name === "outcome") outcome = event.data;
          bubble.scrollIntoView({ block: "end" });
        }
      }
      if (!outcome) throw new PageError(CUT_OFF);
      finish(bubble, outcome, session);
    } catch (error) {
      bubble.classList.add("broken");
      if (!text.textContent) bubble.remove();
      throw error;
    } finally {
      bubble.removeAttribute("aria-busy");
    }
  }

  /** Shows the outcome: exactly the text the user receives, what went wrong, feedback buttons and any approval request. */
  function finish(bubble, outcome, session) {
    const text = bubble.querySelector(".text");
    text.textContent = outcome.text ?? "";
    if (!outcome.text) text.classList.add("empty");
    if (outcome.finish_reason !== "success" && outcome.finish_reason !== "awaiting_approval") {
      const reason = document.createElement("p");
      reason.className = "reason";
      const failures = (outcome.failures || []).join("; ");
      const how = `This turn ended with “${outcome.finish_reason.replace(/_/g, " ")}”`;
      reason.textContent = failures ? `${how} (${failures}).` : `${how}.`;
      bubble.append(reason);
    }
    if (outcome.turn_id) bubble.append(feedbackButtons(session, outcome.turn_id));
    if (outcome.approval) bubble.append(approvalRequest(session, outcome.approval));
  }

  function feedbackButtons(session, turnId) {
    const group = $("answer-tools").content.firstElementChild.cloneNode(true);
    const buttons = group.querySelectorAll("button");
    const credited = group.querySelector(".credited");
    const give = async (button, positive) => {
      clearError();
      buttons.forEach((b) => (b.disabled = true));
      try {
        const result = await callJson("POST", sessionPath("feedback", session), { turn_id: turnId, positive });
        button.setAttribute("aria-pressed", "true");
        const notes = result.credited === 1 ? "1 note" : `${result.credited} notes`;
        credited.textContent = positive ? `Thanks for your feedback (credited ${notes}).` : "Thanks for your feedback.";
      } catch (error) {
        buttons.forEach((b) => (b.disabled = false));
        showError(error.message);
      }
    };
    group.querySelector(".good").addEventListener("click", (event) => give(event.currentTarget, true));
    group.querySelector(".bad").addEventListener("click", (event) => give(event.currentTarget, false));
    return group;
  }

  function approvalRequest(session, approval) {
    const box = $("approval-request").content.firstElementChild.cloneNode(true);
    box.querySelector(".tool").textContent = approval.tool;
    box.querySelector(".arguments").textContent = JSON.stringify(approval.arguments, null, 2);
    const buttons = box.querySelectorAll("button");
    const decide = async (approve) => {
      buttons.forEach((b) => (b.disabled = true));
      const failed = await turn(`approvals/${encodeURIComponent(approval.approval_id)}`, { approve }, session);
      if (!failed) {
        const decided = document.createElement("p");
        decided.className = "decided";
        decided.textContent = approve ? `You approved ${approval.tool}.` : `You denied ${approval.tool}.`;
        box.replaceChildren(decided);
      } else {
        buttons.forEach((b) => (b.disabled = false));
      }
    };
    box.querySelector(".approve").addEventListener("click", () => decide(true));
    box.querySelector(".deny").addEventListener("click", () => decide(false));
    return box;
  }

  /** Runs a turn with the page marked busy; returns null when it finished, else the error it shows. */
  async function turn(suffix, body, session = sessionId) {
    clearError();
    $("send").disabled = true;
    setStatus("The assistant is answering…");
    try {
      await runTurn(suffix, body, session);
      return null;
    } catch (error) {
      showError(error.message);
      return error;
    } finally {
      $("send").disabled = false;
      setStatus("");
    }
  }

  async function send(event) {
    event.preventDefault();
    const input = $("message");
    const text = input.value.trim();
    if (!text || $("send").disabled) return;
    clearError();
    if (!sessionId) {
      try {
        sessionId = (await callJson("POST", "/v1/sessions")).session_id;
        sessionStorage.setItem(SESSION_KEY, sessionId);
      } catch (error) {
        showError(error.message);
        return;
      }
    }
    input.value = "";
    const mine = addMessage("user", text);
    const failed = await turn("messages", { text });
    if (failed && !failed.reached) {
      mine.remove();
      if (!input.value) input.value = text;
    }
  }

  async function endSession() {
    clearError();
    if (!sessionId) {
      setStatus("There is no session to end yet.");
      return;
    }
    try {
      const ended = await callJson("POST", sessionPath("end"));
      forgetSession();
      addNotice(`Session ended; learning from it: ${ended.status} (${ended.reason}). Your next message starts a new session.`);
    } catch (error) {
      showError(error.message);
    }
  }

  function forgetSession() {
    sessionId = null;
    sessionStorage.removeItem(SESSION_KEY);
  }

  /** Checks the token with GET /v1/me, keeps it for this tab, and shows the chat with the session's history. */
  async function logIn(candidate) {
    clearError();
    token = candidate;
    let me;
    try {
      me = await callJson("GET", "/v1/me");
    } catch (error) {
      token = null;
      sessionStorage.removeItem(TOKEN_KEY);
      showError(error.message);
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, token);
    const chain = [me.tenant.org, me.tenant.team, me.tenant.project].filter(Boolean).join(" / ");
    $("who").textContent = chain ? `${me.user} · ${chain}` : me.user;
    $("who").hidden = false;
    $("login").hidden = true;
    $("chat").hidden = false;
    $("message").focus();
    await showHistory();
  }

  async function showHistory() {
    $("transcript").replaceChildren();
    if (!sessionId) return;
    try {
      const history = await callJson("GET", sessionPath("messages"));
      for (const message of history.messages) addMessage(message.role, message.text);
    } catch (error) {
      if (error.status === 404) forgetSession();
      else showError(error.message);
    }
  }

  function logOut() {
    token = null;
    forgetSession();
    sessionStorage.removeItem(TOKEN_KEY);
    $("transcript").replaceChildren();
    $("who").hidden = true;
    $("chat").hidden = true;
    $("login").hidden = false;
    $("token").value = "";
    $("token").focus();
  }

  $("login").addEventListener("submit", (event) => {
    event.preventDefault();
    logIn($("token").value.trim());
  });
  $("compose").addEventListener("submit", send);
  $("message").addEventListener("keydown", (event) => {
    if (event.key !== "Enter" || event.shiftKey) return;
    event.preventDefault();
    $("compose").requestSubmit();
  });
  $("end").addEventListener("click", endSession);
  $("logout").addEventListener("click", logOut);
  if (token) logIn(token);
})();
