// Drives `peer ask serve`'s A2A endpoint with the official @a2a-js/sdk client (1.3.0).
// Usage: node client.mjs BASE_URL TOKEN SCENARIO [ARG]; prints one JSON object (tests/a2a.rs).
// Scenarios as tests/a2a_client.py: card HEXKEY (the JWS checked with node:crypto over the
// JCS form of the card, as A2A 1.0 section 8.4 says; the SDK has no verifier of its own),
// ask, stream, poll, cancel, subscribe.
import crypto from "node:crypto";
import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } from "@a2a-js/sdk/client";

const STATES = ["TASK_STATE_UNSPECIFIED", "TASK_STATE_SUBMITTED", "TASK_STATE_WORKING",
  "TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED",
  "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_REJECTED", "TASK_STATE_AUTH_REQUIRED"];
const stateName = (s) => (typeof s === "number" ? STATES[s] ?? String(s) : String(s));

// RFC 8785 for the values a card holds (strings, booleans, arrays, objects).
function jcs(v) {
  if (Array.isArray(v)) return "[" + v.map(jcs).join(",") + "]";
  if (v && typeof v === "object") {
    const keys = Object.keys(v).sort();
    return "{" + keys.map((k) => JSON.stringify(k) + ":" + jcs(v[k])).join(",") + "}";
  }
  return JSON.stringify(v);
}

function verifyCard(card, hexKey) {
  const spki = Buffer.concat([Buffer.from("302a300506032b6570032100", "hex"), Buffer.from(hexKey, "hex")]);
  const key = crypto.createPublicKey({ key: spki, format: "der", type: "spki" });
  const { signatures, ...rest } = card;
  const payload = Buffer.from(jcs(rest)).toString("base64url");
  return (signatures ?? []).some((s) =>
    crypto.verify(null, Buffer.from(`${s.protected}.${payload}`), key, Buffer.from(s.signature, "base64url")));
}

function taskView(t) {
  const answer = (t.artifacts ?? []).flatMap((a) => a.parts ?? []).map((p) => p.content?.value ?? p.text ?? "").join("");
  const message = (t.status?.message?.parts ?? []).map((p) => p.content?.value ?? p.text ?? "").join(" ");
  return { id: t.id, state: stateName(t.status?.state), answer, message };
}

const [base, token, scenario, arg = ""] = process.argv.slice(2);
const authFetch = (url, init = {}) =>
  fetch(url, { ...init, headers: { ...(init.headers ?? {}), ...(token ? { Authorization: `Bearer ${token}` } : {}) } });

try {
  if (scenario === "card") {
    const card = await (await fetch(`${base}/.well-known/agent-card.json`)).json();
    console.log(JSON.stringify({ verified: verifyCard(card, arg), card }));
    process.exit(0);
  }
  const factory = new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl: authFetch })],
    clientConfig: { polling: ["poll", "cancel", "subscribe"].includes(scenario) },
  }));
  const client = await factory.createFromUrl(base);
  // The SDK takes its ts-proto types: a oneof as { $case, value }, enums as numbers (1 = ROLE_USER).
const params = { message: { messageId: crypto.randomUUID(), role: 1, parts: [{ content: { $case: "text", value: arg } }] } };
  const t0 = performance.now();
  const out = {};
  if (scenario === "stream") {
    const events = [];
    for await (const ev of client.sendMessageStream(params)) {
      const { $case: kind, value } = ev.payload ?? {};
      if (kind === "task") events.push({ kind: "task", ...taskView(value) });
      else if (kind === "statusUpdate") events.push({ kind: "status_update", state: stateName(value.status?.state) });
      else if (kind === "artifactUpdate") events.push({ kind: "artifact_update", answer: (value.artifact?.parts ?? []).map((p) => p.content?.value ?? "").join("") });
      else events.push({ kind: String(kind) });
    }
    out.events = events;
  } else {
    const first = taskView(await client.sendMessage(params));
    out.events = [{ kind: "task", ...first }];
    if (scenario === "poll") {
      let t;
      do {
        t = taskView(await client.getTask({ id: first.id }));
        await new Promise((r) => setTimeout(r, 50));
      } while (t.state === "TASK_STATE_SUBMITTED" || t.state === "TASK_STATE_WORKING");
      out.final = t;
    } else if (scenario === "subscribe") {
      out.subscribe = [];
      for await (const ev of client.resubscribeTask({ id: first.id })) {
        out.subscribe.push(ev.payload?.$case ?? ev.kind ?? (ev.status && ev.id ? "task" : "other"));
      }
      out.final = taskView(await client.getTask({ id: first.id }));
    } else if (scenario === "cancel") {
      out.final = taskView(await client.cancelTask({ id: first.id }));
    }
  }
  out.first = out.events[0];
  out.ms = performance.now() - t0;
  console.log(JSON.stringify(out));
} catch (e) {
  console.log(JSON.stringify({ error: e?.constructor?.name ?? "Error", text: String(e?.message ?? e).slice(0, 500) }));
  process.exit(3);
}
