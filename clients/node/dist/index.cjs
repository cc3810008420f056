var __defProp = Object.defineProperty;
var __getOwnPropDesc = Object.getOwnPropertyDescriptor;
var __getOwnPropNames = Object.getOwnPropertyNames;
var __hasOwnProp = Object.prototype.hasOwnProperty;
var __export = (target, all) => {
  for (var name in all)
    __defProp(target, name, { get: all[name], enumerable: true });
};
var __copyProps = (to, from, except, desc) => {
  if (from && typeof from === "object" || typeof from === "function") {
    for (let key2 of __getOwnPropNames(from))
      if (!__hasOwnProp.call(to, key2) && key2 !== except)
        __defProp(to, key2, { get: () => from[key2], enumerable: !(desc = __getOwnPropDesc(from, key2)) || desc.enumerable });
  }
  return to;
};
var __toCommonJS = (mod) => __copyProps(__defProp({}, "__esModule", { value: true }), mod);

// src/index.js
var index_exports = {};
__export(index_exports, {
  ALGOS: () => ALGOS,
  Gateway: () => Gateway,
  MemoryStore: () => MemoryStore,
  PolicyError: () => PolicyError,
  PolicyStore: () => PolicyStore,
  PublishedPolicy: () => PublishedPolicy,
  RL: () => RL,
  RLError: () => RLError,
  RLStore: () => RLStore,
  RateLimiterRL: () => RateLimiterRL,
  RateLimiterRes: () => RateLimiterRes,
  SCRIPT_PATH: () => SCRIPT_PATH,
  TimeoutError: () => TimeoutError,
  adapt: () => adapt,
  classify: () => classify,
  commands: () => commands_exports,
  commonSlot: () => commonSlot,
  durationArg: () => durationArg,
  expressMiddleware: () => expressMiddleware,
  fastifyPlugin: () => fastifyPlugin,
  fetchWithRetry: () => fetchWithRetry,
  fromIoredis: () => fromIoredis,
  fromIovalkey: () => fromIovalkey,
  fromNodeRedis: () => fromNodeRedis,
  fromSendCommand: () => fromSendCommand,
  headers: () => headers_exports,
  keySlot: () => keySlot,
  parseDuration: () => parseDuration,
  parsePolicy: () => parsePolicy,
  retryAfterMs: () => retryAfterMs,
  withDeadline: () => withDeadline
});
module.exports = __toCommonJS(index_exports);

// src/client.js
var import_node_crypto = require("node:crypto");
var import_node_fs = require("node:fs");
var import_node_path = require("node:path");
var import_node_url = require("node:url");

// src/errors.js
var RLError = class extends Error {
  constructor(kind, message, options) {
    super(message, options);
    this.name = "RLError";
    this.kind = kind;
  }
  get isUnavailable() {
    return this.kind === "unavailable";
  }
};
var unavailable = (message, cause) => new RLError("unavailable", message, { cause });
var refused = (text) => new RLError("refused", text);
var unexpectedReply = (what) => new RLError("unexpected_reply", `unexpected reply: ${what}`);
var invalidRequest = (what) => new RLError("invalid_request", `invalid request: ${what}`);
var REFUSING_CODES = /* @__PURE__ */ new Set(["ERR", "WRONGTYPE", "CROSSSLOT"]);
function fromServerError(text, cause) {
  const code = text.split(" ", 1)[0];
  return REFUSING_CODES.has(code) ? refused(text) : unavailable(text, cause);
}

// src/wire.js
var UNITS = [
  ["d", 864e5],
  ["h", 36e5],
  ["m", 6e4],
  ["s", 1e3]
];
function durationArg(value, what) {
  const ms = typeof value === "string" ? parseDuration(value, what) : value;
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) {
    throw invalidRequest(`${what} must be a non-negative number of milliseconds, not ${String(value)}`);
  }
  if (!Number.isInteger(ms)) {
    throw invalidRequest(`${what} ${ms}ms is finer than a millisecond, the module's finest unit`);
  }
  if (ms === 0) return "0ms";
  for (const [unit, size] of UNITS) {
    if (ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}
var DURATION = /^([0-9]+)(ms|s|m|h|d)$/i;
var UNIT_MS = { ms: 1, s: 1e3, m: 6e4, h: 36e5, d: 864e5 };
function parseDuration(text, what = "duration") {
  const m = DURATION.exec(text);
  if (!m) {
    if (/^[0-9]+$/.test(text)) {
      throw invalidRequest(`${what} needs a unit: add ms, s, m, h or d (for example 10s)`);
    }
    throw invalidRequest(`${what} must be a positive integer and a unit ms, s, m, h or d, not '${text}'`);
  }
  return Number(m[1]) * UNIT_MS[m[2].toLowerCase()];
}
function countArg(n, what) {
  if (typeof n === "bigint") return n.toString();
  if (typeof n !== "number" || !Number.isSafeInteger(n)) {
    throw invalidRequest(`${what} must be an integer, not ${String(n)}`);
  }
  return String(n);
}
var CRC_TABLE = (() => {
  const table = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let crc = i << 8;
    for (let j = 0; j < 8; j++) crc = crc & 32768 ? (crc << 1 ^ 4129) & 65535 : crc << 1 & 65535;
    table[i] = crc;
  }
  return table;
})();
function toBytes(key2) {
  return Buffer.isBuffer(key2) ? key2 : Buffer.from(String(key2), "utf8");
}
function keySlot(key2) {
  let bytes = toBytes(key2);
  const open = bytes.indexOf(123);
  if (open >= 0) {
    const close = bytes.indexOf(125, open + 1);
    if (close > open + 1) bytes = bytes.subarray(open + 1, close);
  }
  let crc = 0;
  for (const b of bytes) crc = crc << 8 & 65535 ^ CRC_TABLE[(crc >> 8 ^ b) & 255];
  return crc % 16384;
}
function commonSlot(keys) {
  let slot = null;
  for (const key2 of keys) {
    const s = keySlot(key2);
    if (slot === null) slot = s;
    else if (s !== slot) {
      throw invalidRequest(
        `RL.MULTI keys are in cluster slots ${slot} and ${s}: give them one hash tag, for example {t:tenant}`
      );
    }
  }
  return slot;
}

// src/adapters.js
var REPLY_ERRORS = /* @__PURE__ */ new Set(["ReplyError", "ErrorReply", "SimpleError", "BlobError"]);
function isServerReply(err) {
  for (let p = Object.getPrototypeOf(err); p && p !== Error.prototype; p = Object.getPrototypeOf(p)) {
    if (REPLY_ERRORS.has(p.constructor?.name)) return true;
  }
  return false;
}
function classify(err) {
  if (err instanceof RLError) return err;
  if (err instanceof Error && isServerReply(err)) return fromServerError(err.message, err);
  return unavailable(`the store did not answer: ${err?.message ?? String(err)}`, err);
}
function wrap(send3, extra = {}) {
  return {
    ...extra,
    async send(name, args, firstKey) {
      try {
        return await send3(name, args, firstKey);
      } catch (err) {
        throw classify(err);
      }
    }
  };
}
function fromIoredis(client, { Command } = {}) {
  if (!client.isCluster) return wrap((name, args) => client.call(name, ...args));
  const commandClass = Command ? Promise.resolve(Command) : findCommandClass(client);
  return wrap(async (name, args, firstKey) => {
    const Cmd = await commandClass;
    if (!Cmd || firstKey === void 0) return client.call(name, ...args);
    const cmd = new Cmd(name, args, { replyEncoding: "utf8" });
    cmd.slot = keySlot(firstKey);
    return client.sendCommand(cmd);
  });
}
async function findCommandClass(client) {
  for (const name of ["ioredis", "iovalkey"]) {
    try {
      const mod = await import(name);
      const Cluster = mod.Cluster ?? mod.default?.Cluster;
      const Command = mod.Command ?? mod.default?.Command;
      if (Cluster && Command && client instanceof Cluster) return Command;
    } catch {
    }
  }
  return null;
}
var fromIovalkey = fromIoredis;
function fromNodeRedis(client) {
  if (typeof client.getSlotMaster === "function") {
    return wrap(async (name, args, firstKey) => {
      if (name === "WAIT" && firstKey !== void 0) {
        const node = await client.nodeClient(client.getSlotMaster(keySlot(firstKey)));
        return node.sendCommand([name, ...args]);
      }
      return client.sendCommand(firstKey, false, [name, ...args]);
    });
  }
  return wrap((name, args) => client.sendCommand([name, ...args]));
}
function fromSendCommand(sendCommand) {
  return wrap((name, args) => sendCommand(name, ...args));
}
function adapt(store) {
  if (typeof store === "function") return fromSendCommand(store);
  if (store && typeof store.send === "function") return store;
  if (store && (store.isCluster !== void 0 || typeof store.call === "function")) return fromIoredis(store);
  if (store && typeof store.sendCommand === "function") return fromNodeRedis(store);
  throw new TypeError("expected an ioredis, iovalkey or node-redis client, an adapter, or a sendCommand function");
}

