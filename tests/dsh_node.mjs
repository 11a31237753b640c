// dsh-ask-peer's transport, rebuilt from its documented wire format with Node's standard
// library only (no npm packages; dsh-ask-peer's own code is never copied here): an `http`
// server that answers the way dsh's does (JSON written after `writeHead`, so Node frames it
// `Transfer-Encoding: chunked`) and a `fetch` client that posts the way dsh's `postAsk` does.
// Driven by tests/dsh_node.rs against real `peer` processes.
//
//   node dsh_node.mjs serve NAME SEED_HEX   prints {"port":N}, serves until killed
//   node dsh_node.mjs fetch SPEC_JSON        one request; prints {"status","body","error"}
//
// SPEC: {url, method?, json?, padBytes?, signSeedHex?}. `signSeedHex` signs `json` as dsh
// does (canonical JSON of the body minus publicKey and signature; no timestamp or nonce);
// `padBytes` sends a body of that many bytes (an oversized upload).

import http from "node:http";
import crypto from "node:crypto";

const PKCS8_ED25519 = Buffer.from("302e020100300506032b657004220420", "hex");

function keyOf(seedHex) {
  const priv = crypto.createPrivateKey({
    key: Buffer.concat([PKCS8_ED25519, Buffer.from(seedHex, "hex")]),
    format: "der",
    type: "pkcs8",
  });
  const pem = crypto.createPublicKey(priv).export({ type: "spki", format: "pem" });
  return { priv, sign: "ed25519:" + Buffer.from(pem, "utf8").toString("base64url") };
}

// Canonical JSON for the plain values used here: sorted keys, no whitespace.
function canonical(v) {
  if (Array.isArray(v)) return "[" + v.map(canonical).join(",") + "]";
  if (v && typeof v === "object") {
    const keys = Object.keys(v).filter((k) => v[k] !== undefined).sort();
    return "{" + keys.map((k) => JSON.stringify(k) + ":" + canonical(v[k])).join(",") + "}";
  }
  return JSON.stringify(v);
}

function signed(key, body) {
  const rest = { ...body };
  delete rest.publicKey;
  delete rest.signature;
  const sig = crypto.sign(null, Buffer.from(canonical(rest), "utf8"), key.priv);
  return { ...rest, publicKey: key.sign, signature: sig.toString("base64url") };
}

function card(key, name, host, port) {
  const payload = {
    v: 1, name, host, port, publicKey: key.sign, description: "node stand-in for dsh",
    tags: ["postgres"], issued: Date.now(), ttl: 90 * 24 * 3600 * 1000,
  };
  const sig = crypto.sign(null, Buffer.from(canonical(payload), "utf8"), key.priv);
  const doc = { ...payload, signature: sig.toString("base64url") };
  return "dsh-ask-peer-card:" + Buffer.from(JSON.stringify(doc), "utf8").toString("base64url");
}

const CORS = {
  "content-type": "application/json",
  "access-control-allow-origin": "*",
  "access-control-allow-methods": "GET, POST, OPTIONS",
  "access-control-allow-headers": "content-type",
};

// Written in two pieces after writeHead: Node sends `Transfer-Encoding: chunked`, two chunks.
function reply(res, status, value) {
  const text = JSON.stringify(value);
  res.writeHead(status, CORS);
  const half = Math.floor(text.length / 2);
  res.write(text.slice(0, half));
  res.end(text.slice(half));
}

function fail(res, status, code, message) {
  reply(res, status, { ok: false, error: { code, message } });
}

// Questions that name an error code get that error, so every shape can be asked for.
const ERRORS = {
  declined: [403, "owner declined"],
  approval_unavailable: [403, "approval timed out"],
  forbidden: [403, 'caller "x" is not an allowed peer'],
  bad_request: [400, "protocolVersion, caller, and a non-empty question are required"],
  ask_failed: [500, "answering run failed"],
  internal: [500, "unhandled exception"],
  not_found: [404, "unknown or expired ask"],
};

