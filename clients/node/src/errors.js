// The four kinds of clients/SPEC.md section 1. Only `unavailable` may lead to a route's posture.
export class RLError extends Error {
  constructor(kind, message, options) {
    super(message, options);
    this.name = 'RLError';
    this.kind = kind;
  }
  get isUnavailable() {
    return this.kind === 'unavailable';
  }
}

export const unavailable = (message, cause) => new RLError('unavailable', message, { cause });
export const refused = (text) => new RLError('refused', text);
export const unexpectedReply = (what) => new RLError('unexpected_reply', `unexpected reply: ${what}`);
export const invalidRequest = (what) => new RLError('invalid_request', `invalid request: ${what}`);

// Codes that are a verdict on the request; every other server error means the store could not
// answer it (LOADING, BUSY, TRYAGAIN, CLUSTERDOWN, MASTERDOWN, READONLY, OOM, NOAUTH, NOPERM...).
const REFUSING_CODES = new Set(['ERR', 'WRONGTYPE', 'CROSSSLOT']);

// A server's error reply, as the adapters hand it over (the text, code first).
export function fromServerError(text, cause) {
  const code = text.split(' ', 1)[0];
  return REFUSING_CODES.has(code) ? refused(text) : unavailable(text, cause);
}