// src/commands.js
var commands_exports = {};
__export(commands_exports, {
  ALGOS: () => ALGOS,
  acquire: () => acquire,
  admit: () => admit,
  grant: () => grant,
  info: () => info,
  multi: () => multi,
  release: () => release,
  renew: () => renew,
  settle: () => settle,
  throttle: () => throttle
});

// src/reply.js
function check(value, what) {
  if (value instanceof Error) throw fromServerError(value.message, value);
  return value;
}
function asText(v, what) {
  check(v, what);
  if (typeof v === "string") return v;
  if (Buffer.isBuffer(v)) return v.toString("utf8");
  throw unexpectedReply(`${what} is not a string: ${show(v)}`);
}
function asInt(v, what, { signed = false } = {}) {
  check(v, what);
  let n = v;
  if (typeof v === "bigint") n = Number(v);
  else if (typeof v === "string" || Buffer.isBuffer(v)) {
    const s = String(v);
    n = /^-?[0-9]+$/.test(s) ? Number(s) : NaN;
  }
  if (typeof n !== "number" || !Number.isInteger(n)) throw unexpectedReply(`${what} is not an integer: ${show(v)}`);
  if (!signed && n < 0) throw unexpectedReply(`${what} is negative: ${n}`);
  return n;
}
function asFlag(v, what) {
  const n = asInt(v, what);
  if (n !== 0 && n !== 1) throw unexpectedReply(`${what} must be 0 or 1, not ${n}`);
  return n === 1;
}
function show(v) {
  try {
    return JSON.stringify(v, (_, x) => typeof x === "bigint" ? x.toString() : x);
  } catch {
    return String(v);
  }
}
function isMapLike(v) {
  return v instanceof Map || v !== null && typeof v === "object" && !Array.isArray(v) && !Buffer.isBuffer(v);
}
function entriesOf(v) {
  return v instanceof Map ? [...v.entries()].map(([k, x]) => [String(k), x]) : Object.entries(v);
}
function fieldsOf(value, fields, what) {
  check(value, what);
  if (isMapLike(value)) {
    const m = new Map(entriesOf(value));
    return Object.fromEntries(
      fields.map((f) => {
        if (!m.has(f)) throw unexpectedReply(`${what}: field ${f} missing in ${show(value)}`);
        return [f, m.get(f)];
      })
    );
  }
  if (!Array.isArray(value)) throw unexpectedReply(`${what}: ${show(value)} is not an array or a map`);
  if (value.length === fields.length * 2 && textIs(value[0], fields[0])) {
    const m = /* @__PURE__ */ new Map();
    for (let i = 0; i < value.length; i += 2) m.set(asText(value[i], what), value[i + 1]);
    return fieldsOf(m, fields, what);
  }
  if (value.length !== fields.length) {
    throw unexpectedReply(`${what}: ${fields.length} fields expected, got ${show(value)}`);
  }
  return Object.fromEntries(fields.map((f, i) => [f, value[i]]));
}
function textIs(v, s) {
  return (typeof v === "string" || Buffer.isBuffer(v)) && String(v) === s;
}
function parseAdmit(value) {
  const r = fieldsOf(value, ["allowed", "remaining", "retry_after_ms", "reset_after_ms", "capacity"], "RL.ADMIT");
  return {
    allowed: asFlag(r.allowed, "allowed"),
    remaining: asInt(r.remaining, "remaining"),
    retry_after_ms: asInt(r.retry_after_ms, "retry_after_ms"),
    reset_after_ms: asInt(r.reset_after_ms, "reset_after_ms"),
    capacity: asInt(r.capacity, "capacity")
  };
}
function parseMulti(value) {
  const r = fieldsOf(value, ["allowed", "denied_by", "retry_after_ms", "rules"], "RL.MULTI");
  const rules = check(r.rules, "rules");
  if (!Array.isArray(rules)) throw unexpectedReply(`RL.MULTI rules: ${show(rules)} is not an array`);
  return {
    allowed: asFlag(r.allowed, "allowed"),
    denied_by: r.denied_by === null || r.denied_by === void 0 ? null : asText(r.denied_by, "denied_by"),
    retry_after_ms: asInt(r.retry_after_ms, "retry_after_ms"),
    rules: rules.map((rule) => {
      const f = fieldsOf(rule, ["name", "remaining", "reset_after_ms"], "RL.MULTI rule");
      return {
        name: asText(f.name, "name"),
        remaining: asInt(f.remaining, "remaining"),
        reset_after_ms: asInt(f.reset_after_ms, "reset_after_ms")
      };
    })
  };
}
function parseGrant(value) {
  const r = fieldsOf(value, ["granted", "remaining", "valid_ms", "retry_after_ms"], "RL.GRANT");
  return {
    granted: asInt(r.granted, "granted"),
    remaining: asInt(r.remaining, "remaining"),
    valid_ms: asInt(r.valid_ms, "valid_ms"),
    retry_after_ms: asInt(r.retry_after_ms, "retry_after_ms")
  };
}
function parseAcquire(value) {
  const r = fieldsOf(value, ["acquired", "holder", "in_flight", "retry_after_ms"], "RL.ACQUIRE");
  return {
    acquired: asFlag(r.acquired, "acquired"),
    holder: r.holder === null || r.holder === void 0 ? null : asText(r.holder, "holder"),
    in_flight: asInt(r.in_flight, "in_flight"),
    retry_after_ms: asInt(r.retry_after_ms, "retry_after_ms")
  };
}
function parseDone(value) {
  return asFlag(value, "reply");
}
function parseSettle(value) {
  if (value === null || value === void 0) return null;
  const r = fieldsOf(value, ["delta", "remaining"], "RL.SETTLE");
  return { delta: asInt(r.delta, "delta", { signed: true }), remaining: asInt(r.remaining, "remaining") };
}
var INFO_ALWAYS = ["algo", "limit", "period_ms", "capacity", "remaining", "reset_after_ms", "ttl_ms"];
var INFO_OPTIONAL = [
  "tat_us",
  "tokens",
  "updated_us",
  "window_start_ms",
  "count",
  "previous",
  "current",
  "entries",
  "logged_units",
  "in_flight",
  "next_expiry_ms",
  "reservations",
  "debt"
];
var INFO_SIGNED = /* @__PURE__ */ new Set(["tokens", "ttl_ms"]);
function parseInfo(value) {
  check(value, "RL.INFO");
  if (value === null || value === void 0) return null;
  let pairs;
  if (isMapLike(value)) pairs = entriesOf(value);
  else if (Array.isArray(value) && value.length % 2 === 0) {
    pairs = [];
    for (let i = 0; i < value.length; i += 2) pairs.push([asText(value[i], "RL.INFO name"), value[i + 1]]);
  } else throw unexpectedReply(`RL.INFO: ${show(value)} is not name/value pairs`);
  const m = new Map(pairs);
  const out = {};
  for (const f of INFO_ALWAYS) {
    if (!m.has(f)) throw unexpectedReply(`RL.INFO: field ${f} missing`);
  }
  out.algo = asText(m.get("algo"), "algo");
  for (const f of [...INFO_ALWAYS.slice(1), ...INFO_OPTIONAL]) {
    if (m.has(f)) out[f] = asInt(m.get(f), f, { signed: INFO_SIGNED.has(f) });
  }
  return out;
}
function parseThrottle(value) {
  check(value, "CL.THROTTLE");
  if (!Array.isArray(value) || value.length !== 5) throw unexpectedReply(`CL.THROTTLE: ${show(value)}`);
  const retry = asInt(value[3], "retry_after", { signed: true });
  if (retry < -1) throw unexpectedReply(`CL.THROTTLE retry_after ${retry}`);
  return {
    limited: asFlag(value[0], "limited"),
    limit: asInt(value[1], "limit"),
    remaining: asInt(value[2], "remaining"),
    retry_after: retry,
    reset_after: asInt(value[4], "reset_after")
  };
}

