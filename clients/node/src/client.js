// The typed client: every command goes through `execute`, which knows the command's keys and so
// sends it natively or, where the module is not loaded, as EVALSHA of rl.lua (clients/SPEC.md
// section 5).
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { adapt } from './adapters.js';
import * as commands from './commands.js';
import { refused, RLError } from './errors.js';

// src/ in the ESM package, dist/ in the CommonJS build, both one level down. A packed package
// carries its copy of the script (prepack); installed from the repository's directory, it
// reads the repository's own clients/scripts/rl.lua.
export const PACKAGE_ROOT = join(typeof __dirname === 'string' ? __dirname : dirname(fileURLToPath(import.meta.url)), '..');
export const SCRIPT_PATH = [join(PACKAGE_ROOT, 'rl.lua'), join(PACKAGE_ROOT, '..', 'scripts', 'rl.lua')]
  .find((p) => existsSync(p)) ?? join(PACKAGE_ROOT, 'rl.lua');

export class RL {
  // `store`: an ioredis, iovalkey or node-redis client (or cluster), an adapter, or a
  // sendCommand function. Options: `timeout` (ms, per call), `mode` ('auto', 'module' or
  // 'script'), `script` (the script's text, default the rl.lua this package ships), `logger`
  // (console-like), `onMode(mode)`.
  constructor(store, options = {}) {
    this.adapter = adapt(store);
    this.timeout = options.timeout;
    this.forcedMode = options.mode && options.mode !== 'auto' ? options.mode : null;
    this.scriptText = options.script;
    this.logger = options.logger ?? console;
    this.onMode = options.onMode;
    this.mode = this.forcedMode;
    this.detecting = null;
    this.loggedMode = null;
    if (this.mode) this.announce(this.mode);
  }

  async admit(req, options) { return this.execute(commands.admit(req), options); }
  async multi(req, options) { return this.execute(commands.multi(req), options); }
  async grant(req, options) { return this.execute(commands.grant(req), options); }
  async acquire(req, options) { return this.execute(commands.acquire(req), options); }
  async release(key, holder) { return this.execute(commands.release(key, holder)); }
  async renew(key, holder, lease) { return this.execute(commands.renew(key, holder, lease)); }
  async settle(key, id, actual, options) { return this.execute(commands.settle(key, id, actual, options)); }
  async info(key) { return this.execute(commands.info(key)); }
  async allocate(req, options) { return this.execute(commands.allocate(req), options); }
  async throttle(key, maxBurst, count, periodSeconds, quantity) {
    return this.execute(commands.throttle(key, maxBurst, count, periodSeconds, quantity));
  }

  // One command of commands.js: its raw reply parsed, under the client's deadline. `cancel` is
  // the caller's token (`{ cancelled }`, set when the caller gave up, as the gateway's deadline
  // does): once it is set, no command is sent again for this call.
  async execute(cmd, { timeout = this.timeout, cancel = { cancelled: false } } = {}) {
    return withDeadline(this.run(cmd, cancel), timeout, cancel);
  }

  async run(cmd, cancel) {
    const mode = this.mode ?? (await this.detect());
    try {
      const raw = mode === 'script' ? await this.evalsha(cmd, cancel) : await this.native(cmd, cancel);
      return cmd.parse(raw);
    } catch (err) {
      // The store went away (a reconnect, a failover): look again on the next call.
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
      if ((await this.detect()) !== 'script') throw err;
      live(cancel);
      return this.evalsha(cmd, cancel);
    }
  }

  // `COMMAND INFO RL.ADMIT` answers a nil entry when the module is absent.
  detect() {
    this.detecting ??= this.adapter
      .send('COMMAND', ['INFO', 'RL.ADMIT'])
      .then((reply) => {
        const entry = Array.isArray(reply) ? reply[0] : reply;
        const mode = entry === null || entry === undefined ? 'script' : 'module';
        this.mode = mode;
        this.announce(mode);
        return mode;
      })
      .finally(() => {
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
      if (text === undefined) {
        try {
          text = readFileSync(SCRIPT_PATH, 'utf8');
        } catch (err) {
          throw refused(`ERR script mode needs ${SCRIPT_PATH}, which cannot be read (${err.code ?? err.message}); load the module instead`);
        }
      }
      this.scriptText = text;
      this.scriptSha = createHash('sha1').update(text).digest('hex');
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
      return await this.adapter.send('EVALSHA', args, cmd.keys[0]);
    } catch (err) {
      if (!(err instanceof RLError) || !err.message.startsWith('NOSCRIPT')) throw err;
      const mode = this.forcedMode ?? (await this.detect());
      live(cancel);
      if (mode === 'module') return this.adapter.send(cmd.name, cmd.args, cmd.keys[0]);
      await this.adapter.send('SCRIPT', ['LOAD', this.scriptText], cmd.keys[0]);
      live(cancel);
      return this.adapter.send('EVALSHA', args, cmd.keys[0]);
    }
  }
}

// A call whose caller gave up sends nothing more: a late RL.ACQUIRE would hold a slot its
// caller already released, a late RL.ADMIT spend for a request answered by its posture.
function live(cancel) {
  if (cancel?.cancelled) throw new RLError('unavailable', 'the call missed its deadline');
}

export class TimeoutError extends RLError {
  constructor(ms) {
    super('unavailable', `the store did not answer within ${ms}ms`);
    this.timeout = true;
  }
}

export function withDeadline(promise, ms, cancel) {
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
