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
    if (!response.ok) throw new PageError(personal(response, await errorMessage(response)), { status: response.status });
    return response;
  }

  /** The server's error said to a person: statuses whose message speaks of the API get the page's own words. */
  function personal(response, message) {
    const wait = Number(response.headers.get("Retry-After"));
    switch (response.status) {
      case 401:
        return token && $("login").hidden
          ? "Your access token is no longer accepted. Log out, then log in with a current token."
          : "That access token was not accepted. Check that you copied all of it, or ask whoever runs this server for one.";
      case 404:
        return "That was already decided, or this conversation no longer exists (it may have been ended in another tab). Reload the page to carry on.";
      case 429:
        return wait > 0
          ? `You are sending messages faster than this server allows. Wait ${Math.ceil(wait)} seconds, then try again.`
          : "You are sending messages faster than this server allows. Wait a moment, then try again.";
      case 503:
        return "The assistant is not available right now. Try again in a moment.";
      default:
        return message.charAt(0).toUpperCase() + message.slice(1);
    }
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

  // Markdown for the assistant's answers, built as DOM nodes whose text is set with textContent: raw HTML in an
  // answer stays text, and a link is made only for http, https and mailto addresses.
  const SAFE_LINK = /^(https?:|mailto:)/i;
  const FENCE = /^\s{0,3}(```|~~~)\s*([\w+.-]*)\s*$/;
  const BULLET = /^\s{0,3}[-*+]\s+(.*)$/;
  const NUMBERED = /^\s{0,3}(\d{1,9})[.)]\s+(.*)$/;
  const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const QUOTE = /^\s{0,3}>\s?(.*)$/;
  const INLINE = /(`+)([\s\S]+?)\1|\[([^\]\n]+)\]\(\s*([^\s)]+)\s*\)|\*\*(?=\S)([\s\S]+?)\*\*|__(?=\S)([\s\S]+?)__|\*(?=\S)([^*]+?)\*|(?<![\w])_(?=\S)([^_]+?)_(?![\w])/;

  function element(tag, className) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    return node;
  }

  /** `text` as Markdown: paragraphs, fenced code blocks, headings, lists, quotes and inline code, bold, italic and links. */
  function markdown(text) {
    const out = document.createDocumentFragment();
    const lines = text.replace(/\r\n?/g, "\n").split("\n");
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let match;
      if (!line.trim()) {
        i += 1;
      } else if ((match = FENCE.exec(line))) {
        const code = [];
        for (i += 1; i < lines.length && lines[i].trim() !== match[1]; i += 1) code.push(lines[i]);
        i += 1;
        const pre = element("pre");
        const inner = element("code", match[2] ? `language-${match[2]}` : "");
        inner.textContent = code.join("\n");
        pre.append(inner);
        out.append(pre);
      } else if ((match = HEADING.exec(line))) {
        const heading = element(`h${Math.min(match[1].length + 2, 6)}`);
        inline(match[2], heading);
        out.append(heading);
        i += 1;
      } else if (BULLET.test(line) || NUMBERED.test(line)) {
        i = list(lines, i, out);
      } else if (QUOTE.test(line)) {
        const quoted = [];
        for (; i < lines.length && (match = QUOTE.exec(lines[i])); i += 1) quoted.push(match[1]);
        const quote = element("blockquote");
        quote.append(markdown(quoted.join("\n")));
        out.append(quote);
      } else {
        const paragraph = [];
        for (; i < lines.length && lines[i].trim() && !startsBlock(lines[i]); i += 1) paragraph.push(lines[i]);
        const p = element("p");
        paragraph.forEach((part, n) => {
          if (n) p.append(element("br"));
          inline(part.trim(), p);
        });
        out.append(p);
      }
    }
    return out;
  }

  function startsBlock(line) {
    return FENCE.test(line) || HEADING.test(line) || BULLET.test(line) || NUMBERED.test(line) || QUOTE.test(line);
  }

  /** The list starting at `lines[start]` appended to `out`; a line indented under an item continues it (a nested
   * list too). Returns the next line. */
  function list(lines, start, out) {
    const numbered = NUMBERED.test(lines[start]);
    const shape = numbered ? NUMBERED : BULLET;
    const node = element(numbered ? "ol" : "ul");
    if (numbered) node.start = Number(NUMBERED.exec(lines[start])[1]);
    const indent = lines[start].search(/\S/);
    let i = start;
    let item = null;
    for (; i < lines.length; i += 1) {
      const line = lines[i];
      const under = item && line.trim() && line.search(/\S/) >= indent + 2;
      const match = !under && shape.exec(line);
      if (match) {
        item = [numbered ? match[2] : match[1]];
        node.append(element("li"));
      } else if (under) {
        item.push(line.slice(indent + 2));
      } else {
        break;
      }
      node.lastChild.replaceChildren(markdown(item.join("\n")));
    }
    for (const li of node.children) {
      if (li.children.length === 1 && li.firstChild.tagName === "P") li.replaceChildren(...li.firstChild.childNodes);
    }
    out.append(node);
    return i;
  }

  /** Inline Markdown of `text` appended to `parent`: code, links, bold and italic; everything else is text. */
  function inline(text, parent) {
    let rest = text;
    let match;
    while ((match = INLINE.exec(rest))) {
      if (match.index) parent.append(rest.slice(0, match.index));
      const [whole, , code, label, href, bold, boldAlt, italic, italicAlt] = match;
      if (code !== undefined) {
        const node = element("code");
        node.textContent = code.trim() || code;
        parent.append(node);
      } else if (label !== undefined) {
        parent.append(link(label, href));
      } else {
        const node = element(bold !== undefined || boldAlt !== undefined ? "strong" : "em");
        inline(bold ?? boldAlt ?? italic ?? italicAlt, node);
        parent.append(node);
      }
      rest = rest.slice(match.index + whole.length);
    }
    if (rest) parent.append(rest);
  }

  /** A link to `href` when it is an http, https or mailto address; any other is shown as its label alone. */
  function link(label, href) {
    let url = null;
    try {
      url = SAFE_LINK.test(href) ? new URL(href) : null;
    } catch (_) {
      url = null;
    }
    if (!url || !["http:", "https:", "mailto:"].includes(url.protocol)) {
      const text = element("span", "unsafe-link");
      text.textContent = label;
      text.title = "link removed: only web and mail links are shown";
      return text;
    }
    const anchor = element("a");
    anchor.href = url.href;
    anchor.rel = "noopener noreferrer nofollow";
    anchor.target = "_blank";
    inline(label, anchor);
    return anchor;
  }

  /** Shows `text` in an answer's body: Markdown for the assistant, as typed for the user. */
  function render(body, text) {
    body.dataset.raw = text;
    if (body.classList.contains("markdown")) body.replaceChildren(markdown(text));
    else body.textContent = text;
  }

  function addMessage(role, text) {
    const item = document.createElement("li");
    item.className = `message ${role}`;
    const who = document.createElement("span");
    who.className = "visually-hidden";
    who.textContent = role === "user" ? "You said:" : "Assistant:";
    const body = element("div", role === "user" ? "text" : "text markdown");
    render(body, text);
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
          if (event.name === "delta") render(text, text.dataset.raw + event.data.text);
          else if (event.name === "reset") render(text, "");
          else if (event.name === "outcome") outcome = event.data;
          bubble.scrollIntoView({ block: "end" });
        }
      }
      if (!outcome) throw new PageError(CUT_OFF);
      finish(bubble, outcome, session);
    } catch (error) {
      bubble.classList.add("broken");
      if (!text.dataset.raw) bubble.remove();
      throw error;
    } finally {
      bubble.removeAttribute("aria-busy");
    }
  }

  /** Why a turn that did not succeed ended, said to the person reading it. */
  const ENDINGS = {
    error: "Something went wrong while answering",
    deadline: "The answer took too long and was stopped",
    iteration_limit: "The assistant took too many steps and stopped",
    policy_denied: "This request is not allowed here",
    plan_mode: "The assistant proposed a plan instead of acting on it",
    interrupted: "This answer was stopped because you sent a newer message",
  };

  /** Shows the outcome: exactly the text the user receives, the tools it ran, what went wrong, feedback and any approval request. */
  function finish(bubble, outcome, session) {
    const text = bubble.querySelector(".text");
    render(text, outcome.text ?? "");
    if (!outcome.text) text.classList.add("empty");
    if (outcome.tools && outcome.tools.length) text.before(toolSteps(outcome.tools));
    if (outcome.finish_reason !== "success" && outcome.finish_reason !== "awaiting_approval") {
      const reason = element("p", "reason");
      const failures = (outcome.failures || []).join("; ");
      const how = ENDINGS[outcome.finish_reason] || `This answer ended early (${outcome.finish_reason.replace(/_/g, " ")})`;
      reason.textContent = failures ? `${how}: ${failures}.` : `${how}.`;
      bubble.append(reason);
    }
    if (outcome.turn_id) bubble.append(feedbackButtons(session, outcome.turn_id));
    if (outcome.approval) bubble.append(approvalRequest(session, outcome.approval));
  }

  /** The tools a turn ran, folded under a summary line; each shows its arguments and its result (or that it failed). */
  function toolSteps(tools) {
    const box = element("details", "tools");
    const summary = element("summary");
    const names = [...new Set(tools.map((step) => step.name))].join(", ");
    summary.textContent = `${tools.length === 1 ? "Used 1 tool" : `Used ${tools.length} tools`}: ${names}`;
    const steps = element("ol");
    for (const step of tools) {
      const item = element("li", step.failed ? "step failed" : "step");
      const name = element("code", "tool");
      name.textContent = step.name;
      const args = element("pre", "arguments");
      args.textContent = JSON.stringify(step.arguments, null, 2);
      const result = element("pre", "result");
      result.textContent = step.failed ? "This tool failed." : step.result || "(no result)";
      item.append(name, args, result);
      steps.append(item);
    }
    box.append(summary, steps);
    return box;
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
        credited.textContent = positive && result.credited
          ? "Thanks! What helped with this answer will be used more often."
          : "Thanks for your feedback.";
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
    const given = approval.arguments && Object.keys(approval.arguments).length;
    box.querySelector(".arguments").textContent = given ? JSON.stringify(approval.arguments, null, 2) : "(no arguments)";
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
      setStatus("There is no conversation to end yet.");
      return;
    }
    try {
      await callJson("POST", sessionPath("end"));
      forgetSession();
      addNotice("Conversation ended. Your next message starts a new one.");
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
