// The gateway as express middleware (also plain node:http: `(req, res, next)`).
const PROBLEM_TYPE = 'application/problem+json';

// RateLimit-Policy and RateLimit are lists: a second limiting layer adds its items to the first's.
function put(res, name, value) {
  if (name.startsWith('RateLimit') && res.appendHeader) res.appendHeader(name, value);
  else res.setHeader(name, value);
}

function send(res, decision) {
  res.statusCode = decision.status;
  res.setHeader('Content-Type', PROBLEM_TYPE);
  for (const [k, v] of decision.headers) put(res, k, v);
  res.end(decision.body);
}

// Holds the response's first write until the reservations are settled with its X-Actual-Cost,
// so the settlement happens before the response is passed on.
function settleBeforeSending(res, decision) {
  const write = res.write.bind(res);
  const end = res.end.bind(res);
  let settled = null;
  const settle = () => {
    settled ??= decision.finish({ actualCost: res.getHeader('x-actual-cost'), status: res.statusCode });
    return settled;
  };
  res.write = (...args) => {
    settle().then(() => write(...args), () => write(...args));
    return true;
  };
  res.end = (...args) => {
    settle().then(() => end(...args), () => end(...args));
    return res;
  };
}

export function expressMiddleware(gateway) {
  return async function redisRl(req, res, next) {
    let decision;
    try {
      decision = await gateway.decide({ method: req.method, path: req.path ?? new URL(req.url, 'http://x').pathname,
        headers: req.headers, headersDistinct: req.headersDistinct, peer: req.socket?.remoteAddress,
        // express routes /CHECKOUT to the handler of /checkout unless told otherwise.
        caseInsensitive: req.app ? !req.app.get('case sensitive routing') : false });
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
      // A caller gone while the store answered has already closed the response.
      if (req.socket?.destroyed) decision.done();
      else res.once('close', decision.done);
    }
    if (decision.finish) settleBeforeSending(res, decision);
    next();
  };
}