// src/commands.js
var ALGOS = ["gcra", "bucket", "window", "sliding", "log"];
function command(name, args, keys, parse) {
  return { name, args, keys, parse };
}
function key(k, what = "key") {
  if (typeof k === "string" || Buffer.isBuffer(k)) return k;
  throw invalidRequest(`${what} must be a string or a Buffer`);
}
function ruleOptions(args, { burst, cost, algo }) {
  if (burst !== void 0 && burst !== null) args.push("BURST", countArg(burst, "BURST"));
  if (cost !== void 0 && cost !== null) args.push("COST", countArg(cost, "COST"));
  if (algo !== void 0 && algo !== null) {
    if (!ALGOS.includes(algo)) throw invalidRequest(`ALGO must be one of ${ALGOS.join(", ")}, not ${algo}`);
    args.push("ALGO", algo);
  }
}
function admit(req) {
  const args = [key(req.key), countArg(req.limit, "limit"), durationArg(req.period, "period")];
  ruleOptions(args, req);
  if (req.dryRun) args.push("DRYRUN");
  if (req.reserve) {
    args.push("RESERVE", key(req.reserve.id, "RESERVE id"));
    if (req.reserve.keep !== void 0 && req.reserve.keep !== null) {
      args.push("KEEP", durationArg(req.reserve.keep, "KEEP"));
    }
  }
  return command("RL.ADMIT", args, [args[0]], parseAdmit);
}
function multi(req) {
  const rules = req.rules;
  if (!Array.isArray(rules) || rules.length === 0) throw invalidRequest("RL.MULTI needs at least one rule");
  const keys = rules.map((r) => key(r.key));
  commonSlot(keys);
  const args = [String(rules.length), ...keys];
  for (const r of rules) {
    if (typeof r.name !== "string") throw invalidRequest("a RULE name must be a string");
    args.push("RULE", r.name, countArg(r.limit, "limit"), durationArg(r.period, "period"));
    ruleOptions(args, r);
  }
  if (req.dryRun) args.push("DRYRUN");
  return command("RL.MULTI", args, keys, parseMulti);
}
function grant(req) {
  const args = [key(req.key), countArg(req.limit, "limit"), durationArg(req.period, "period")];
  ruleOptions(args, { burst: req.burst, algo: req.algo });
  args.push("WANT", countArg(req.want, "WANT"));
  if (req.ttl !== void 0 && req.ttl !== null) args.push("TTL", durationArg(req.ttl, "TTL"));
  return command("RL.GRANT", args, [args[0]], parseGrant);
}
function acquire(req) {
  const args = [key(req.key), countArg(req.capacity, "capacity"), durationArg(req.lease, "lease")];
  if (req.holder !== void 0 && req.holder !== null) args.push("ID", key(req.holder, "holder"));
  return command("RL.ACQUIRE", args, [args[0]], parseAcquire);
}
function release(k, holder) {
  return command("RL.RELEASE", [key(k), key(holder, "holder")], [k], parseDone);
}
function renew(k, holder, lease) {
  return command("RL.RENEW", [key(k), key(holder, "holder"), durationArg(lease, "lease")], [k], parseDone);
}
function settle(k, id, actual, { forget = false } = {}) {
  const args = [key(k), key(id, "id"), countArg(actual, "actual")];
  return command("RL.SETTLE", forget ? [...args, "FORGET"] : args, [k], parseSettle);
}
function info(k) {
  return command("RL.INFO", [key(k)], [k], parseInfo);
}
function throttle(k, maxBurst, count, periodSeconds, quantity) {
  const args = [key(k), countArg(maxBurst, "max_burst"), countArg(count, "count"), countArg(periodSeconds, "period")];
  if (quantity !== void 0 && quantity !== null) args.push(countArg(quantity, "quantity"));
  return command("CL.THROTTLE", args, [k], parseThrottle);
}

// src/client.js
var import_meta = {};
var PACKAGE_ROOT = (0, import_node_path.join)(typeof __dirname === "string" ? __dirname : (0, import_node_path.dirname)((0, import_node_url.fileURLToPath)(import_meta.url)), "..");
var SCRIPT_PATH = [(0, import_node_path.join)(PACKAGE_ROOT, "rl.lua"), (0, import_node_path.join)(PACKAGE_ROOT, "..", "scripts", "rl.lua")].find((p) => (0, import_node_fs.existsSync)(p)) ?? (0, import_node_path.join)(PACKAGE_ROOT, "rl.lua");
var RL = class {
  // `store`: an ioredis, iovalkey or node-redis client (or cluster), an adapter, or a
  // sendCommand function. Options: `timeout` (ms, per call), `mode` ('auto', 'module' or
  // 'script'), `script` (the script's text, default the rl.lua this package ships), `logger`
  // (console-like), `onMode(mode)`.
  constructor(store, options = {}) {
    this.adapter = adapt(store);
    this.timeout = options.timeout;
    this.forcedMode = options.mode && options.mode !== "auto" ? options.mode : null;
    this.scriptText = options.script;
    this.logger = options.logger ?? console;
    this.onMode = options.onMode;
    this.mode = this.forcedMode;
    this.detecting = null;
    this.loggedMode = null;
    if (this.mode) this.announce(this.mode);
  }
  async admit(req, options) {
    return this.execute(admit(req), options);
  }
  async multi(req, options) {
    return this.execute(multi(req), options);
  }
  async grant(req, options) {
    return this.execute(grant(req), options);
  }
  async acquire(req, options) {
    return this.execute(acquire(req), options);
  }
  async release(key2, holder) {
    return this.execute(release(key2, holder));
  }
  async renew(key2, holder, lease) {
    return this.execute(renew(key2, holder, lease));
  }
  async settle(key2, id, actual, options) {
    return this.execute(settle(key2, id, actual, options));
  }
  async info(key2) {
    return this.execute(info(key2));
  }
  async throttle(key2, maxBurst, count, periodSeconds, quantity) {
    return this.execute(throttle(key2, maxBurst, count, periodSeconds, quantity));
  }
  // One command of commands.js: its raw reply parsed, under the client's deadline. `cancel` is
  // the caller's token (`{ cancelled }`, set when the caller gave up, as the gateway's deadline
  // does): once it is set, no command is sent again for this call.
  async execute(cmd, { timeout = this.timeout, cancel = { cancelled: false } } = {}) {
    return withDeadline(this.run(cmd, cancel), timeout, cancel);
  }
  async run(cmd, cancel) {
    const mode = this.mode ?? await this.detect();
    try {
      const raw2 = mode === "script" ? await this.evalsha(cmd, cancel) : await this.native(cmd, cancel);
      return cmd.parse(raw2);
    } catch (err) {
      if (!this.forcedMode && err instanceof RLError && err.isUnavailable) this.mode = null;
      throw err;
    }
  }
  // `unknown command` to a native command is a server without the module (a failover, a
  // restart): nothing was spent, so the same command goes through the script once.
  async native(cmd, cancel) {
    try {
      return await this.adapter.send(cmd.name, cmd.args, cmd.keys[0]);
    } catch (err) {
      if (this.forcedMode || !(err instanceof RLError) || !/^ERR unknown command/.test(err.message)) throw err;
      if (await this.detect() !== "script") throw err;
      live(cancel);
      return this.evalsha(cmd, cancel);
    }
  }
  // `COMMAND INFO RL.ADMIT` answers a nil entry when the module is absent.
  detect() {
    this.detecting ??= this.adapter.send("COMMAND", ["INFO", "RL.ADMIT"]).then((reply) => {
      const entry = Array.isArray(reply) ? reply[0] : reply;
      const mode = entry === null || entry === void 0 ? "script" : "module";
      this.mode = mode;
      this.announce(mode);
      return mode;
    }).finally(() => {
      this.detecting = null;
    });
    return this.detecting;
  }
  announce(mode) {
    if (mode === this.loggedMode) return;
    this.loggedMode = mode;
    this.logger.info?.(`redis-rl: store mode ${mode}`);
    this.onMode?.(mode);
  }
  script() {
    if (!this.scriptSha) {
      let text = this.scriptText;
      if (text === void 0) {
        try {
          text = (0, import_node_fs.readFileSync)(SCRIPT_PATH, "utf8");
        } catch (err) {
          throw refused(`ERR script mode needs ${SCRIPT_PATH}, which cannot be read (${err.code ?? err.message}); load the module instead`);
        }
      }
      this.scriptText = text;
      this.scriptSha = (0, import_node_crypto.createHash)("sha1").update(text).digest("hex");
    }
    return this.scriptSha;
  }
  // EVALSHA <sha1> M k1 ... kM NAME arg1 ... argN. NOSCRIPT means a server that has not seen the
  // script (a restart, a failover), so the mode is detected again: the new server may have the
  // module; otherwise SCRIPT LOAD and retry once.
  async evalsha(cmd, cancel) {
    const sha = this.script();
    const args = [sha, String(cmd.keys.length), ...cmd.keys, cmd.name, ...cmd.args];
    try {
      return await this.adapter.send("EVALSHA", args, cmd.keys[0]);
    } catch (err) {
      if (!(err instanceof RLError) || !err.message.startsWith("NOSCRIPT")) throw err;
      const mode = this.forcedMode ?? await this.detect();
      live(cancel);
      if (mode === "module") return this.adapter.send(cmd.name, cmd.args, cmd.keys[0]);
      await this.adapter.send("SCRIPT", ["LOAD", this.scriptText], cmd.keys[0]);
      live(cancel);
      return this.adapter.send("EVALSHA", args, cmd.keys[0]);
    }
  }
};
function live(cancel) {
  if (cancel?.cancelled) throw new RLError("unavailable", "the call missed its deadline");
}
var TimeoutError = class extends RLError {
  constructor(ms) {
    super("unavailable", `the store did not answer within ${ms}ms`);
    this.timeout = true;
  }
};
function withDeadline(promise, ms, cancel) {
  if (!ms) return promise;
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => {
      if (cancel) cancel.cancelled = true;
      reject(new TimeoutError(ms));
    }, ms);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

