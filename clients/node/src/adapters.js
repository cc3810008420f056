// One interface over the Redis clients people use: `send(name, args, firstKey)` resolves with the
// raw reply or rejects with an RLError of the right kind. `firstKey` routes the call in a
// cluster: cluster clients route unknown commands by argument 1, which for RL.MULTI (and
// EVALSHA) is not a key.
import { fromServerError, RLError, unavailable } from './errors.js';
import { keySlot } from './wire.js';

const REPLY_ERRORS = new Set(['ReplyError', 'ErrorReply', 'SimpleError', 'BlobError']);

function isServerReply(err) {
  for (let p = Object.getPrototypeOf(err); p && p !== Error.prototype; p = Object.getPrototypeOf(p)) {
    if (REPLY_ERRORS.has(p.constructor?.name)) return true;
  }
  return false;
}

// A rejection into its kind: a server's error reply keeps its text, code first; anything else
// (closed or refused connection, timeout, offline queue disabled) means the store did not answer.
export function classify(err) {
  if (err instanceof RLError) return err;
  if (err instanceof Error && isServerReply(err)) return fromServerError(err.message, err);
  return unavailable(`the store did not answer: ${err?.message ?? String(err)}`, err);
}

function wrap(send, extra = {}) {
  return {
    ...extra,
    async send(name, args, firstKey) {
      try {
        return await send(name, args, firstKey);
      } catch (err) {
        throw classify(err);
      }
    },
  };
}

// A connection attempt's states in ioredis (and a Cluster's): the socket is being opened, or it
// is open and the handshake has not been answered yet.
const CONNECTING = new Set(['connecting', 'connect']);
const ATTEMPT_ENDS = ['ready', 'close', 'end'];
const attempts = new WeakMap();

// With the offline queue off, ioredis refuses a call at once while it connects, so a gateway's
// first requests, arriving while its connection is still being made (a store slow to answer, a
// loaded machine), would all take the posture. A call made then waits for the attempt to end
// (one shared promise per client), within the caller's own deadline; one made while the client
// waits to retry, or once it gave up, still fails at once.
function attemptEnded(client) {
  if (!CONNECTING.has(client.status)) return null;
  let ended = attempts.get(client);
  if (!ended) {
    ended = new Promise((resolve) => {
      const done = () => {
        for (const event of ATTEMPT_ENDS) client.off(event, done);
        attempts.delete(client);
        resolve();
      };
      for (const event of ATTEMPT_ENDS) client.once(event, done);
    });
    attempts.set(client, ended);
  }
  return ended;
}

// ioredis and iovalkey (its fork), a single server or a Cluster. Their offline queue must be off
// (`enableOfflineQueue: false`): with it, a call to a dead server waits for the reconnect instead
// of failing, then is replayed and counted twice.
export function fromIoredis(client, { Command } = {}) {
  if (!client.isCluster) {
    return wrap(async (name, args) => {
      const connecting = attemptEnded(client);
      if (connecting) await connecting;
      return client.call(name, ...args);
    });
  }
  const commandClass = Command ? Promise.resolve(Command) : findCommandClass(client);
  return wrap(async (name, args, firstKey) => {
    const connecting = attemptEnded(client);
    if (connecting) await connecting;
    // A Command carrying its slot goes straight to the slot's primary; without the class (or a
    // key) the call goes to any node and follows its MOVED reply.
    const Cmd = await commandClass;
    if (!Cmd || firstKey === undefined) return client.call(name, ...args);
    const cmd = new Cmd(name, args, { replyEncoding: 'utf8' });
    cmd.slot = keySlot(firstKey);
    return client.sendCommand(cmd);
  });
}

// The Command class of the library the cluster client comes from (ioredis or iovalkey, its
// fork), looked up beside this package.
async function findCommandClass(client) {
  for (const name of ['ioredis', 'iovalkey']) {
    try {
      const mod = await import(name);
      const Cluster = mod.Cluster ?? mod.default?.Cluster;
      const Command = mod.Command ?? mod.default?.Command;
      if (Cluster && Command && client instanceof Cluster) return Command;
    } catch {
      // Not installed beside this package: try the next one.
    }
  }
  return null;
}

export const fromIovalkey = fromIoredis;

// node-redis (`redis` / `@redis/client`), a client or a cluster (`createCluster`). Set
// `disableOfflineQueue: true` for the same reason as ioredis's offline queue.
export function fromNodeRedis(client) {
  if (typeof client.getSlotMaster === 'function') {
    return wrap(async (name, args, firstKey) => {
      // node-redis fans WAIT out to every shard (its command policy); a durable admission waits
      // on the connection of its own slot's primary only.
      if (name === 'WAIT' && firstKey !== undefined) {
        const node = await client.nodeClient(client.getSlotMaster(keySlot(firstKey)));
        return node.sendCommand([name, ...args]);
      }
      return client.sendCommand(firstKey, false, [name, ...args]);
    });
  }
  return wrap((name, args) => client.sendCommand([name, ...args]));
}

// Any `sendCommand(...args)` function, as rate-limit-redis takes one:
// `(...args) => client.call(...args)` for ioredis, `(...args) => client.sendCommand(args)` for
// node-redis. It cannot route by key: on a cluster use the client's own adapter.
export function fromSendCommand(sendCommand) {
  return wrap((name, args) => sendCommand(name, ...args));
}

// An adapter, a client of a known kind, or a sendCommand function.
export function adapt(store) {
  if (typeof store === 'function') return fromSendCommand(store);
  if (store && typeof store.send === 'function') return store;
  if (store && (store.isCluster !== undefined || typeof store.call === 'function')) return fromIoredis(store);
  if (store && typeof store.sendCommand === 'function') return fromNodeRedis(store);
  throw new TypeError('expected an ioredis, iovalkey or node-redis client, an adapter, or a sendCommand function');
}
