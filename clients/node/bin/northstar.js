#!/usr/bin/env node
// The example gateway of clients/CONTRACT.md section 7: the gateway in front of a stub backend,
// with /healthz, /metrics and POST /-/reload served by the gateway itself.
//
//   northstar --redis redis://127.0.0.1:6379 --listen 127.0.0.1:8080 --policy policy.json [--cluster]
//             [--region NAME --home redis://HOST:PORT [--reporter NAME]]
import os from 'node:os';
import express from 'express';
import Redis from 'ioredis';
import { expressMiddleware, Gateway, PolicyError, PolicyStore } from '../src/index.js';

const USAGE = 'usage: northstar --redis redis://127.0.0.1:6379 --listen 127.0.0.1:8080 --policy policy.json [--cluster]'
  + ' [--region NAME --home redis://HOST:PORT [--reporter NAME]]';

function parseArgs(argv) {
  const args = {
    redis: 'redis://127.0.0.1:6379', listen: '127.0.0.1:8080', policy: null, cluster: false,
    region: null, home: null, reporter: null,
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${arg} needs a value\n${USAGE}`);
      return argv[++i];
    };
    if (arg === '--redis') args.redis = value();
    else if (arg === '--listen') args.listen = value();
    else if (arg === '--policy') args.policy = value();
    else if (arg === '--cluster') args.cluster = true;
    else if (arg === '--region') args.region = value();
    else if (arg === '--home') args.home = value();
    else if (arg === '--reporter') args.reporter = value();
    else throw new Error(`unknown argument ${arg}\n${USAGE}`);
  }
  if (!args.policy) throw new Error(`--policy is required\n${USAGE}`);
  if ((args.region == null) !== (args.home == null)) throw new Error(`--region and --home go together\n${USAGE}`);
  return args;
}

// ioredis backs off to 2 s between reconnection attempts; a quarter of a second at most keeps
// decisions going back to the store within breaker.open plus a second of its return.
const reconnect = (times) => Math.min(times * 50, 250);

// How long the gateway waits for its store before listening without it: a store that is up is
// used from the first request, one that is down leaves the routes to their postures.
const START_WAIT_MS = 1000;

// A posture needs calls to fail while the store is away, not wait in a queue and replay.
function connect(url, cluster) {
  const client = cluster
    ? new Redis.Cluster([url], { enableOfflineQueue: false, clusterRetryStrategy: reconnect,
      redisOptions: { maxRetriesPerRequest: 0 } })
    : new Redis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: reconnect });
  client.on('error', () => {});
  return client;
}

// The stub backend: 200 with a small JSON body; ?ms=N waits N ms, ?units=N reports
// X-Actual-Cost: N, whatever N is; POST /login is 401 without X-Password: ok.
async function stub(req, res) {
  const ms = Number(req.query.ms);
  if (Number.isInteger(ms) && ms > 0) await new Promise((r) => setTimeout(r, ms));
  if (req.method === 'POST' && req.path === '/login' && req.get('x-password') !== 'ok') {
    res.status(401).json({ error: 'bad password' });
    return;
  }
  // Reported as given (any value a header can carry): the gateway copes with any declaration.
  const units = req.query.units;
  if (typeof units === 'string' && /^[\x20-\x7e\u0080-\u00ff]+$/.test(units)) res.setHeader('X-Actual-Cost', units);
  res.json({ ok: true, method: req.method, path: req.path });
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const policies = PolicyStore.fromFile(args.policy);
  const clients = [connect(args.redis, args.cluster), connect(args.redis, args.cluster)];
  let waited;
  await Promise.race([Promise.all(clients.map((c) => new Promise((r) => c.once('ready', r)))),
    new Promise((r) => { waited = setTimeout(r, START_WAIT_MS); })]);
  clearTimeout(waited);
  // The home store of a region's global rules (section 15), when this gateway has a region; its
  // reporter name is this host and port, stable across restarts.
  const regional = args.region == null ? {} : {
    region: args.region,
    home: connect(args.home, false),
    reporter: args.reporter ?? `${os.hostname()}:${args.listen.slice(args.listen.lastIndexOf(':') + 1)}`,
  };
  const gateway = new Gateway({ store: clients[0], durableStore: clients[1], policy: policies, ...regional });
  const app = express();
  // The gateway reads the socket's peer and walks X-Forwarded-For itself, past the policy's
  // trusted_proxies only; express's own walk (req.ip) stays off, as its default has it.
  app.set('trust proxy', false);
  app.get('/healthz', (req, res) => res.type('text/plain').send('ok\n'));
  app.get('/metrics', (req, res) => res.type('text/plain; version=0.0.4').send(gateway.metrics.render()));
  app.post('/-/reload', (req, res) => {
    try {
      res.json({ version: gateway.reload().version });
    } catch (err) {
      if (!(err instanceof PolicyError)) throw err;
      res.status(/is not higher than the version in force/.test(err.message) ? 409 : 400).json({ error: err.message });
    }
  });
  app.use(expressMiddleware(gateway));
  app.all(/.*/, stub);
  const colon = args.listen.lastIndexOf(':');
  const host = args.listen.slice(0, colon).replace(/^\[|\]$/g, '');
  const port = Number(args.listen.slice(colon + 1));
  const server = app.listen(port, host, () => {
    const a = server.address();
    console.log(`listening on ${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}`);
  });
}

main().catch((err) => {
  console.error(err.message ?? err);
  process.exit(1);
});