// src/headers.js
var headers_exports = {};
__export(headers_exports, {
  outcomeOf: () => outcomeOf,
  policyItem: () => policyItem,
  ratelimitItem: () => ratelimitItem,
  refusedOutcome: () => refusedOutcome,
  render: () => render,
  retryAfterSeconds: () => retryAfterSeconds,
  sfString: () => sfString
});
function refusedOutcome(waitMs) {
  return { remaining: 0, resetAfterMs: waitMs, retryAfterMs: waitMs };
}
function outcomeOf(decision) {
  return {
    remaining: decision.remaining,
    resetAfterMs: decision.reset_after_ms,
    retryAfterMs: decision.allowed ? null : decision.retry_after_ms
  };
}
var gcd = (a, b) => {
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
};
function wholeSecondQuota(limit, periodMs) {
  const ms = BigInt(Math.max(1, periodMs));
  const lim = BigInt(limit);
  if (ms % 1000n === 0n) return [lim, ms / 1000n];
  const unitsMs = lim * 1000n;
  const w = ms / gcd(unitsMs, ms);
  return [unitsMs * w / ms, w];
}
function sfString(s) {
  let out = '"';
  for (const c of s) {
    if (c === '"' || c === "\\") out += `\\${c}`;
    else if (c >= " " && c <= "~") out += c;
    else out += "_";
  }
  return `${out}"`;
}
function policyItem(rule) {
  const name = sfString(rule.name);
  if (rule.semaphore) return `${name};q=${rule.capacity};qu="concurrent-requests"`;
  const [q, w] = wholeSecondQuota(rule.limit, rule.periodMs);
  let item = `${name};q=${q};w=${w}`;
  if (BigInt(rule.capacity) !== q) item += `;rl-burst=${rule.capacity}`;
  return item;
}
function resetSeconds(outcome) {
  return Math.ceil((outcome.retryAfterMs ?? outcome.resetAfterMs) / 1e3);
}
function ratelimitItem(rule, outcome) {
  return `${sfString(rule.name)};r=${outcome.remaining};t=${resetSeconds(outcome)}`;
}
function render(pairs, legacy = false) {
  if (pairs.length === 0) return [];
  const out = [
    ["RateLimit-Policy", pairs.map(([r]) => policyItem(r)).join(", ")],
    ["RateLimit", pairs.map(([r, o]) => ratelimitItem(r, o)).join(", ")]
  ];
  if (legacy) {
    let best = null;
    const rank = ([, o]) => o.retryAfterMs !== null && o.retryAfterMs !== void 0 ? [0, -o.retryAfterMs] : [1, o.remaining];
    for (const p of pairs) {
      if (best === null) best = p;
      else {
        const [a1, a2] = rank(p);
        const [b1, b2] = rank(best);
        if (a1 < b1 || a1 === b1 && a2 < b2) best = p;
      }
    }
    const [rule, outcome] = best;
    out.push(["X-RateLimit-Limit", String(rule.limit)]);
    out.push(["X-RateLimit-Remaining", String(outcome.remaining)]);
    out.push(["X-RateLimit-Reset", String(resetSeconds(outcome))]);
  }
  return out;
}
function retryAfterSeconds(maxRetryMs, jitter, u) {
  const share = (jitter > 0 ? jitter : 0) * Math.min(Math.max(u, 0), 1);
  const extra = share > 0 ? Math.floor(maxRetryMs * share) : 0;
  return Math.ceil((maxRetryMs + extra) / 1e3);
}

// src/express-rate-limit.js
var import_node_crypto2 = require("node:crypto");
var SETTLEABLE = /* @__PURE__ */ new Set(["gcra", "bucket"]);
function clusterAdapter(sendCommandCluster) {
  return {
    async send(name, args, firstKey) {
      try {
        return await sendCommandCluster({ key: firstKey, isReadOnly: false, command: [name, ...args] });
      } catch (err) {
        throw classify(err);
      }
    }
  };
}
var RLStore = class {
  // Options: `sendCommand(...args)` or `sendCommandCluster({ key, isReadOnly, command })` as for
  // rate-limit-redis, or `client` (an ioredis/node-redis client or cluster, or an RL); `prefix`
  // (default `rl:`); `algo` (default `gcra`); `burst` (gcra and bucket: what an idle key admits
  // at once, default the limit); `timeout` (ms per store call).
  constructor(options = {}) {
    const { sendCommand, sendCommandCluster, client } = options;
    if ([sendCommand, sendCommandCluster, client].filter(Boolean).length !== 1) {
      throw new TypeError("RLStore: give exactly one of sendCommand, sendCommandCluster or client");
    }
    if (client instanceof RL) this.rl = client;
    else {
      const store = sendCommand ? fromSendCommand(sendCommand) : sendCommandCluster ? clusterAdapter(sendCommandCluster) : client;
      this.rl = new RL(store, { timeout: options.timeout, logger: options.logger });
    }
    this.prefix = options.prefix ?? "rl:";
    this.algo = options.algo ?? "gcra";
    this.burst = options.burst;
    this.localKeys = false;
    this.reservations = /* @__PURE__ */ new Map();
    this.refusedPending = /* @__PURE__ */ new Map();
  }
  init(options) {
    this.windowMs = options.windowMs;
    this.limit = options.limit ?? options.max;
    this.reserving = Boolean(options.skipFailedRequests || options.skipSuccessfulRequests) && SETTLEABLE.has(this.algo);
    this.refusedDecrement = Boolean(options.skipFailedRequests);
    if (typeof this.limit !== "number") {
      throw new TypeError("RLStore needs a numeric limit: a limit function cannot be a rule of the store");
    }
  }
  prefixKey(key2) {
    return `${this.prefix}${key2}`;
  }
  async get(key2) {
    const info2 = await this.rl.info(this.prefixKey(key2));
    if (info2 === null) return void 0;
    return { totalHits: Math.max(0, info2.capacity - info2.remaining), resetTime: new Date(Date.now() + info2.reset_after_ms) };
  }
  async increment(key2) {
    const k = this.prefixKey(key2);
    const now = Date.now();
    const id = this.reserving ? (0, import_node_crypto2.randomBytes)(16).toString("hex") : null;
    const d = await this.rl.admit({
      key: k,
      limit: this.limit,
      period: this.windowMs,
      burst: this.burst,
      algo: this.algo === "gcra" ? void 0 : this.algo,
      reserve: id ? { id, keep: this.windowMs } : void 0
    });
    if (!d.allowed) {
      if (this.refusedDecrement) this.refusedPending.set(k, (this.refusedPending.get(k) ?? 0) + 1);
      return { totalHits: d.capacity + 1, resetTime: new Date(now + d.retry_after_ms) };
    }
    if (id) {
      const list = this.reservations.get(k) ?? [];
      while (list.length && list[0].until <= now) list.shift();
      list.push({ id, until: now + this.windowMs });
      this.reservations.set(k, list);
    }
    return { totalHits: d.capacity - d.remaining, resetTime: new Date(now + d.reset_after_ms) };
  }
  // Refunds one admission of the key (RL.SETTLE ... 0); a refused request's decrement refunds
  // nothing, as nothing was spent.
  async decrement(key2) {
    const k = this.prefixKey(key2);
    const pending = this.refusedPending.get(k) ?? 0;
    if (pending > 0) {
      if (pending === 1) this.refusedPending.delete(k);
      else this.refusedPending.set(k, pending - 1);
      return;
    }
    const list = this.reservations.get(k);
    const r = list?.pop();
    if (list && list.length === 0) this.reservations.delete(k);
    if (r) await this.rl.settle(k, r.id, 0);
  }
  async resetKey(key2) {
    const k = this.prefixKey(key2);
    this.reservations.delete(k);
    this.refusedPending.delete(k);
    await this.rl.adapter.send("DEL", [k], k);
  }
};

