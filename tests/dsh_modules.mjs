// Runs dsh-ask-peer's own modules (a checkout named by DSH_ASK_PEER_DIR; nothing of it is
// copied here) against a running `peer ask serve` (DSH_PEER_URL, as friend DSH_CALLER with
// DSH_TOKEN): its client posts an ask and reads the answer, and its card module verifies
// our card. Written against the module layout of the reference (commit ce33976:
// peer-client.ts with postAsk, card.ts), loaded from the checkout's built `dist/` or, on a
// Node that strips types, from `src/`. Never run by the author (no checkout was available):
// exports it cannot find are reported by name, so a layout change fails loudly.
//
//   node dsh_modules.mjs        prints one JSON line per check; exits 1 if any failed

import { pathToFileURL } from "node:url";
import { existsSync } from "node:fs";
import { join } from "node:path";

const dir = process.env.DSH_ASK_PEER_DIR;
const base = new URL(process.env.DSH_PEER_URL);
const caller = process.env.DSH_CALLER;
const token = process.env.DSH_TOKEN;

async function load(name) {
  for (const p of [join(dir, "dist", name + ".js"), join(dir, "src", name + ".ts")]) {
    if (existsSync(p)) return import(pathToFileURL(p).href);
  }
  throw new Error("no " + name + " module under " + dir + "/dist or /src");
}

function fn(mod, names) {
  for (const n of names) if (typeof mod[n] === "function") return mod[n];
  throw new Error("none of " + names.join(", ") + " in exports " + Object.keys(mod).join(", "));
}

const checks = [];
async function check(name, f) {
  try {
    checks.push({ name, ok: true, detail: await f() });
  } catch (e) {
    checks.push({ name, ok: false, detail: String(e && e.message) });
  }
}

const peer = { name: "bob", host: base.hostname, port: Number(base.port), token };
await check("dsh postAsk reads our answer", async () => {
  const postAsk = fn(await load("peer-client"), ["postAsk"]);
  const r = await postAsk(peer, { protocolVersion: 1, caller, token, question: "from dsh?" });
  if (!r || typeof r.answer !== "string" || !r.answer) throw new Error("no answer: " + JSON.stringify(r));
  return r.answer.slice(0, 80);
});
await check("dsh card module verifies our card", async () => {
  const card = await (await fetch(new URL("/sign/card", base))).json();
  const verify = fn(await load("card"), ["verifyCard", "parseCard", "decodeCard"]);
  const r = await verify(card.card);
  if (!r || r.ok === false) throw new Error("refused: " + JSON.stringify(r));
  return "verified";
});
for (const c of checks) process.stdout.write(JSON.stringify(c) + "\n");
process.exit(checks.every((c) => c.ok) ? 0 : 1);
