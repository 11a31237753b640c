// The owner's approval page. Everything a friend wrote reaches the page only through
// textContent (never as markup); the owner's secret is an HttpOnly cookie this script cannot
// read, sent by the browser with the event stream and the decisions.
"use strict";

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function status(text) {
  document.getElementById("status").textContent = text;
}

function whenText(iso) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return String(iso || "");
  const secs = Math.max(0, Math.round((t - Date.now()) / 1000));
  return new Date(t).toLocaleTimeString() + " (in " + secs + " s)";
}

async function decide(kind, id, decision, buttons) {
  buttons.forEach((b) => { b.disabled = true; });
  try {
    const r = await fetch("/owner/decide", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ kind: kind, id: id, decision: decision }),
    });
    const body = await r.json().catch(() => ({}));
    if (r.ok) {
      status(decision + ": " + id);
    } else {
      const msg = body && body.error && body.error.message ? body.error.message : r.status;
      status("refused: " + msg);
      buttons.forEach((b) => { b.disabled = false; });
    }
  } catch (e) {
    status("cannot reach the ask server: " + e);
    buttons.forEach((b) => { b.disabled = false; });
  }
}

function actions(kind, id, choices) {
  const box = el("div", "actions");
  const buttons = choices.map(([decision, label]) => {
    const b = el("button", decision === "decline" ? "decline" : "approve", label);
    b.type = "button";
    b.dataset.decision = decision;
    return b;
  });
  buttons.forEach((b) => {
    b.addEventListener("click", () => decide(kind, id, b.dataset.decision, buttons));
    box.appendChild(b);
  });
  return box;
}

function askCard(a) {
  const li = el("li");
  li.dataset.askId = a.askId;
  const who = el("div");
  who.appendChild(el("span", "who", a.caller));
  who.appendChild(el("span", "meta", " asks · expires " + whenText(a.expiresAt)));
  li.appendChild(who);
  li.appendChild(el("div", "question", a.question));
  const files = Array.isArray(a.contextFiles) ? a.contextFiles : [];
  li.appendChild(el("div", "files", files.length ? "context files: " + files.join(", ") : "no context files"));
  li.appendChild(el("div", "meta", "ask " + a.askId));
  li.appendChild(actions("ask", a.askId, [["approve", "Approve"], ["decline", "Decline"]]));
  return li;
}

function recCard(r) {
  const li = el("li");
  li.dataset.recId = r.recId;
  const peer = r.peer || {};
  const who = el("div");
  who.appendChild(el("span", "who", peer.name || "(unreadable card)"));
  who.appendChild(el("span", "meta", " " + (peer.host || "") + (peer.port ? ":" + peer.port : "")));
  li.appendChild(who);
  if (peer.description) li.appendChild(el("div", "question", peer.description));
  const via = Array.isArray(r.via) && r.via.length ? " via " + r.via.join(", ") : "";
  li.appendChild(el("div", "meta", "recommended by " + r.from + via + (r.topic ? " for " + r.topic : "")));
  li.appendChild(actions("recommendation", r.recId, [["add", "Add friend"], ["decline", "Decline"]]));
  return li;
}

function render(state) {
  document.getElementById("me").textContent = state.peer || "the owner";
  const asks = Array.isArray(state.asks) ? state.asks : [];
  const recs = Array.isArray(state.recommendations) ? state.recommendations : [];
  document.getElementById("asks").replaceChildren(...asks.map(askCard));
  document.getElementById("recs").replaceChildren(...recs.map(recCard));
  document.getElementById("asks-empty").hidden = asks.length > 0;
  document.getElementById("recs-empty").hidden = recs.length > 0;
  document.title = (asks.length + recs.length ? "(" + (asks.length + recs.length) + ") " : "") + "peer ask: waiting for the owner";
}

function live(on) {
  const l = document.getElementById("live");
  l.textContent = on ? "live" : "reconnecting…";
  l.className = on ? "live" : "live off";
}

function start() {
  const events = new EventSource("/owner/events");
  events.addEventListener("open", () => live(true));
  events.addEventListener("error", () => live(false));
  events.addEventListener("state", (e) => {
    live(true);
    try {
      render(JSON.parse(e.data));
    } catch (err) {
      status("unreadable update: " + err);
    }
  });
}

document.addEventListener("DOMContentLoaded", start);
