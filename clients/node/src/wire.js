import { invalidRequest } from './errors.js';

const UNITS = [
  ['d', 86_400_000],
  ['h', 3_600_000],
  ['m', 60_000],
  ['s', 1000],
];

// A duration is a number of milliseconds or a string in the module's syntax ("250ms", "10s").
// Sent in the largest unit that states it exactly; a part finer than a millisecond cannot be
// written, and rounding it would change the rate it means.
export function durationArg(value, what) {
  const ms = typeof value === 'string' ? parseDuration(value, what) : value;
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) {
    throw invalidRequest(`${what} must be a non-negative number of milliseconds, not ${String(value)}`);
  }
  if (!Number.isInteger(ms)) {
    throw invalidRequest(`${what} ${ms}ms is finer than a millisecond, the module's finest unit`);
  }
  if (ms === 0) return '0ms';
  for (const [unit, size] of UNITS) {
    if (ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}

const DURATION = /^([0-9]+)(ms|s|m|h|d)$/i;
const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

// The module's duration syntax, to milliseconds; bounds are the caller's to check.
export function parseDuration(text, what = 'duration') {
  const m = DURATION.exec(text);
  if (!m) {
    if (/^[0-9]+$/.test(text)) {
      throw invalidRequest(`${what} needs a unit: add ms, s, m, h or d (for example 10s)`);
    }
    throw invalidRequest(`${what} must be a positive integer and a unit ms, s, m, h or d, not '${text}'`);
  }
  return Number(m[1]) * UNIT_MS[m[2].toLowerCase()];
}

export function countArg(n, what) {
  if (typeof n === 'bigint') return n.toString();
  if (typeof n !== 'number' || !Number.isSafeInteger(n)) {
    throw invalidRequest(`${what} must be an integer, not ${String(n)}`);
  }
  return String(n);
}

// CRC16-CCITT (XModem), as Redis Cluster hashes keys.
const CRC_TABLE = (() => {
  const table = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let crc = i << 8;
    for (let j = 0; j < 8; j++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    table[i] = crc;
  }
  return table;
})();

export function toBytes(key) {
  return Buffer.isBuffer(key) ? key : Buffer.from(String(key), 'utf8');
}

// The cluster slot of a key: CRC16 of its hash tag (the text between the first `{` and the
// next `}`, when not empty), or of the whole key.
export function keySlot(key) {
  let bytes = toBytes(key);
  const open = bytes.indexOf(0x7b);
  if (open >= 0) {
    const close = bytes.indexOf(0x7d, open + 1);
    if (close > open + 1) bytes = bytes.subarray(open + 1, close);
  }
  let crc = 0;
  for (const b of bytes) crc = ((crc << 8) & 0xffff) ^ CRC_TABLE[((crc >> 8) ^ b) & 0xff];
  return crc % 16384;
}

// The one slot of several keys, or an invalid request naming two of them.
export function commonSlot(keys) {
  let slot = null;
  for (const key of keys) {
    const s = keySlot(key);
    if (slot === null) slot = s;
    else if (s !== slot) {
      throw invalidRequest(
        `RL.MULTI keys are in cluster slots ${slot} and ${s}: give them one hash tag, for example {t:tenant}`,
      );
    }
  }
  return slot;
}