// src/rate-limiter-flexible.js
var import_node_crypto3 = require("node:crypto");
var RateLimiterRes = class {
  constructor(remainingPoints = 0, msBeforeNext = 0, consumedPoints = 0, isFirstInDuration = false) {
    this.remainingPoints = remainingPoints;
    this.msBeforeNext = msBeforeNext;
    this.consumedPoints = consumedPoints;
    this.isFirstInDuration = Boolean(isFirstInDuration);
  }
  toJSON() {
    return {
      remainingPoints: this.remainingPoints,
      msBeforeNext: this.msBeforeNext,
      consumedPoints: this.consumedPoints,
      isFirstInDuration: this.isFirstInDuration
    };
  }
  toString() {
    return JSON.stringify(this.toJSON());
  }
};
var KEPT_PER_KEY = 16;
var RateLimiterRL = class {
  // Options: `storeClient` (an ioredis/iovalkey/node-redis client or cluster, an adapter, a
  // sendCommand function, or an RL), `points` (default 4), `duration` (seconds, default 1),
  // `keyPrefix` (default `rlflx`), `blockDuration` (seconds a refused key stays refused in this
  // process, default 0), `insuranceLimiter`, `timeout` (ms per store call), `algo` (gcra or
  // bucket).
  constructor(options = {}) {
    this.rl = options.storeClient instanceof RL ? options.storeClient : new RL(options.storeClient, { timeout: options.timeout, logger: options.logger });
    this.points = options.points ?? 4;
    this.duration = options.duration ?? 1;
    if (!(this.duration > 0)) throw new TypeError("RateLimiterRL: duration must be a positive number of seconds");
    this.keyPrefix = options.keyPrefix ?? "rlflx";
    this.blockDuration = options.blockDuration ?? 0;
    this.insuranceLimiter = options.insuranceLimiter;
    this.algo = options.algo;
    this.reservations = /* @__PURE__ */ new Map();
    this.blocked = /* @__PURE__ */ new Map();
  }
  getKey(key2) {
    return this.keyPrefix ? `${this.keyPrefix}:${key2}` : String(key2);
  }
  rule(k, cost, id) {
    return {
      key: k,
      limit: this.points,
      period: Math.round(this.duration * 1e3),
      cost,
      algo: this.algo,
      reserve: id && { id, keep: Math.round(this.duration * 1e3) }
    };
  }
  // A store failure goes to the insurance limiter when there is one, else rejects unchanged.
  async insured(method, args, err) {
    if (this.insuranceLimiter && err?.isUnavailable) return this.insuranceLimiter[method](...args);
    throw err;
  }
  blockedFor(k) {
    const until = this.blocked.get(k);
    if (until === void 0) return 0;
    const left = until - Date.now();
    if (left <= 0) this.blocked.delete(k);
    return Math.max(0, left);
  }
  async consume(key2, points = 1, options = {}) {
    const k = this.getKey(key2);
    const blockedMs = this.blockedFor(k);
    if (blockedMs > 0) throw new RateLimiterRes(0, blockedMs, this.points + points);
    if (points > this.points) throw new RateLimiterRes(0, Math.round(this.duration * 1e3), points);
    const id = (0, import_node_crypto3.randomBytes)(12).toString("hex");
    let d;
    try {
      d = await this.rl.admit(this.rule(k, points, id));
    } catch (err) {
      return this.insured("consume", [key2, points, options], err);
    }
    const consumed = d.capacity - d.remaining;
    if (!d.allowed) {
      if (this.blockDuration > 0) this.blocked.set(k, Date.now() + this.blockDuration * 1e3);
      const wait = this.blockDuration > 0 ? Math.max(d.retry_after_ms, this.blockDuration * 1e3) : d.retry_after_ms;
      throw new RateLimiterRes(d.remaining, wait, consumed + points);
    }
    const list = this.reservations.get(k) ?? [];
    list.push({ id, estimate: points, until: Date.now() + this.duration * 1e3 });
    if (list.length > KEPT_PER_KEY) list.shift();
    this.reservations.set(k, list);
    return new RateLimiterRes(d.remaining, d.reset_after_ms, consumed, consumed === points);
  }
  liveReservation(k) {
    const list = this.reservations.get(k);
    const now = Date.now();
    while (list?.length) {
      const r = list.pop();
      if (r.until > now) return r;
    }
    this.reservations.delete(k);
    return null;
  }
  // Spends `points` more: the latest reservation settles at its estimate plus them, or a new
  // one of 1 unit settles at 1 + points (a debit stops at the module's debt floor).
  async penalty(key2, points = 1) {
    const k = this.getKey(key2);
    try {
      let r = this.liveReservation(k);
      if (!r) {
        const id = (0, import_node_crypto3.randomBytes)(12).toString("hex");
        const d = await this.rl.admit(this.rule(k, 1, id));
        if (!d.allowed) return new RateLimiterRes(0, d.retry_after_ms, this.points);
        r = { id, estimate: 1 };
      }
      const s = await this.rl.settle(k, r.id, r.estimate + points);
      return this.afterSettle(k, s);
    } catch (err) {
      return this.insured("penalty", [key2, points], err);
    }
  }
  // Gives `points` back, from the key's latest reservations (never more than they spent).
  async reward(key2, points = 1) {
    const k = this.getKey(key2);
    let left = points;
    let s = null;
    try {
      while (left > 0) {
        const r = this.liveReservation(k);
        if (!r) break;
        const back = Math.min(left, r.estimate);
        s = await this.rl.settle(k, r.id, r.estimate - back);
        left -= back;
      }
      return this.afterSettle(k, s);
    } catch (err) {
      return this.insured("reward", [key2, points], err);
    }
  }
  async afterSettle(k, settled) {
    if (settled === null) return this.resOf(await this.rl.info(k));
    const info2 = await this.rl.info(k);
    return info2 ? this.resOf(info2) : new RateLimiterRes(settled.remaining, 0, this.points - settled.remaining);
  }
  resOf(info2) {
    if (info2 === null) return new RateLimiterRes(this.points, 0, 0);
    return new RateLimiterRes(info2.remaining, info2.reset_after_ms, Math.max(0, info2.capacity - info2.remaining));
  }
  async get(key2) {
    const k = this.getKey(key2);
    try {
      const info2 = await this.rl.info(k);
      return info2 === null ? null : this.resOf(info2);
    } catch (err) {
      return this.insured("get", [key2], err);
    }
  }
  // Refuses the key for `secDuration` seconds in this process, and spends what the store key
  // has left, so other processes refuse it until it refills.
  async block(key2, secDuration) {
    const k = this.getKey(key2);
    this.blocked.set(k, Date.now() + secDuration * 1e3);
    try {
      const info2 = await this.rl.info(k);
      const left = info2 === null ? this.points : info2.remaining;
      if (left > 0) await this.rl.admit(this.rule(k, left));
    } catch (err) {
      return this.insured("block", [key2, secDuration], err);
    }
    return new RateLimiterRes(0, secDuration * 1e3, this.points + 1);
  }
  async delete(key2) {
    const k = this.getKey(key2);
    this.blocked.delete(k);
    this.reservations.delete(k);
    try {
      return await this.rl.adapter.send("DEL", [k], k) > 0;
    } catch (err) {
      return this.insured("delete", [key2], err);
    }
  }
};

// src/gateway/gateway.js
var import_node_crypto4 = require("node:crypto");
var import_node_perf_hooks2 = require("node:perf_hooks");

// src/gateway/lag.js
var import_node_perf_hooks = require("node:perf_hooks");
var RESOLUTION_MS = 10;
var KEPT = 128;
var LoopLag = class {
  constructor() {
    this.at = new Float64Array(KEPT);
    this.late = new Float64Array(KEPT);
    this.next = 0;
    this.due = import_node_perf_hooks.performance.now() + RESOLUTION_MS;
    this.tick = this.tick.bind(this);
    setTimeout(this.tick, RESOLUTION_MS).unref();
  }
  tick() {
    const now = import_node_perf_hooks.performance.now();
    this.at[this.next] = now;
    this.late[this.next] = Math.max(0, now - this.due);
    this.next = (this.next + 1) % KEPT;
    this.due = now + RESOLUTION_MS;
    setTimeout(this.tick, RESOLUTION_MS).unref();
  }
  // The stall under way: how long the tick now due has waited for the loop.
  stalled() {
    return Math.max(0, import_node_perf_hooks.performance.now() - this.due);
  }
  // How late the loop runs now (ms): the last tick's lateness or the stall under way.
  current() {
    return Math.max(this.stalled(), this.late[(this.next + KEPT - 1) % KEPT]);
  }
  // The latest the loop ran (ms) since `since` (performance.now() ms), the stall under way
  // included.
  since(since) {
    let worst = this.stalled();
    for (let n = 1; n <= KEPT; n++) {
      const i = (this.next + KEPT - n) % KEPT;
      if (this.at[i] < since) break;
      worst = Math.max(worst, this.late[i]);
    }
    return worst;
  }
};
var shared = null;
function loopLag() {
  shared ??= new LoopLag();
  return shared;
}

