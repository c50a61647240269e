// tools/chat_golden_js.mjs: renders the chat-template goldens of tests/data/chat with
// @huggingface/jinja (the JavaScript Jinja used by transformers.js) and reports, per template,
// how many conversations render exactly as Python jinja2 did (the expected outputs that
// tests/unit/test_chat.c holds the C renderer to). A cross-check of the goldens, not a gate:
// where the two references disagree, jinja2 with transformers' settings is the one we follow.
//
// Usage: node tools/chat_golden_js.mjs [--shared ../shared] [--verbose]
// (run `npm ci --prefix tests/js` first)
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const require = createRequire(path.join(root, "tests/js/package.json"));
const { Template } = require("@huggingface/jinja");

const args = process.argv.slice(2);
const shared = args.includes("--shared") ? args[args.indexOf("--shared") + 1] : path.join(root, "..", "shared");
const verbose = args.includes("--verbose");
const data = path.join(root, "tests/data/chat");

// @huggingface/jinja brings raise_exception and strftime_now (on the current date): pin the
// clock to the goldens' time in UTC.
process.env.TZ = "UTC";
function pinClock(now) {
  const Real = globalThis.Date;
  globalThis.Date = class extends Real {
    constructor(...a) { super(...(a.length ? a : [now * 1000])); }
    static now() { return now * 1000; }
  };
}

const conversations = fs.readFileSync(path.join(data, "conversations.jsonl"), "utf8")
  .split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));

let total = 0, equal = 0, bothFail = 0;
for (const file of fs.readdirSync(path.join(data, "expected")).sort()) {
  const doc = JSON.parse(fs.readFileSync(path.join(data, "expected", file), "utf8"));
  let source;
  if (doc.source === "shared") {
    const p = path.join(shared, "templates", doc.template);
    if (!fs.existsSync(p)) { console.log(`${file}: skipped (${p} is absent)`); continue; }
    source = fs.readFileSync(p, "utf8");
  } else {
    source = JSON.parse(fs.readFileSync(path.join(root, doc.template), "utf8")).chat_template;
  }
  pinClock(doc.now);
  let tpl;
  try { tpl = new Template(source); } catch (e) {
    console.log(`${file}: @huggingface/jinja cannot parse it: ${e.message}`);
    total += doc.cases.length;
    continue;
  }
  let ok = 0;
  for (const c of doc.cases) {
    const ctx = {
      tools: null, documents: null, ...doc.special, ...conversations[c.conversation],
    };
    let out = null, err = null;
    try { out = tpl.render(ctx); } catch (e) { err = e.message; }
    const same = "output" in c ? out === c.output : out === null;
    if (same) ok++;
    if (same && out === null) bothFail++;
    if (!same && verbose) console.log(`  ${file} / ${c.name}: ${err ? "raised " + err : "differs"}`);
  }
  total += doc.cases.length;
  equal += ok;
  console.log(`${file}: ${ok}/${doc.cases.length} as jinja2`);
}
console.log(`@huggingface/jinja agrees with jinja2 on ${equal}/${total} cases (${bothFail} where both raise)`);
