// An express app behind the gateway, with a stub backend as northstar's: 200 and a small JSON
// body (`?status=N`: N), `?ms=N` waits, `?units=N` reports X-Actual-Cost.
import express from 'express';
import { expressMiddleware, Gateway } from '../../src/index.js';
import { listen } from './http.js';

export function backend(app) {
  app.all(/.*/, async (req, res) => {
    const ms = Number(req.query.ms ?? 0);
    // A caller that goes away ends the wait too.
    if (ms > 0) await new Promise((r) => { const t = setTimeout(r, ms); res.once('close', () => { clearTimeout(t); r(); }); });
    if (res.destroyed) return;
    if (req.query.units !== undefined) res.setHeader('X-Actual-Cost', String(req.query.units));
    if (req.query.status !== undefined) res.status(Number(req.query.status));
    res.json({ ok: true, path: req.path });
  });
}

export async function serveGateway(options) {
  const gateway = options instanceof Gateway ? options : new Gateway({ logger: quiet, ...options });
  const app = express();
  app.use(expressMiddleware(gateway));
  backend(app);
  const served = await listen(app);
  return { ...served, gateway };
}

export const quiet = { info() {}, warn() {}, error() {} };

let n = 0;
// A prefix no other test's keys use, for templates.
export const fresh = () => `g${process.pid}-${n++}`;

// One series of the gateway's Prometheus text, exactly as rendered (0 when absent).
export function series(gateway, name) {
  const line = gateway.metrics.render().split('\n').find((l) => l.startsWith(`${name} `));
  return line ? Number(line.slice(name.length + 1)) : 0;
}