// src/gateway/native.js
var import_node_module = require("node:module");
var import_node_path2 = require("node:path");
function platform() {
  const { platform: os, arch } = process;
  if (os === "linux") {
    const musl = !process.report?.getReport?.().header?.glibcVersionRuntime;
    return `linux-${arch}-${musl ? "musl" : "gnu"}`;
  }
  if (os === "win32") return `win32-${arch}-msvc`;
  return `${os}-${arch}`;
}
var addon = null;
function engine() {
  if (addon) return addon;
  const name = platform();
  const load = (0, import_node_module.createRequire)((0, import_node_path2.join)(PACKAGE_ROOT, "package.json"));
  const tried = [];
  for (const id of [(0, import_node_path2.join)(PACKAGE_ROOT, "native", `redis-rl.${name}.node`), `redis-rl-${name}`]) {
    try {
      addon = load(id);
      return addon;
    } catch (err) {
      tried.push(`${id}: ${err.message.split("\n")[0]}`);
    }
  }
  throw new Error(`redis-rl: the gateway's native engine is not installed for ${name} (tried ${tried.join("; ")}); build it from the repository with Rust (npm run build:native) or install the prebuilt redis-rl-` + name);
}

// src/gateway/policy.js
var import_node_fs2 = require("node:fs");
var PolicyError = class extends Error {
  constructor(message) {
    super(message);
    this.name = "PolicyError";
  }
};
var textOf = (policy) => typeof policy === "string" ? policy : JSON.stringify(policy);
function parsePolicy(policy) {
  try {
    return { version: engine().loadPolicy(textOf(policy)) };
  } catch (err) {
    throw new PolicyError(err.message);
  }
}
var PolicyStore = class _PolicyStore {
  static fromFile(file) {
    return new _PolicyStore(readPolicy(file), file);
  }
  constructor(policy, file = null) {
    this.text = textOf(policy);
    this.file = file;
  }
  // The file's text now (the gateway's engine refuses it, keeping the snapshot in force, when
  // it is invalid or its version is not higher); without a file, the document given.
  read() {
    if (this.file !== null) this.text = readPolicy(this.file);
    return this.text;
  }
};
function readPolicy(file) {
  try {
    return (0, import_node_fs2.readFileSync)(file, "utf8");
  } catch (err) {
    throw new PolicyError(`cannot read policy ${file}: ${err.message}`);
  }
}

