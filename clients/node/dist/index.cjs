var __create = Object.create;
var __defProp = Object.defineProperty;
var __getOwnPropDesc = Object.getOwnPropertyDescriptor;
var __getOwnPropNames = Object.getOwnPropertyNames;
var __getProtoOf = Object.getPrototypeOf;
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
var __toESM = (mod, isNodeMode, target) => (target = mod != null ? __create(__getProtoOf(mod)) : {}, __copyProps(
  // If the importer is in node compatibility mode or this is not an ESM
  // file that has been converted to a CommonJS file using a Babel-
  // compatible transform (i.e. "__esModule" has not been set), then set
  // "default" to the CommonJS "module.exports" for node compatibility.
  isNodeMode || !mod || !mod.__esModule ? __defProp(target, "default", { value: mod, enumerable: true }) : target,
  mod
));
var __toCommonJS = (mod) => __copyProps(__defProp({}, "__esModule", { value: true }), mod);

// src/index.js
var index_exports = {};
__export(index_exports, {
  ALGOS: () => ALGOS,
  Gateway: () => Gateway,
  PolicyError: () => PolicyError,
  PolicyStore: () => PolicyStore,
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
function wrap(send2, extra = {}) {
  return {
    ...extra,
    async send(name, args, firstKey) {
      try {
        return await send2(name, args, firstKey);
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
function settle(k, id, actual) {
  return command("RL.SETTLE", [key(k), key(id, "id"), countArg(actual, "actual")], [k], parseSettle);
}
function info(k) {
  return command("RL.INFO", [key(k)], [k], parseInfo);
}
function throttle(k, maxBurst, count2, periodSeconds, quantity) {
  const args = [key(k), countArg(maxBurst, "max_burst"), countArg(count2, "count"), countArg(periodSeconds, "period")];
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
  async settle(key2, id, actual) {
    return this.execute(settle(key2, id, actual));
  }
  async info(key2) {
    return this.execute(info(key2));
  }
  async throttle(key2, maxBurst, count2, periodSeconds, quantity) {
    return this.execute(throttle(key2, maxBurst, count2, periodSeconds, quantity));
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
      const raw = mode === "script" ? await this.evalsha(cmd, cancel) : await this.native(cmd, cancel);
      return cmd.parse(raw);
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
var import_node_net2 = __toESM(require("node:net"), 1);
var import_node_perf_hooks = require("node:perf_hooks");

// src/gateway/breaker.js
var Breaker = class {
  constructor({ failures, openMs, rampMs }, { now = Date.now, random = Math.random, onState } = {}) {
    Object.assign(this, { failures, openMs, rampMs, now, random, onState });
    this.state = "closed";
    this.consecutive = 0;
    this.until = 0;
    this.probing = false;
    this.rampStart = 0;
    this.openings = 0;
  }
  configure({ failures, openMs, rampMs }) {
    Object.assign(this, { failures, openMs, rampMs });
  }
  set(state) {
    if (state !== this.state) {
      this.state = state;
      this.onState?.(state);
    }
  }
  current() {
    if (this.state === "open" && this.now() >= this.until) this.set("half_open");
    if (this.state === "ramping" && this.now() - this.rampStart >= this.rampMs) this.set("closed");
    return this.state;
  }
  // Whether a request goes to the store: a ticket to report with, or null for the posture.
  // `deny` routes always go to the store while ramping: they admitted nothing during the
  // outage, so their keys hold no catch-up burst.
  admit(mode) {
    const state = this.current();
    if (state === "closed") return { probe: false, epoch: this.epoch() };
    if (state === "open") return null;
    if (state === "half_open") {
      if (this.probing) return null;
      this.probing = true;
      return { probe: true, epoch: this.epoch() };
    }
    const share = (this.now() - this.rampStart) / this.rampMs;
    if (mode === "deny" || this.random() < share) return { probe: false, epoch: this.epoch() };
    return null;
  }
  // The count of openings: a call let through before the breaker opened changes nothing after.
  epoch() {
    return this.openings;
  }
  report(ticket, ok) {
    if (ticket.probe) {
      this.probing = false;
      if (ok) {
        if (this.rampMs === 0) this.set("closed");
        else {
          this.rampStart = this.now();
          this.set("ramping");
        }
        this.consecutive = 0;
      } else this.open();
      return;
    }
    if (ticket.epoch !== this.epoch() || this.state !== "closed" && this.state !== "ramping") return;
    if (ok) this.consecutive = 0;
    else if (++this.consecutive >= this.failures) this.open();
  }
  // A request that needed no store call (its grants spent locally) decides nothing; a probe's
  // slot goes to the next request.
  unused(ticket) {
    if (ticket.probe) this.probing = false;
  }
  open() {
    this.openings += 1;
    this.consecutive = 0;
    this.until = this.now() + this.openMs;
    this.set("open");
  }
};

// src/gateway/cache.js
var Lru = class {
  constructor(max) {
    this.max = max;
    this.map = /* @__PURE__ */ new Map();
  }
  get(key2) {
    const v = this.map.get(key2);
    if (v !== void 0) {
      this.map.delete(key2);
      this.map.set(key2, v);
    }
    return v;
  }
  set(key2, value) {
    this.map.delete(key2);
    this.map.set(key2, value);
    while (this.map.size > this.max) this.map.delete(this.map.keys().next().value);
  }
  delete(key2) {
    this.map.delete(key2);
  }
  get size() {
    return this.map.size;
  }
};
var NegativeCache = class {
  constructor(entries, now = Date.now) {
    this.lru = new Lru(entries);
    this.now = now;
  }
  resize(entries) {
    this.lru.max = entries;
  }
  refused(rule, key2, cost, retryAfterMs2, maxMs) {
    if (retryAfterMs2 <= 0) return;
    this.lru.set(`${rule}\0${key2}`, { cost, until: this.now() + Math.min(retryAfterMs2, maxMs) });
  }
  // The remaining wait when (rule, key) refuses a request of `cost` locally, or 0.
  check(rule, key2, cost) {
    const id = `${rule}\0${key2}`;
    const entry = this.lru.get(id);
    if (!entry) return 0;
    const left = entry.until - this.now();
    if (left <= 0) {
      this.lru.delete(id);
      return 0;
    }
    return cost >= entry.cost ? left : 0;
  }
};

// src/gateway/fallback.js
var ceilDiv = (a, b) => (a + b - 1n) / b;
function gcraDecide(state, { limit, periodMs, capacity }, cost, nowUs) {
  const lim = BigInt(limit);
  const unit = BigInt(periodMs) * 1000n;
  const now = BigInt(nowUs) * lim;
  const tat = state.tat > now ? state.tat : now;
  const window = BigInt(capacity) * unit;
  const next = tat + BigInt(cost) * unit;
  const scaledToMs = (scaled) => Number(ceilDiv(ceilDiv(scaled, lim), 1000n));
  if (next - now > window) {
    return {
      allowed: false,
      remaining: Number((window - (tat - now)) / unit),
      retry_after_ms: scaledToMs(next - now - window),
      reset_after_ms: scaledToMs(tat - now),
      capacity
    };
  }
  state.tat = next;
  return {
    allowed: true,
    remaining: Number((window - (next - now)) / unit),
    retry_after_ms: 0,
    reset_after_ms: scaledToMs(next - now),
    capacity
  };
}
var Fallback = class {
  constructor(entries, nowUs = () => Date.now() * 1e3) {
    this.lru = new Lru(entries);
    this.nowUs = nowUs;
  }
  decide(routeName, key2, rule, cost) {
    const id = `${routeName}\0${key2}`;
    let state = this.lru.get(id);
    if (!state) {
      state = { tat: 0n };
      this.lru.set(id, state);
    }
    return gcraDecide(state, rule, cost, this.nowUs());
  }
};

// src/gateway/metrics.js
var OUTCOMES = [
  "admit",
  "refuse",
  "refuse_cached",
  "unavailable_deny",
  "fallback_admit",
  "fallback_refuse",
  "open_admit",
  "shadow_refuse",
  "unreplicated_admit"
];
var RESULTS = ["ok", "error", "timeout"];
var BUCKETS = [5e-4, 1e-3, 25e-4, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1];
var BREAKER_STATES = ["closed", "open", "half_open", "ramping"];
var MODES = ["deny", "fallback", "allow"];
var escape = (v) => String(v).replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
var cmp = (a, b) => a < b ? -1 : a > b ? 1 : 0;
var Metrics = class {
  constructor(hook) {
    this.hook = hook;
    this.decisions = /* @__PURE__ */ new Map();
    this.calls = new Map(RESULTS.map((r) => [r, { buckets: BUCKETS.map(() => 0), sum: 0, count: 0 }]));
    this.refills = /* @__PURE__ */ new Map();
    this.breaker = "closed";
    this.version = 0;
    this.routeModes = /* @__PURE__ */ new Map();
    this.storeMode = null;
  }
  emit(event) {
    this.hook?.(event);
  }
  decision(route, rule, outcome) {
    const id = JSON.stringify([route, rule, outcome]);
    this.decisions.set(id, (this.decisions.get(id) ?? 0) + 1);
    this.emit({ type: "decision", route, rule, outcome });
  }
  storeCall(result, seconds) {
    const h = this.calls.get(result);
    BUCKETS.forEach((b, i) => {
      if (seconds <= b) h.buckets[i] += 1;
    });
    h.sum += seconds;
    h.count += 1;
    this.emit({ type: "store_call", result, seconds });
  }
  grantRefill(rule) {
    this.refills.set(rule, (this.refills.get(rule) ?? 0) + 1);
    this.emit({ type: "grant_refill", rule });
  }
  breakerState(state) {
    this.breaker = state;
    this.emit({ type: "breaker_state", state });
  }
  policy(policy) {
    this.version = policy.version;
    this.routeModes = new Map(policy.routes.map((r) => [r.name, r.onStoreError.mode]));
    this.emit({ type: "policy_version", version: policy.version });
    for (const [route, mode] of this.routeModes) this.emit({ type: "route_mode", route, mode });
  }
  mode(mode) {
    this.storeMode = mode;
    this.emit({ type: "store_mode", mode });
  }
  count(route, rule, outcome) {
    return this.decisions.get(JSON.stringify([route, rule, outcome])) ?? 0;
  }
  render() {
    const out = [];
    const family = (name, type, help) => out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    family("rl_gateway_decisions_total", "counter", "Rule decisions by route, rule and outcome.");
    const rows = [...this.decisions].map(([id, n]) => [...JSON.parse(id), n]);
    rows.sort((a, b) => cmp(a[0], b[0]) || cmp(a[1], b[1]) || OUTCOMES.indexOf(a[2]) - OUTCOMES.indexOf(b[2]));
    for (const [route, rule, outcome, n] of rows) {
      out.push(`rl_gateway_decisions_total{route="${escape(route)}",rule="${escape(rule)}",outcome="${outcome}"} ${n}`);
    }
    family("rl_gateway_store_call_duration_seconds", "histogram", "Store call latency by result.");
    for (const result of RESULTS) {
      const h = this.calls.get(result);
      if (h.count === 0) continue;
      BUCKETS.forEach((b, i) => out.push(`rl_gateway_store_call_duration_seconds_bucket{result="${result}",le="${b}"} ${h.buckets[i]}`));
      out.push(`rl_gateway_store_call_duration_seconds_bucket{result="${result}",le="+Inf"} ${h.count}`);
      out.push(`rl_gateway_store_call_duration_seconds_sum{result="${result}"} ${h.sum}`);
      out.push(`rl_gateway_store_call_duration_seconds_count{result="${result}"} ${h.count}`);
    }
    family("rl_gateway_grant_refills_total", "counter", "RL.GRANT calls by rule.");
    for (const [rule, n] of [...this.refills].sort((a, b) => cmp(a[0], b[0]))) {
      out.push(`rl_gateway_grant_refills_total{rule="${escape(rule)}"} ${n}`);
    }
    family("rl_gateway_breaker_state", "gauge", "The store breaker: 1 for the current state.");
    for (const s of BREAKER_STATES) out.push(`rl_gateway_breaker_state{state="${s}"} ${s === this.breaker ? 1 : 0}`);
    family("rl_gateway_policy_version", "gauge", "Version of the policy in force.");
    out.push(`rl_gateway_policy_version ${this.version}`);
    family("rl_gateway_route_mode", "gauge", "Each route's posture when the store cannot answer.");
    for (const [route, mode] of [...this.routeModes].sort((a, b) => cmp(a[0], b[0]))) {
      for (const m of MODES) out.push(`rl_gateway_route_mode{route="${escape(route)}",mode="${m}"} ${m === mode ? 1 : 0}`);
    }
    family("rl_gateway_store_mode", "gauge", "How commands reach the store: the module, or the script.");
    for (const m of ["module", "script"]) {
      if (this.storeMode !== null) out.push(`rl_gateway_store_mode{mode="${m}"} ${m === this.storeMode ? 1 : 0}`);
    }
    return `${out.join("\n")}
`;
  }
};

// src/gateway/policy.js
var import_node_fs2 = require("node:fs");
var import_node_net = __toESM(require("node:net"), 1);
var PolicyError = class extends Error {
  constructor(message) {
    super(message);
    this.name = "PolicyError";
  }
};
var invalid = (path, message) => new PolicyError(path ? `invalid policy: ${path}: ${message}` : `invalid policy: ${message}`);
var MAX_COUNT = 1e15;
var MAX_LOG_LIMIT = 1e4;
var MAX_SEMAPHORE = 1e5;
var DAY_MS = 864e5;
var MAX_PERIOD_MS = 3650 * DAY_MS;
var UNIT_MS2 = { ms: 1, s: 1e3, m: 6e4, h: 36e5, d: DAY_MS };
function duration(path, value, maxMs = MAX_PERIOD_MS, maxText = "3650d") {
  if (typeof value !== "string") throw invalid(path, `must be a duration string such as "10s" (got ${JSON.stringify(value)})`);
  const m = /^([0-9]*)([a-zA-Z]*)$/.exec(value);
  if (m && m[1] && !m[2]) throw invalid(path, "needs a unit: add ms, s, m, h or d (for example 10s)");
  const scale = m && UNIT_MS2[m[2].toLowerCase()];
  if (!m || !m[1] || !scale) throw invalid(path, "must be a positive integer followed by ms, s, m, h or d (for example 10s)");
  const ms = Number(m[1]) * scale;
  if (!(ms >= 1 && ms <= maxMs)) throw invalid(path, `must be between 1ms and ${maxText}`);
  return ms;
}
function count(path, value, max = MAX_COUNT) {
  if (!Number.isInteger(value)) throw invalid(path, `must be an integer (got ${JSON.stringify(value)})`);
  if (value < 1 || value > max) throw invalid(path, `must be in the range [1, ${max}]`);
  return value;
}
function object(path, value, fields) {
  if (value === null || typeof value !== "object" || Array.isArray(value)) throw invalid(path, "must be an object");
  for (const k of Object.keys(value)) {
    if (!fields.includes(k)) throw invalid(path ? `${path}.${k}` : k, `unknown field (known: ${fields.join(", ")})`);
  }
  return value;
}
function bool(path, value, dflt) {
  if (value === void 0) return dflt;
  if (typeof value !== "boolean") throw invalid(path, "must be true or false");
  return value;
}
function str(path, value) {
  if (typeof value !== "string") throw invalid(path, "must be a string");
  return value;
}
var VARS = ["user", "tenant", "ip", "route"];
var ANONYMOUS = "anonymous";
function parseTemplate(path, source) {
  if (typeof source !== "string") throw invalid(path, "must be a string");
  if (source === "") throw invalid(path, "a key must not be empty");
  const parts = [];
  let rest = source;
  for (let at = rest.indexOf("${"); at >= 0; at = rest.indexOf("${")) {
    if (at > 0) parts.push({ text: rest.slice(0, at) });
    const close = rest.indexOf("}", at + 2);
    if (close < 0) throw invalid(path, `unclosed '\${' in '${source}'`);
    const name = rest.slice(at + 2, close);
    if (!VARS.includes(name)) throw invalid(path, `unknown variable '\${${name}}' (known: user, tenant, ip, route)`);
    parts.push({ v: name });
    rest = rest.slice(close + 1);
  }
  if (rest) parts.push({ text: rest });
  return { source, parts, tag: hashTag(parts) };
}
function hashTag(parts) {
  let tag = null;
  for (const p of parts) {
    if (p.text !== void 0) {
      if (tag === null) {
        const open = p.text.indexOf("{");
        if (open < 0) continue;
        const inside = p.text.slice(open + 1);
        const close = inside.indexOf("}");
        if (close >= 0) return close > 0 ? inside.slice(0, close) : null;
        tag = inside;
      } else {
        const close = p.text.indexOf("}");
        if (close >= 0) {
          tag += p.text.slice(0, close);
          return tag || null;
        }
        tag += p.text;
      }
    } else if (tag !== null) tag += `\${${p.v}}`;
  }
  return null;
}
var escapeValue = (s) => s.replace(/[%{}]/g, (c) => ({ "%": "%25", "{": "%7B", "}": "%7D" })[c]);
function renderKey(template, identity) {
  let out = "";
  for (const p of template.parts) {
    if (p.text !== void 0) out += p.text;
    else {
      const value = identity[p.v];
      out += escapeValue(value ? String(value) : ANONYMOUS);
    }
  }
  return out;
}
function parseNet(text) {
  if (typeof text !== "string") return null;
  const [addr, prefix, extra] = text.split("/");
  if (extra !== void 0) return null;
  const family = import_node_net.default.isIP(addr);
  if (!family) return null;
  const bits = family === 4 ? 32 : 128;
  const p = prefix === void 0 ? bits : /^[0-9]+$/.test(prefix) ? Number(prefix) : NaN;
  if (!(p >= 0 && p <= bits)) return null;
  return { value: ipValue(addr), bits, prefix: p };
}
function ipValue(addr) {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(addr);
  if (mapped) addr = mapped[1];
  if (import_node_net.default.isIPv4(addr)) return addr.split(".").reduce((a, o) => a << 8n | BigInt(Number(o)), 0n);
  const [head, tail = ""] = addr.split("::");
  const h = head ? head.split(":") : [];
  const t = tail ? tail.split(":") : [];
  const groups = addr.includes("::") ? [...h, ...Array(8 - h.length - t.length).fill("0"), ...t] : h;
  return groups.reduce((a, g) => a << 16n | BigInt(parseInt(g || "0", 16)), 0n) | 1n << 200n;
}
function netContains(n, addr) {
  if (!import_node_net.default.isIP(addr)) return false;
  const v = ipValue(addr);
  const isV6 = v >= 1n << 200n;
  if (isV6 !== (n.bits === 128)) return false;
  const host = BigInt(n.bits - n.prefix);
  return v >> host === n.value >> host;
}
var RULE_FIELDS = [
  "key",
  "algo",
  "limit",
  "period",
  "burst",
  "cost",
  "public",
  "shadow",
  "settle",
  "durable",
  "grant",
  "concurrency",
  "lease"
];
function parseRule(path, name, raw) {
  object(path, raw, RULE_FIELDS);
  const at = (f) => `${path}.${f}`;
  if (raw.key === void 0) throw invalid(at("key"), "a rule needs a key");
  const key2 = parseTemplate(at("key"), raw.key);
  const common = {
    name,
    key: key2,
    public: bool(at("public"), raw.public, true),
    shadow: bool(at("shadow"), raw.shadow, false),
    durable: bool(at("durable"), raw.durable, false)
  };
  if (raw.concurrency !== void 0) {
    for (const f of ["algo", "limit", "period", "burst", "cost", "settle", "grant"]) {
      if (raw[f] !== void 0) throw invalid(at(f), "a semaphore rule (concurrency) takes no rate field or grant");
    }
    const concurrency = count(at("concurrency"), raw.concurrency, MAX_SEMAPHORE);
    if (raw.lease === void 0) throw invalid(at("lease"), "a semaphore rule needs a lease");
    return { ...common, semaphore: true, concurrency, leaseMs: duration(at("lease"), raw.lease) };
  }
  if (raw.lease !== void 0) throw invalid(at("lease"), "lease belongs to a semaphore rule (concurrency)");
  const algo = raw.algo === void 0 ? "gcra" : raw.algo;
  if (!ALGOS.includes(algo)) throw invalid(at("algo"), `must be one of gcra, bucket, window, sliding, log (got '${algo}')`);
  if (raw.limit === void 0) throw invalid(at("limit"), "a rate rule needs a limit");
  const limit = count(at("limit"), raw.limit, algo === "log" ? MAX_LOG_LIMIT : MAX_COUNT);
  if (raw.period === void 0) throw invalid(at("period"), "a rate rule needs a period");
  const periodMs = duration(at("period"), raw.period);
  const rateFamily = algo === "gcra" || algo === "bucket";
  if (raw.burst !== void 0 && !rateFamily) throw invalid(at("burst"), `BURST is not allowed with ALGO ${algo}`);
  const capacity = raw.burst === void 0 ? limit : count(at("burst"), raw.burst);
  if (BigInt(capacity) * BigInt(periodMs) > BigInt(MAX_PERIOD_MS) * BigInt(limit)) {
    throw invalid(at("burst"), "capacity / limit * period (the time to refill the capacity) must be at most 3650d");
  }
  const cost = raw.cost === void 0 ? 1 : count(at("cost"), raw.cost);
  if (cost > capacity) {
    throw invalid(at("cost"), `COST ${cost} exceeds the capacity ${capacity}: such a request could never be admitted`);
  }
  const settle2 = bool(at("settle"), raw.settle, false);
  if (settle2 && !rateFamily) throw invalid(at("settle"), "settling needs algo gcra or bucket");
  let grant2 = null;
  if (raw.grant !== void 0) {
    object(at("grant"), raw.grant, ["want", "ttl"]);
    if (raw.grant.want === void 0) throw invalid(at("grant.want"), "a grant needs want");
    grant2 = {
      want: count(at("grant.want"), raw.grant.want),
      ttlMs: raw.grant.ttl === void 0 ? 1e3 : duration(at("grant.ttl"), raw.grant.ttl, DAY_MS, "1d")
    };
  }
  return { ...common, semaphore: false, algo, limit, periodMs, burst: raw.burst, capacity, cost, settle: settle2, grant: grant2 };
}
var inMulti = (rule) => !rule.semaphore && !rule.grant && !rule.shadow;
function parseRoute(path, raw, rules) {
  object(path, raw, ["method", "path", "rules", "on_store_error"]);
  const method = str(`${path}.method`, raw.method);
  if (!/^[A-Za-z]+$/.test(method)) throw invalid(`${path}.method`, "must be an HTTP method such as GET");
  const p = str(`${path}.path`, raw.path);
  if (!p.startsWith("/")) throw invalid(`${path}.path`, "must start with '/'");
  if (!Array.isArray(raw.rules)) throw invalid(`${path}.rules`, "must be a list of rule names");
  if (raw.rules.length === 0) throw invalid(`${path}.rules`, "a route needs at least one rule");
  const specs = [];
  raw.rules.forEach((name, i) => {
    const spec = typeof name === "string" && Object.hasOwn(rules, name) ? rules[name] : null;
    if (!spec) throw invalid(`${path}.rules[${i}]`, `unknown rule '${name}'`);
    if (specs.includes(spec)) throw invalid(`${path}.rules[${i}]`, `rule '${name}' given twice`);
    specs.push(spec);
  });
  const multi2 = specs.filter(inMulti);
  for (const other of multi2.slice(1)) {
    const first = multi2[0];
    if (first.key.tag === null || first.key.tag !== other.key.tag) {
      throw invalid(`${path}.rules`, `rules '${first.name}' and '${other.name}' go in one RL.MULTI, so their keys must share a hash tag (a '{...}' part written the same in both)`);
    }
    if (first.key.source === other.key.source) throw invalid(`${path}.rules`, `rules '${first.name}' and '${other.name}' have the same key`);
  }
  const onStoreError = parseOnStoreError(`${path}.on_store_error`, raw.on_store_error, specs[0]);
  const m = method.toUpperCase();
  return { method: m, path: p, name: `${m} ${p}`, rules: specs, onStoreError };
}
function parseOnStoreError(path, raw, firstRule) {
  if (raw === void 0) return { mode: "deny" };
  object(path, raw, ["mode", "limit", "period", "burst"]);
  const mode = raw.mode;
  if (mode === "deny" || mode === "allow") {
    for (const f of ["limit", "period", "burst"]) {
      if (raw[f] !== void 0) throw invalid(`${path}.${f}`, "only a fallback takes a limit, period or burst");
    }
    return { mode };
  }
  if (mode !== "fallback") throw invalid(`${path}.mode`, `must be deny, fallback or allow (got '${mode}')`);
  if (raw.limit === void 0) throw invalid(`${path}.limit`, "a fallback needs a limit");
  const limit = count(`${path}.limit`, raw.limit);
  if (raw.period === void 0) throw invalid(`${path}.period`, "a fallback needs a period");
  const periodMs = duration(`${path}.period`, raw.period);
  const capacity = raw.burst === void 0 ? limit : count(`${path}.burst`, raw.burst);
  if (BigInt(capacity) * BigInt(periodMs) > BigInt(MAX_PERIOD_MS) * BigInt(limit)) {
    throw invalid(`${path}.burst`, "capacity / limit * period (the time to refill the capacity) must be at most 3650d");
  }
  if (!firstRule.semaphore && firstRule.cost > capacity) {
    throw invalid(`${path}.burst`, `the route's first rule costs ${firstRule.cost}, more than the fallback's capacity ${capacity}`);
  }
  return { mode, limit, periodMs, capacity };
}
function parsePolicy(text) {
  let doc;
  try {
    doc = typeof text === "string" ? JSON.parse(text) : text;
  } catch (err) {
    throw invalid("", `not JSON: ${err.message}`);
  }
  object("", doc, ["version", "identity", "rules", "routes", "negative_cache", "store", "retry_after_jitter"]);
  if (doc.version === void 0) throw invalid("version", "required");
  if (!Number.isSafeInteger(doc.version) || doc.version < 0) throw invalid("version", "must be an unsigned integer");
  const id = object("identity", doc.identity ?? {}, ["user", "tenant", "trusted_proxies"]);
  const identity = {
    user: id.user === void 0 ? null : str("identity.user", id.user).toLowerCase(),
    tenant: id.tenant === void 0 ? null : str("identity.tenant", id.tenant).toLowerCase(),
    trustedProxies: (() => {
      const list = id.trusted_proxies ?? [];
      if (!Array.isArray(list)) throw invalid("identity.trusted_proxies", "must be a list");
      return list.map((p, i) => parseNet(p) ?? (() => {
        throw invalid(`identity.trusted_proxies[${i}]`, `'${p}' is not an IP address or CIDR block`);
      })());
    })()
  };
  if (doc.rules === void 0) throw invalid("rules", "required");
  object("rules", doc.rules, Object.keys(doc.rules));
  const rules = {};
  for (const [name, raw] of Object.entries(doc.rules)) rules[name] = parseRule(`rules.${name}`, name, raw);
  if (doc.routes === void 0) throw invalid("routes", "required");
  if (!Array.isArray(doc.routes)) throw invalid("routes", "must be a list");
  const routes = [];
  const seen = /* @__PURE__ */ new Map();
  doc.routes.forEach((raw, i) => {
    const route = parseRoute(`routes[${i}]`, raw, rules);
    if (seen.has(route.name)) throw invalid(`routes[${i}]`, `duplicate route ${route.name} (also routes[${seen.get(route.name)}])`);
    seen.set(route.name, i);
    routes.push(route);
  });
  const nc = object("negative_cache", doc.negative_cache ?? {}, ["max", "entries"]);
  const negativeCache = {
    maxMs: nc.max === void 0 ? 250 : duration("negative_cache.max", nc.max),
    entries: nc.entries === void 0 ? 1e5 : (() => {
      if (nc.entries === 0) throw invalid("negative_cache.entries", "must be at least 1");
      return count("negative_cache.entries", nc.entries);
    })()
  };
  const st = object("store", doc.store ?? {}, ["timeout", "breaker", "ramp"]);
  const br = object("store.breaker", st.breaker ?? {}, ["failures", "open"]);
  const store = {
    timeoutMs: st.timeout === void 0 ? 50 : duration("store.timeout", st.timeout),
    failures: br.failures === void 0 ? 5 : (() => {
      if (br.failures === 0) throw invalid("store.breaker.failures", "must be at least 1");
      return count("store.breaker.failures", br.failures);
    })(),
    openMs: br.open === void 0 ? 1e3 : duration("store.breaker.open", br.open),
    rampMs: st.ramp === void 0 ? 1e4 : duration("store.ramp", st.ramp)
  };
  const jitter = doc.retry_after_jitter ?? 0;
  if (typeof jitter !== "number" || !(jitter >= 0 && jitter <= 1)) {
    throw invalid("retry_after_jitter", `must be in [0, 1] (got ${JSON.stringify(jitter)})`);
  }
  const byRoute = new Map(routes.map((r) => [r.name, r]));
  return {
    version: doc.version,
    identity,
    rules,
    routes,
    negativeCache,
    store,
    retryAfterJitter: jitter,
    route: (method, path) => byRoute.get(`${String(method).toUpperCase()} ${path}`)
  };
}
var PolicyStore = class _PolicyStore {
  static fromFile(file) {
    return new _PolicyStore(readPolicy(file), file);
  }
  constructor(policy, file = null) {
    this.current = typeof policy === "string" || !policy.route ? parsePolicy(policy) : policy;
    this.file = file;
    this.listeners = [];
  }
  // Re-reads the file: a version not higher than the one in force is refused, and on any error
  // the snapshot in force stays.
  reload() {
    const next = readPolicy(this.file);
    if (next.version <= this.current.version) {
      throw new PolicyError(`policy version ${next.version} is not higher than the version in force, ${this.current.version}`);
    }
    this.current = next;
    for (const l of this.listeners) l(next);
    return next;
  }
  onChange(listener) {
    this.listeners.push(listener);
  }
};
function readPolicy(file) {
  let text;
  try {
    text = (0, import_node_fs2.readFileSync)(file, "utf8");
  } catch (err) {
    throw new PolicyError(`cannot read policy ${file}: ${err.message}`);
  }
  return parsePolicy(text);
}

// src/gateway/problem.js
var PROBLEM_TYPE = "application/problem+json";
function tooManyRequests(violated, retryAfter) {
  return {
    type: "https://iana.org/assignments/http-problem-types#quota-exceeded",
    title: "Too Many Requests",
    status: 429,
    detail: `Rate limit exceeded; retry in ${retryAfter} s.`,
    "violated-policies": violated
  };
}
function unavailable2(retryAfter) {
  return {
    type: "about:blank",
    title: "Service Unavailable",
    status: 503,
    detail: `The rate limiter is unavailable; retry in ${retryAfter} s.`
  };
}

// src/gateway/gateway.js
var RELEASE_DEADLINE_MS = 1e3;
var hex = (bytes) => (0, import_node_crypto4.randomBytes)(bytes).toString("hex");
var rateSpec = (rule) => ({ name: rule.name, limit: rule.limit, periodMs: rule.periodMs, capacity: rule.capacity });
var semaphoreSpec = (rule) => ({ name: rule.name, limit: rule.concurrency, capacity: rule.concurrency, semaphore: true });
var Gateway = class {
  // Options: `store` (a client, adapter or RL), `policy` (a PolicyStore, a policy document as
  // text or object), `durableStore` (connections of their own for WAIT), `legacyHeaders`,
  // `logSample` (0 to 1, default 0.01), `logger`, `hook(event)`, `identify(request)` (async,
  // `{ user, tenant }`), `random`, `now`.
  constructor(options) {
    this.random = options.random ?? Math.random;
    this.now = options.now ?? Date.now;
    this.logger = options.logger ?? console;
    this.logSample = options.logSample ?? 0.01;
    this.legacy = Boolean(options.legacyHeaders);
    this.identify = options.identify;
    this.metrics = new Metrics(options.hook);
    const onMode = (mode) => this.metrics.mode(mode);
    this.rl = options.store instanceof RL ? options.store : new RL(options.store, { logger: this.logger, onMode });
    if (options.store instanceof RL) {
      const previous = this.rl.onMode;
      this.rl.onMode = (m) => {
        previous?.(m);
        onMode(m);
      };
      if (this.rl.mode) onMode(this.rl.mode);
    }
    const durable = options.durableStore;
    this.durable = !durable ? this.rl : durable instanceof RL ? durable : new RL(durable, { logger: this.logger });
    this.policies = options.policy instanceof PolicyStore ? options.policy : new PolicyStore(options.policy);
    const p = this.policies.current;
    this.cache = new NegativeCache(p.negativeCache.entries, this.now);
    this.fallback = new Fallback(p.negativeCache.entries, () => this.now() * 1e3);
    this.chunks = new Lru(p.negativeCache.entries);
    this.breaker = new Breaker(p.store, { now: this.now, random: this.random, onState: (s) => this.metrics.breakerState(s) });
    this.metrics.policy(p);
    this.policies.onChange((next) => this.applied(next));
  }
  get policy() {
    return this.policies.current;
  }
  // Re-reads the policy file; throws a PolicyError (and keeps the snapshot in force) when refused.
  reload() {
    return this.policies.reload();
  }
  applied(policy) {
    this.cache.resize(policy.negativeCache.entries);
    this.fallback.lru.max = policy.negativeCache.entries;
    this.chunks.max = policy.negativeCache.entries;
    this.breaker.configure(policy.store);
    this.metrics.policy(policy);
  }
  // ---- Identity ----
  clientIp(policy, peer, headers) {
    const trusted = (addr) => policy.identity.trustedProxies.some((n) => netContains(n, addr));
    let ip = peer ?? "";
    if (!trusted(ip)) return ip;
    const hops = String(headers["x-forwarded-for"] ?? "").split(",").map((h) => h.trim()).filter(Boolean);
    for (let i = hops.length - 1; i >= 0; i--) {
      if (!import_node_net2.default.isIP(hops[i])) break;
      ip = hops[i];
      if (!trusted(ip)) break;
    }
    return ip;
  }
  async identityOf(policy, route, req) {
    const header = (name) => {
      if (!name) return null;
      const v = req.headers[name];
      const s = Array.isArray(v) ? v[0] : v;
      return s ? String(s) : null;
    };
    const resolved = this.identify ? await this.identify(req) ?? {} : {};
    return {
      user: resolved.user || header(policy.identity.user),
      tenant: resolved.tenant || header(policy.identity.tenant),
      ip: this.clientIp(policy, req.peer, req.headers),
      route: route.name
    };
  }
  // ---- Logs and counts ----
  record(ctx, rule, outcome) {
    this.metrics.decision(ctx.route.name, rule.name, outcome);
    const entry = { route: ctx.route.name, rule: rule.name, policy_version: ctx.policy.version, outcome };
    if (outcome === "open_admit") this.logger.warn?.("redis-rl decision", entry);
    else if (outcome === "shadow_refuse" || ctx.logged) this.logger.info?.("redis-rl decision", entry);
  }
  // ---- One request ----
  // `req`: { method, path, headers (lower-case names), peer }. Resolves null when no route
  // matches, else { status, headers, body?, finish?, done? }: `finish({ actualCost })` once the
  // backend answered (settlement), `done()` when the response ended or was dropped (releases).
  async decide(req) {
    const policy = this.policies.current;
    const route = policy.route(req.method, req.path);
    if (!route) return null;
    const identity = await this.identityOf(policy, route, req);
    const ctx = {
      policy,
      route,
      identity,
      req,
      logged: this.random() < this.logSample,
      showPrivate: Boolean(identity.user),
      rules: route.rules.map((rule) => {
        const key2 = renderKey(rule.key, identity);
        return { rule, key: rule.shadow ? `shadow:${key2}` : key2 };
      })
    };
    const cached = [];
    for (const r of ctx.rules) {
      if (r.rule.shadow || r.rule.semaphore) continue;
      const wait = this.cache.check(r.rule.name, r.key, r.rule.cost);
      if (wait > 0) cached.push([r, wait]);
    }
    if (cached.length) {
      for (const [r] of cached) this.record(ctx, r.rule, "refuse_cached");
      return this.refusal(
        ctx,
        cached.map(([r, wait]) => [r, rateSpec(r.rule), refusedOutcome(wait)]),
        cached.map(([r]) => r.rule.name),
        Math.max(...cached.map(([, w]) => w))
      );
    }
    const ticket = this.breaker.admit(route.onStoreError.mode);
    if (!ticket) return this.posture(ctx);
    const rl = route.rules.some((r) => r.durable) ? this.durable : this.rl;
    const state = { rl, holders: [], reservations: [], taken: [], answered: [], cancelled: false, calls: 0 };
    const started = import_node_perf_hooks.performance.now();
    let outcome;
    try {
      outcome = await withDeadline(this.storeCalls(ctx, state), policy.store.timeoutMs, state);
    } catch (err) {
      state.cancelled = true;
      const seconds = (import_node_perf_hooks.performance.now() - started) / 1e3;
      this.releaseAll(state);
      this.giveBack(state);
      if (err instanceof RLError && err.isUnavailable) {
        this.metrics.storeCall(err.timeout ? "timeout" : "error", seconds);
        this.breaker.report(ticket, false);
        return this.posture(ctx);
      }
      this.metrics.storeCall("ok", seconds);
      this.breaker.report(ticket, true);
      this.logger.error?.("redis-rl: the store refused the call", { route: route.name, error: String(err?.message ?? err) });
      return {
        status: 500,
        headers: [["Content-Type", PROBLEM_TYPE]],
        body: { type: "about:blank", title: "Internal Server Error", status: 500, detail: "The rate limiter refused the call." }
      };
    }
    if (state.calls === 0) this.breaker.unused(ticket);
    else {
      this.metrics.storeCall("ok", (import_node_perf_hooks.performance.now() - started) / 1e3);
      this.breaker.report(ticket, true);
    }
    if (!outcome.allowed) {
      this.releaseAll(state);
      this.giveBack(state);
      await this.refundAll(state);
      return this.refusal(ctx, state.answered, outcome.refusing.map((r) => r.rule.name), outcome.retryMs);
    }
    for (const r of ctx.rules) if (!r.rule.shadow) this.record(ctx, r.rule, "admit");
    await this.waitDurable(ctx, state);
    return this.admission(ctx, state);
  }
  // The store calls in order: grants from their chunks, semaphores, settle rules, one RL.MULTI,
  // then shadow rules apart. A refusal stops the sequence.
  async storeCalls(ctx, state) {
    const live2 = () => {
      if (state.cancelled) throw new RLError("unavailable", "the request missed its deadline");
    };
    const record = (rule, outcome) => {
      if (!state.cancelled) this.record(ctx, rule, outcome);
    };
    const refuse = (r, retryMs, spec, outcome) => {
      state.answered.push([r, spec, outcome]);
      record(r.rule, "refuse");
      return { allowed: false, refusing: [r], retryMs };
    };
    for (const r of ctx.rules) {
      if (r.rule.semaphore || !r.rule.grant || r.rule.shadow) continue;
      const got = await this.takeGrant(r, state, live2);
      if (got !== true) {
        if (got.retry_after_ms > 0) this.cache.refused(r.rule.name, r.key, r.rule.cost, got.retry_after_ms, ctx.policy.negativeCache.maxMs);
        return refuse(r, got.retry_after_ms, rateSpec(r.rule), refusedOutcome(got.retry_after_ms));
      }
    }
    for (const r of ctx.rules) {
      if (!r.rule.semaphore) continue;
      live2();
      const holder = hex(8);
      state.holders.push({ r, holder });
      state.calls += 1;
      const lease = await state.rl.acquire({ key: r.key, capacity: r.rule.concurrency, lease: r.rule.leaseMs, holder }, { cancel: state });
      const outcome = {
        remaining: Math.max(0, r.rule.concurrency - lease.in_flight),
        resetAfterMs: 0,
        retryAfterMs: lease.acquired ? null : lease.retry_after_ms
      };
      if (r.rule.shadow) {
        if (!lease.acquired) {
          state.holders.pop();
          record(r.rule, "shadow_refuse");
        }
        continue;
      }
      if (!lease.acquired) {
        state.holders.pop();
        return refuse(r, lease.retry_after_ms, semaphoreSpec(r.rule), outcome);
      }
      state.answered.push([r, semaphoreSpec(r.rule), outcome]);
    }
    const reservationId = headerValue(ctx.req.headers["idempotency-key"]) || hex(16);
    for (const r of ctx.rules) {
      if (!inMulti(r.rule) || !r.rule.settle) continue;
      live2();
      state.calls += 1;
      const d = await state.rl.admit({ ...this.rateRequest(r), reserve: { id: reservationId } }, { cancel: state });
      if (!d.allowed) {
        this.cache.refused(r.rule.name, r.key, r.rule.cost, d.retry_after_ms, ctx.policy.negativeCache.maxMs);
        return refuse(r, d.retry_after_ms, rateSpec(r.rule), outcomeOf(d));
      }
      state.reservations.push({ r, id: reservationId });
      state.answered.push([r, rateSpec(r.rule), outcomeOf(d)]);
    }
    const multi2 = ctx.rules.filter((r) => inMulti(r.rule) && !r.rule.settle);
    if (multi2.length) {
      live2();
      state.calls += 1;
      const d = await state.rl.multi({ rules: multi2.map((r) => ({ name: r.rule.name, ...this.rateRequest(r) })) }, { cancel: state });
      const at = state.answered.length;
      multi2.forEach((r, i) => {
        const refusing = d.denied_by === r.rule.name;
        state.answered.push([r, rateSpec(r.rule), {
          remaining: d.rules[i].remaining,
          resetAfterMs: d.rules[i].reset_after_ms,
          retryAfterMs: refusing ? d.retry_after_ms : null
        }]);
      });
      if (!d.allowed) {
        const r = multi2.find((x) => x.rule.name === d.denied_by) ?? multi2[0];
        record(r.rule, "refuse");
        this.cache.refused(r.rule.name, r.key, r.rule.cost, d.retry_after_ms, ctx.policy.negativeCache.maxMs);
        state.answered = state.answered.slice(0, at + multi2.length);
        return { allowed: false, refusing: [r], retryMs: d.retry_after_ms };
      }
    }
    for (const r of ctx.rules) {
      if (r.rule.semaphore || !r.rule.shadow) continue;
      live2();
      state.calls += 1;
      const d = await state.rl.admit(this.rateRequest(r), { cancel: state });
      if (!d.allowed) record(r.rule, "shadow_refuse");
    }
    return { allowed: true };
  }
  rateRequest(r) {
    const rule = r.rule;
    return {
      key: r.key,
      limit: rule.limit,
      period: rule.periodMs,
      burst: rule.burst,
      cost: rule.cost === 1 ? void 0 : rule.cost,
      algo: rule.algo === "gcra" ? void 0 : rule.algo
    };
  }
  // Takes the rule's cost from its chunk, refilling it (one refill in flight per key): true, or
  // the RL.GRANT reply that granted less than the cost.
  async takeGrant(r, state, live2) {
    const id = `${r.rule.name}\0${r.key}`;
    const cost = r.rule.cost;
    for (; ; ) {
      let chunk = this.chunks.get(id);
      if (chunk?.refill) {
        await chunk.refill;
        continue;
      }
      if (chunk && chunk.expires > this.now() && chunk.tokens >= cost) {
        chunk.tokens -= cost;
        state.taken.push({ chunk, cost });
        return true;
      }
      live2();
      state.calls += 1;
      chunk = { tokens: 0, expires: 0, refill: null };
      this.chunks.set(id, chunk);
      const want = Math.max(r.rule.grant.want, cost);
      let reply;
      chunk.refill = (async () => {
        try {
          this.metrics.grantRefill(r.rule.name);
          reply = await this.rl.grant({
            key: r.key,
            limit: r.rule.limit,
            period: r.rule.periodMs,
            burst: r.rule.burst,
            algo: r.rule.algo === "gcra" ? void 0 : r.rule.algo,
            want,
            ttl: r.rule.grant.ttlMs
          });
          chunk.tokens = reply.granted;
          chunk.expires = this.now() + reply.valid_ms;
        } finally {
          chunk.refill = null;
        }
      })();
      try {
        await chunk.refill;
      } catch (err) {
        this.chunks.delete(id);
        throw err;
      }
      if (reply.granted < cost) return reply;
      chunk.tokens -= cost;
      state.taken.push({ chunk, cost });
      return true;
    }
  }
  // Tokens go back to the chunk they came from only, not to a refilled one.
  giveBack(state) {
    for (const t of state.taken) t.chunk.tokens += t.cost;
    state.taken = [];
  }
  releaseAll(state) {
    const holders = state.holders;
    state.holders = [];
    for (const { r, holder } of holders) {
      state.rl.execute(release(r.key, holder), { timeout: RELEASE_DEADLINE_MS }).catch(() => {
      });
    }
  }
  async refundAll(state) {
    const reservations = state.reservations;
    state.reservations = [];
    await Promise.all(reservations.map(({ r, id }) => state.rl.settle(r.key, id, 0).catch(() => {
    })));
  }
  // WAIT 1 once per cluster slot of the durable rules that wrote, on the durable connections.
  async waitDurable(ctx, state) {
    const bySlot = /* @__PURE__ */ new Map();
    for (const r of ctx.rules) {
      if (!r.rule.durable || r.rule.grant && !r.rule.semaphore) continue;
      const slot = keySlot(r.key);
      if (!bySlot.has(slot)) bySlot.set(slot, []);
      bySlot.get(slot).push(r);
    }
    const timeout = ctx.policy.store.timeoutMs;
    await Promise.all([...bySlot.values()].map(async (rules) => {
      let acked = 0;
      try {
        acked = await withDeadline(state.rl.adapter.send("WAIT", ["1", String(timeout)], rules[0].key), 2 * timeout);
      } catch {
        acked = 0;
      }
      if (!(Number(acked) >= 1)) for (const r of rules) this.record(ctx, r.rule, "unreplicated_admit");
    }));
  }
  // ---- Answers ----
  visible(ctx, r) {
    return !r.rule.shadow && (r.rule.public || ctx.showPrivate);
  }
  // Calls run semaphores first, then settle rules, then RL.MULTI; headers follow route order.
  fields(ctx, answered) {
    const pairs = answered.filter(([r]) => this.visible(ctx, r)).sort(([a], [b]) => ctx.rules.indexOf(a) - ctx.rules.indexOf(b)).map(([, spec, outcome]) => [spec, outcome]);
    return render(pairs, this.legacy);
  }
  refusal(ctx, answered, violated, retryMs) {
    const seconds = Math.max(1, retryAfterSeconds(retryMs, ctx.policy.retryAfterJitter, this.random()));
    const order = ctx.route.rules.map((r) => r.name);
    violated = [...new Set(violated)].sort((a, b) => order.indexOf(a) - order.indexOf(b));
    return {
      status: 429,
      headers: [...this.fields(ctx, answered), ["Retry-After", String(seconds)], ["Content-Type", PROBLEM_TYPE]],
      body: tooManyRequests(violated, seconds)
    };
  }
  posture(ctx) {
    const route = ctx.route;
    const mode = route.onStoreError;
    if (mode.mode === "deny") {
      for (const r of ctx.rules) if (!r.rule.shadow) this.record(ctx, r.rule, "unavailable_deny");
      const seconds = Math.max(1, retryAfterSeconds(ctx.policy.store.openMs, ctx.policy.retryAfterJitter, this.random()));
      return {
        status: 503,
        headers: [["Retry-After", String(seconds)], ["Content-Type", PROBLEM_TYPE]],
        body: unavailable2(seconds)
      };
    }
    if (mode.mode === "allow") {
      for (const r of ctx.rules) if (!r.rule.shadow) this.record(ctx, r.rule, "open_admit");
      return { status: 200, headers: [] };
    }
    const first = ctx.rules[0];
    const cost = first.rule.semaphore ? 1 : first.rule.cost;
    const d = this.fallback.decide(route.name, first.key, mode, cost);
    const spec = { name: first.rule.name, limit: mode.limit, periodMs: mode.periodMs, capacity: mode.capacity };
    const answered = [[first, spec, outcomeOf(d)]];
    if (!d.allowed) {
      this.record(ctx, first.rule, "fallback_refuse");
      return this.refusal(ctx, answered, [first.rule.name], d.retry_after_ms);
    }
    this.record(ctx, first.rule, "fallback_admit");
    return { status: 200, headers: this.fields(ctx, answered) };
  }
  admission(ctx, state) {
    const leases = state.holders;
    const reservations = state.reservations;
    let renewTimer = null;
    if (leases.length) {
      const every = Math.min(...leases.map(({ r }) => r.rule.leaseMs)) / 3;
      renewTimer = setInterval(() => {
        for (const { r, holder } of leases) state.rl.renew(r.key, holder, r.rule.leaseMs).catch(() => {
        });
      }, every);
      renewTimer.unref?.();
    }
    const decision = { status: 200, headers: this.fields(ctx, state.answered) };
    if (reservations.length) {
      let finished = false;
      decision.finish = async ({ actualCost } = {}) => {
        if (finished) return;
        finished = true;
        const actual = parseActual(actualCost);
        if (actual === null) return;
        await Promise.all(reservations.map(({ r, id }) => state.rl.settle(r.key, id, actual).catch(() => {
        })));
      };
    }
    if (leases.length) {
      let ended = false;
      decision.done = () => {
        if (ended) return;
        ended = true;
        clearInterval(renewTimer);
        this.releaseAll({ rl: state.rl, holders: leases });
      };
    }
    return decision;
  }
};
function headerValue(v) {
  const s = Array.isArray(v) ? v[0] : v;
  return s ? String(s) : null;
}
function parseActual(v) {
  const s = headerValue(v);
  if (s === null || !/^[0-9]+$/.test(s.trim())) return null;
  const n = Number(s.trim());
  return Number.isSafeInteger(n) ? n : null;
}

// src/gateway/express.js
function put(res, name, value) {
  if (name.startsWith("RateLimit") && res.appendHeader) res.appendHeader(name, value);
  else res.setHeader(name, value);
}
function send(res, decision) {
  res.statusCode = decision.status;
  for (const [k, v] of decision.headers) put(res, k, v);
  res.end(JSON.stringify(decision.body));
}
function settleBeforeSending(res, decision) {
  const write = res.write.bind(res);
  const end = res.end.bind(res);
  let settled = null;
  const settle2 = () => {
    settled ??= decision.finish({ actualCost: res.getHeader("x-actual-cost") });
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
        peer: req.socket?.remoteAddress
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
      send(res, decision);
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
var DECISION = /* @__PURE__ */ Symbol("redis-rl decision");
function fastifyPlugin(gateway) {
  const plugin = async function redisRl(fastify) {
    fastify.addHook("onRequest", async (request, reply) => {
      const decision = await gateway.decide({
        method: request.method,
        path: request.url.split("?")[0],
        headers: request.headers,
        peer: request.socket?.remoteAddress
      });
      if (!decision) return;
      if (decision.status !== 200) {
        for (const [k, v] of decision.headers) reply.header(k, v);
        reply.code(decision.status).type(PROBLEM_TYPE).send(JSON.stringify(decision.body));
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
      await request[DECISION]?.finish?.({ actualCost: reply.getHeader("x-actual-cost") });
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
    sleep = (ms) => new Promise((r) => setTimeout(r, ms))
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
    await sleep(wait);
  }
  if (last.error) throw last.error;
  return last.response;
}
// Annotate the CommonJS export names for ESM import in node:
0 && (module.exports = {
  ALGOS,
  Gateway,
  PolicyError,
  PolicyStore,
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