function serve(name, seedHex) {
  const key = keyOf(seedHex);
  const asks = new Map();
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, "http://x");
    const chunks = [];
    let size = 0;
    req.on("data", (c) => {
      size += c.length;
      if (size > 1 << 20) req.destroy();
      else chunks.push(c);
    });
    req.on("end", () => {
      let body = {};
      if (chunks.length) {
        try {
          body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
        } catch {
          return fail(res, 400, "bad_request", "request body must be JSON");
        }
      }
      route(req.method, url, body, res);
    });
  });
  function route(method, url, body, res) {
    const at = method + " " + url.pathname;
    const port = server.address().port;
    if (at === "GET /health") return reply(res, 200, { ok: true, peer: body.caller ?? "" });
    if (at === "GET /advertise") {
      const ad = {
        protocolVersion: 1, name, description: "node stand-in", tags: ["postgres"],
        workspace: "w", updatedAt: new Date().toISOString(), sessions: [],
      };
      return reply(res, 200, signed(key, ad));
    }
    if (at === "GET /sign/card") {
      return reply(res, 200, {
        card: card(key, name, "127.0.0.1", port), name, host: "127.0.0.1", port,
        publicKey: key.sign, expiresAt: Date.now() + 1000,
      });
    }
    if (at === "POST /recommend") {
      const erin = keyOf(crypto.createHash("sha256").update(seedHex).digest("hex"));
      return reply(res, 200, { ok: true, from: "erin", card: card(erin, "erin", "127.0.0.1", 9) });
    }
    if (at === "POST /ask") {
      if (body.protocolVersion !== 1 || typeof body.question !== "string") {
        return fail(res, 400, "bad_request", "protocolVersion, caller, and a non-empty question are required");
      }
      const e = ERRORS[body.question];
      if (e) return fail(res, e[0], body.question, e[1]);
      const answer = "node answers: " + body.question + " " + "x".repeat(5000);
      if (body.async) {
        const askId = crypto.randomUUID();
        asks.set(askId, { status: "answered", answer, truncated: false });
        return reply(res, 202, { ok: true, askId });
      }
      return reply(res, 200, { ok: true, answer, truncated: false });
    }
    if (at === "GET /ask/status") {
      const id = url.searchParams.get("askId");
      if (!id) return fail(res, 400, "bad_request", "askId is required");
      const a = asks.get(id);
      if (!a) return fail(res, 404, "not_found", "unknown or expired ask " + id);
      return reply(res, 200, { ok: true, ...a });
    }
    return fail(res, 404, "not_found", "unknown path " + url.pathname);
  }
  server.listen(0, "127.0.0.1", () => {
    process.stdout.write(JSON.stringify({ port: server.address().port, sign: key.sign }) + "\n");
  });
}

// As dsh's postAsk: fetch, JSON in and out; the status is reported even for errors.
async function fetchOnce(spec) {
  let body;
  const headers = {};
  if (spec.padBytes) {
    body = "{" + " ".repeat(spec.padBytes - 2) + "}";
    headers["content-type"] = "application/json";
  } else if (spec.json !== undefined) {
    const value = spec.signSeedHex ? signed(keyOf(spec.signSeedHex), spec.json) : spec.json;
    body = JSON.stringify(value);
    headers["content-type"] = "application/json";
  }
  try {
    const r = await fetch(spec.url, {
      method: spec.method ?? (body ? "POST" : "GET"),
      headers,
      body,
      signal: AbortSignal.timeout(20000),
    });
    const text = await r.text();
    let parsed = null;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      parsed = { unparsed: text.slice(0, 200) };
    }
    return { status: r.status, body: parsed, error: null };
  } catch (e) {
    const cause = e.cause ? String(e.cause.code ?? e.cause.message ?? e.cause) : "";
    return { status: 0, body: null, error: String(e.message) + (cause ? " (" + cause + ")" : "") };
  }
}

const [mode, ...args] = process.argv.slice(2);
if (mode === "serve") {
  serve(args[0], args[1]);
} else if (mode === "fetch") {
  fetchOnce(JSON.parse(args[0])).then((r) => process.stdout.write(JSON.stringify(r) + "\n"));
} else {
  process.stderr.write("usage: node dsh_node.mjs serve NAME SEED_HEX | fetch SPEC_JSON\n");
  process.exit(2);
}