// src/gateway/gateway.js
var BACKGROUND_TIMEOUT_MS = 1e3;
var OVERLOADED_SHARE = 0.25;
var OVERLOADED = { fail: "overloaded" };
var SHED_DEADLINES = 2;
var WALL_US = Date.now() * 1e3;
var MONO_MS = import_node_perf_hooks2.performance.now();
var nowUs = () => Math.floor(WALL_US + (import_node_perf_hooks2.performance.now() - MONO_MS) * 1e3);
var sleep = (ms) => new Promise((r) => setTimeout(r, Math.max(0, ms)));
var raw = (x) => x;
function send(rl, call, options) {
  const [name, ...args] = call.args;
  if (name === "WAIT") return rl.adapter.send(name, args, call.key);
  const keys = name === "RL.MULTI" ? args.slice(1, 1 + Number(args[0])) : args.slice(0, 1);
  return rl.execute({ name, args, keys, parse: raw }, options);
}
function foreign(v) {
  if (v === null || typeof v === "string") return false;
  if (typeof v === "number") return !Number.isInteger(v);
  if (Array.isArray(v)) return v.some(foreign);
  return true;
}
function wire(v) {
  if (!foreign(v)) return v;
  if (v === void 0) return null;
  if (typeof v === "number") return Number.isInteger(v) ? v : String(v);
  if (typeof v === "bigint") return Number(v);
  if (typeof v === "boolean") return v ? 1 : 0;
  if (Buffer.isBuffer(v)) return v.toString("utf8");
  if (Array.isArray(v)) return v.map(wire);
  if (v instanceof Error) return { error: v.message };
  const entries = v instanceof Map ? [...v] : Object.entries(v);
  return { map: entries.map(([k, x]) => [wire(k), wire(x)]) };
}
function failure(err) {
  const e = classify(err);
  if (e.kind === "refused") return { error: e.message };
  if (e.kind === "unavailable") return { fail: e.timeout ? "timeout" : e.message };
  return { error: `ERR ${e.message}` };
}
async function sendAll(rl, calls, deadline, since) {
  const answers = [];
  const cancel = { cancelled: false };
  let taken = false;
  const answerOf = async (call) => {
    try {
      return { reply: wire(await send(rl, call, { cancel })) };
    } catch (err) {
      const answer = failure(err);
      return cancel.cancelled && answer.fail !== void 0 ? null : answer;
    }
  };
  const sending = (async () => {
    if (calls[0]?.args[0] === "WAIT") {
      answers.push(...calls.map(() => ({ fail: "timeout" })));
      await Promise.all(calls.map(async (call, i) => {
        const answer = await answerOf(call);
        if (!taken && answer) answers[i] = answer;
      }));
      return;
    }
    for (const call of calls) {
      if (cancel.cancelled) return;
      const answer = await answerOf(call);
      if (taken || !answer) return;
      answers.push(answer);
    }
  })();
  const ms = Math.max(1, (deadline - nowUs()) / 1e3);
  const missed = await withDeadline(sending, ms, cancel).then(() => false, () => true);
  const overloaded = missed && loopLag().since(since) >= OVERLOADED_SHARE * ms;
  if (overloaded) await new Promise((r) => setImmediate(r));
  taken = true;
  const got = answers.slice();
  if (overloaded) while (got.length < calls.length) got.push(OVERLOADED);
  return got;
}
var LEFT = {
  "RL.RELEASE": "the slot is held until its lease ends",
  "RL.RENEW": "the slot expires at the end of its lease, perhaps before the request ends",
  "RL.SETTLE": "the reservation stays at its estimate"
};
async function sendEach(rl, calls, logger, route) {
  for (const call of calls) {
    await send(rl, call, { timeout: BACKGROUND_TIMEOUT_MS }).catch((err) => {
      const e = classify(err);
      const why = e.kind === "refused" ? `the store refused it (${e.message.split(" ", 1)[0]})` : e.message;
      const name = call.args[0];
      logger.warn?.(
        `redis-rl: ${name} in the background failed: ${why}; ${LEFT[name] ?? "it is not retried"}`,
        { route, command: name }
      );
    });
  }
}
var Gateway = class {
  // Options: `store` (a client, adapter or RL), `policy` (a PolicyStore, or a policy document
  // as text or object), `durableStore` (connections of their own for durable routes),
  // `legacyHeaders`, `logSample` (the share of admissions recorded, 0 to 1, default 0.001),
  // `logPerSecond` (the most decision records a second, default 100), `tableBytes` (each local table's
  // bound in bytes, default 32 MiB), `logger`, `hook(event)`, `identify(request)` (async,
  // `{ user, tenant }`).
  constructor(options) {
    const { Engine } = engine();
    this.logger = options.logger ?? console;
    this.identify = options.identify;
    this.hook = options.hook;
    this.policies = options.policy instanceof PolicyStore ? options.policy : new PolicyStore(options.policy);
    try {
      this.engine = new Engine(this.policies.text, {
        legacyHeaders: Boolean(options.legacyHeaders),
        logSample: options.logSample ?? 1e-3,
        logPerSecond: options.logPerSecond,
        tableBytes: options.tableBytes,
        seed: (0, import_node_crypto4.randomBytes)(6).readUIntBE(0, 6),
        events: Boolean(this.hook)
      });
    } catch (err) {
      throw new PolicyError(err.message);
    }
    this.warn();
    this.lag = loopLag();
    this.timeoutMs = null;
    this.rl = this.client(options.store);
    this.durable = options.durableStore ? this.client(options.durableStore) : this.rl;
    this.events();
    const engine2 = this.engine;
    this.metrics = {
      render: () => engine2.metrics(),
      // One series of rl_gateway_decisions_total, 0 when absent.
      count(route, rule, outcome) {
        const line = `rl_gateway_decisions_total{route="${route}",rule="${rule}",outcome="${outcome}"} `;
        const found = engine2.metrics().split("\n").find((l) => l.startsWith(line));
        return found ? Number(found.slice(line.length)) : 0;
      }
    };
  }
  // The client's mode (module or script) is reported as rl_gateway_store_mode.
  client(store) {
    const onMode = (mode) => {
      this.engine.storeMode(mode);
      this.events();
    };
    if (!(store instanceof RL)) return new RL(store, { logger: this.logger, onMode });
    const previous = store.onMode;
    store.onMode = (m) => {
      previous?.(m);
      onMode(m);
    };
    if (store.mode) onMode(store.mode);
    return store;
  }
  // What the policy holds that is legal but worth an operator's look (an override that had
  // already expired when it was loaded).
  warn() {
    for (const w of this.engine.warnings) this.logger.warn?.(`redis-rl: policy version ${this.engine.policyVersion}: ${w}`);
  }
  events() {
    if (this.hook) for (const e of this.engine.events()) this.hook(e);
  }
  get policy() {
    return { version: this.engine.policyVersion };
  }
  // Re-reads the policy file; throws a PolicyError (and keeps the snapshot in force) when
  // refused.
  reload() {
    const text = this.policies.read();
    try {
      this.engine.reload(text);
    } catch (err) {
      throw new PolicyError(err.message);
    }
    this.warn();
    this.events();
    return this.policy;
  }
  // `req`: { method, path, headers (as node:http gives them: lower-case names, one code unit per
  // byte received, so keys are those of the other drivers for the same bytes), headersDistinct?,
  // peer, caseInsensitive? (the framework routes paths without case: express by default) }. The engine reads `headersDistinct` when given: `headers` joins a repeated header's
  // values with ", " (`x-user: a` twice would be the identity "a, a"), and the engine takes the
  // first value, as every other face does; `identify` gets `req` as it came. Resolves
  // null when no route matches, else { status, headers, body? (the problem, JSON text), finish?,
  // done? }: `finish({ actualCost, status })` once the backend answered (settlement), `done()`
  // when the response ended or was dropped (releases).
  async decide(req) {
    const request = { method: req.method, path: req.path, latin1: true, peer: req.peer, caseInsensitive: req.caseInsensitive };
    const headers = req.headersDistinct ?? req.headers;
    if (this.timeoutMs !== null && this.lag.current() >= SHED_DEADLINES * this.timeoutMs) {
      return this.answer(this.engine.shed(request, headers, nowUs()));
    }
    if (this.identify && this.engine.routed(req.method, req.path, req.caseInsensitive)) {
      const c = await this.identify(req) ?? {};
      request.caller = { user: c.user || void 0, tenant: c.tenant || void 0 };
    }
    const since = import_node_perf_hooks2.performance.now();
    const started = nowUs();
    return this.drive(this.engine.begin(request, headers, started), started, since);
  }
  // Decides keyed checks (what a face that is not HTTP translates its requests into, as the Envoy
  // rate limit service's descriptors) under the policy's route named `route`: its posture, its
  // name in metrics and records; a route the policy lacks is answered 500. `checks`: `{ rule,
  // key, cost? }`, a rule of the policy in force by name (one it lacks throws, and nothing is
  // decided), the key it counts on, the units it takes (1 when not given; 0 only asks). All are
  // admitted or none. Resolves { status, headers, body?, checks, done? }: `checks` holds each
  // one's { over, remaining?, resetAfterMs?, retryAfterMs?, source }, in order; `done()` releases
  // a semaphore's slot.
  async check(route, checks) {
    const since = import_node_perf_hooks2.performance.now();
    const started = nowUs();
    return this.drive(this.engine.check(route, checks, started), started, since, true);
  }
  // Runs a decision's steps until its verdict: the calls under the engine's deadline, the waits.
  // `keyed`: the decision carries each check's outcome.
  async drive(pending, started, since, keyed = false) {
    const rl = pending.isDurable() ? this.durable : this.rl;
    let step = pending.first();
    while (step.kind !== "done") {
      if (step.kind === "wait") {
        await sleep((step.until - nowUs()) / 1e3);
        step = pending.resume([], nowUs());
      } else {
        this.timeoutMs = (step.deadline - started) / 1e3;
        const answers = await sendAll(rl, step.calls, step.deadline, since);
        step = pending.resume(answers, nowUs());
      }
    }
    const decision = this.answer(step.verdict, rl);
    if (keyed) decision.checks = step.verdict.checks;
    if (decision?.status !== 200) return decision;
    return held(decision, pending.holdings(), started, (calls) => sendEach(rl, calls, this.logger, step.verdict.route));
  }
  // A verdict's background calls sent, its records logged; null when no route matched, else the
  // gateway's own answer or an admission (status 200).
  answer(verdict, rl = this.rl) {
    if (verdict.background.length) sendEach(rl, verdict.background, this.logger, verdict.route);
    this.log(verdict.log);
    this.events();
    if (verdict.route === void 0 && verdict.status === void 0) return null;
    if (verdict.status !== void 0) return { status: verdict.status, headers: verdict.headers, body: verdict.problem };
    return { status: 200, headers: verdict.headers };
  }
  // Decision records; never a key or an identity.
  log(records) {
    for (const r of records) {
      const entry = {
        reason: r.reason,
        route: r.route,
        rule: r.rule,
        plan: r.plan,
        policy_version: r.policyVersion,
        outcome: r.outcome,
        decision: r.decision
      };
      if (r.level === "warn") this.logger.warn?.(r.message, entry);
      else this.logger.info?.(r.message, entry);
    }
  }
};
function held(decision, holdings, started, background) {
  if (!holdings) return decision;
  const every = holdings.renewEveryMs();
  const timer = every ? setInterval(() => background(holdings.tick(started, nowUs())), every) : null;
  timer?.unref?.();
  let settled = false;
  decision.finish = async ({ actualCost, status } = {}) => {
    if (settled) return;
    settled = true;
    const actual = Array.isArray(actualCost) ? actualCost[0] : actualCost;
    const known = Number.isInteger(status) && status >= 0 ? status : null;
    await background(holdings.settle(actual === void 0 || actual === null ? null : String(actual), known));
  };
  let ended = false;
  decision.done = async () => {
    if (ended) return;
    ended = true;
    clearInterval(timer);
    await background(holdings.release());
  };
  return decision;
}

// src/gateway/express.js
var PROBLEM_TYPE = "application/problem+json";
function put(res, name, value) {
  if (name.startsWith("RateLimit") && res.appendHeader) res.appendHeader(name, value);
  else res.setHeader(name, value);
}
function send2(res, decision) {
  res.statusCode = decision.status;
  res.setHeader("Content-Type", PROBLEM_TYPE);
  for (const [k, v] of decision.headers) put(res, k, v);
  res.end(decision.body);
}
function settleBeforeSending(res, decision) {
  const write = res.write.bind(res);
  const end = res.end.bind(res);
  let settled = null;
  const settle2 = () => {
    settled ??= decision.finish({ actualCost: res.getHeader("x-actual-cost"), status: res.statusCode });
    return settled;
  };
  res.write = (...args) => {
    settle2().then(() => write(...args), () => write(...args));
    return true;
  };
  res.end = (...args) => {
    settle2().then(() => end(...args), () => end(...args));
    return res;
  };
}
function expressMiddleware(gateway) {
  return async function redisRl(req, res, next) {
    let decision;
    try {
      decision = await gateway.decide({
        method: req.method,
        path: req.path ?? new URL(req.url, "http://x").pathname,
        headers: req.headers,
        headersDistinct: req.headersDistinct,
        peer: req.socket?.remoteAddress,
        // express routes /CHECKOUT to the handler of /checkout unless told otherwise.
        caseInsensitive: req.app ? !req.app.get("case sensitive routing") : false
      });
    } catch (err) {
      next(err);
      return;
    }
    if (!decision) {
      next();
      return;
    }
    if (decision.status !== 200) {
      send2(res, decision);
      return;
    }
    for (const [k, v] of decision.headers) put(res, k, v);
    if (decision.done) {
      if (req.socket?.destroyed) decision.done();
      else res.once("close", decision.done);
    }
    if (decision.finish) settleBeforeSending(res, decision);
    next();
  };
}

// src/gateway/fastify.js
var PROBLEM_TYPE2 = "application/problem+json";
var DECISION = /* @__PURE__ */ Symbol("redis-rl decision");
function fastifyPlugin(gateway) {
  const plugin = async function redisRl(fastify) {
    fastify.addHook("onRequest", async (request, reply) => {
      const decision = await gateway.decide({
        method: request.method,
        path: request.url.split("?")[0],
        headers: request.headers,
        headersDistinct: request.raw.headersDistinct,
        peer: request.socket?.remoteAddress
      });
      if (!decision) return;
      if (decision.status !== 200) {
        for (const [k, v] of decision.headers) reply.header(k, v);
        reply.code(decision.status).type(PROBLEM_TYPE2).send(decision.body);
        return reply;
      }
      for (const [k, v] of decision.headers) reply.header(k, v);
      request[DECISION] = decision;
      if (decision.done) {
        if (request.raw.socket?.destroyed) decision.done();
        else request.raw.once("close", decision.done);
      }
    });
    fastify.addHook("onSend", async (request, reply, payload) => {
      await request[DECISION]?.finish?.({ actualCost: reply.getHeader("x-actual-cost"), status: reply.statusCode });
      return payload;
    });
    fastify.addHook("onResponse", async (request) => {
      request[DECISION]?.done?.();
    });
  };
  plugin[/* @__PURE__ */ Symbol.for("skip-override")] = true;
  return plugin;
}

// src/gateway/retry.js
var import_node_crypto5 = require("node:crypto");
var RETRIED = /* @__PURE__ */ new Set([408, 425, 429, 500, 502, 503, 504]);
var IDEMPOTENT = /* @__PURE__ */ new Set(["GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"]);
function retryAfterMs(value, now = Date.now()) {
  if (value === null || value === void 0) return null;
  const text = String(value).trim();
  if (/^[0-9]+$/.test(text)) return Number(text) * 1e3;
  const at = Date.parse(text);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}
async function fetchWithRetry(input, init = {}, options = {}) {
  const {
    maxAttempts = 3,
    baseMs = 100,
    capMs = 1e4,
    fetch: doFetch = globalThis.fetch,
    random = Math.random,
    sleep: sleep2 = (ms) => new Promise((r) => setTimeout(r, ms))
  } = options;
  const method = String(init.method ?? (input instanceof Request ? input.method : "GET")).toUpperCase();
  const headers = new Headers(init.headers ?? (input instanceof Request ? input.headers : void 0));
  if (!IDEMPOTENT.has(method) && !headers.has("idempotency-key")) headers.set("idempotency-key", (0, import_node_crypto5.randomBytes)(16).toString("hex"));
  let last;
  for (let attempt = 1; ; attempt++) {
    let response = null;
    try {
      response = await doFetch(input, { ...init, headers });
      if (!RETRIED.has(response.status)) return response;
      last = { response };
    } catch (err) {
      last = { error: err };
    }
    if (attempt >= maxAttempts) break;
    const d = Math.min(capMs, baseMs * 2 ** (attempt - 1));
    let wait = d / 2 + random() * (d / 2);
    const told = response && retryAfterMs(response.headers.get("retry-after"));
    if (told !== null && told !== void 0) {
      if (told > capMs) return response;
      wait = Math.max(wait, told);
    }
    await response?.body?.cancel().catch(() => {
    });
    await sleep2(wait);
  }
  if (last.error) throw last.error;
  return last.response;
}

// src/gateway/memory.js
var MemoryStore = class {
  constructor() {
    this.store = new (engine()).MemoryStore();
  }
  call(args, nowUs2) {
    return this.store.call(args.map(String), nowUs2);
  }
};

// src/gateway/published.js
var import_node_fs3 = require("node:fs");
var DEFAULT_KEY = "rl:policy";
var withTimeout = (promise, ms, what) => {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
};
var PublishedPolicy = class {
  constructor(redis, { key: key2 = DEFAULT_KEY, cache = null, pollMs = 5e3, timeoutMs = 2e3, logger = console } = {}) {
    this.redis = redis;
    this.key = key2;
    this.cache = cache;
    this.pollMs = pollMs;
    this.timeoutMs = timeoutMs;
    this.logger = logger;
    this.publishedAtMs = 0;
    this.subscriber = null;
    this.timer = null;
  }
  async fetch() {
    const fields = await withTimeout(this.redis.hgetall(this.key), this.timeoutMs, "read the snapshot");
    if (!fields || fields.document === void 0) return null;
    return {
      version: Number(fields.version ?? 0),
      published_by: fields.published_by ?? "",
      published_at_ms: Number(fields.published_at_ms ?? 0),
      document: fields.document
    };
  }
  // Whole or not at all: a crash mid-write never leaves a half file to start from.
  writeCache(snapshot) {
    if (this.cache === null) return;
    (0, import_node_fs3.writeFileSync)(`${this.cache}.tmp`, JSON.stringify(snapshot));
    (0, import_node_fs3.renameSync)(`${this.cache}.tmp`, this.cache);
  }
  // The snapshot to start with, as the policy's text: the store's, else the cache's; throws a
  // PolicyError saying why there is none.
  async load() {
    let unreachable;
    try {
      const snapshot2 = await this.fetch();
      if (snapshot2 === null) throw new PolicyError(`no policy is published at ${this.key}`);
      this.publishedAtMs = snapshot2.published_at_ms;
      try {
        this.writeCache(snapshot2);
      } catch (err) {
        this.logger.warn?.(`cannot write the policy cache: ${err.message}`);
      }
      return snapshot2.document;
    } catch (err) {
      if (err instanceof PolicyError) throw err;
      unreachable = err;
    }
    if (this.cache === null) {
      throw new PolicyError(`the store is unreachable (${unreachable.message}) and no cache holds a snapshot to start from`);
    }
    let snapshot;
    try {
      snapshot = JSON.parse((0, import_node_fs3.readFileSync)(this.cache, "utf8"));
    } catch (err) {
      throw new PolicyError(`the store is unreachable (${unreachable.message}) and the policy cache cannot be read: ${err.message}`);
    }
    this.logger.warn?.(`the store is unreachable (${unreachable.message}); starting from the snapshot cached in ${this.cache} (version ${snapshot.version})`);
    this.publishedAtMs = Number(snapshot.published_at_ms ?? 0);
    return snapshot.document;
  }
  // Puts the stored snapshot in force if it is higher than the gateway's: its version, or null.
  async refresh(gateway) {
    const version = await withTimeout(this.redis.hget(this.key, "version"), this.timeoutMs, "read the version");
    if (version === null || Number(version) <= gateway.policy.version) return null;
    const snapshot = await this.fetch();
    if (snapshot === null) return null;
    gateway.engine.reload(snapshot.document);
    this.publishedAtMs = snapshot.published_at_ms;
    gateway.engine.policyPublished(this.publishedAtMs * 1e3);
    this.writeCache(snapshot);
    this.logger.info?.(`following ${this.key}: version ${gateway.policy.version} in force (published by ${snapshot.published_by})`);
    return gateway.policy.version;
  }
  // Follows the key until `stop()`: each notice, and each poll, refreshes; a failure is logged
  // once per streak and the snapshot in force stays.
  follow(gateway) {
    if (this.publishedAtMs) gateway.engine.policyPublished(this.publishedAtMs * 1e3);
    let failing = false;
    const refresh = () => this.refresh(gateway).then(
      () => {
        failing = false;
      },
      (err) => {
        if (!failing) this.logger.warn?.(`cannot refresh the policy from ${this.key} (${err.message}); the snapshot in force stays`);
        failing = true;
      }
    );
    this.subscriber = this.redis.duplicate();
    this.subscriber.on("error", () => {
    });
    this.subscriber.on("message", (channel) => {
      if (channel === this.key) refresh();
    });
    this.subscriber.on("ready", refresh);
    this.subscriber.subscribe(this.key).catch(() => {
    });
    this.timer = setInterval(refresh, this.pollMs);
    this.timer.unref?.();
    return this;
  }
  async stop() {
    clearInterval(this.timer);
    this.timer = null;
    if (this.subscriber) {
      this.subscriber.disconnect();
      this.subscriber = null;
    }
  }
};
// Annotate the CommonJS export names for ESM import in node:
0 && (module.exports = {
  ALGOS,
  Gateway,
  MemoryStore,
  PolicyError,
  PolicyStore,
  PublishedPolicy,
  RL,
  RLError,
  RLStore,
  RateLimiterRL,
  RateLimiterRes,
  SCRIPT_PATH,
  TimeoutError,
  adapt,
  classify,
  commands,
  commonSlot,
  durationArg,
  expressMiddleware,
  fastifyPlugin,
  fetchWithRetry,
  fromIoredis,
  fromIovalkey,
  fromNodeRedis,
  fromSendCommand,
  headers,
  keySlot,
  parseDuration,
  parsePolicy,
  retryAfterMs,
  withDeadline
});
