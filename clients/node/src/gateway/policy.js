// Where a gateway's policy comes from: a document given as text or object, or a file that
// reloads re-read. The engine validates it (clients/engine/src/policy); a refusal carries the
// engine's message, with the JSON path of the bad field.
import { readFileSync } from 'node:fs';
import { engine } from './native.js';

export class PolicyError extends Error {
  constructor(message) {
    super(message);
    this.name = 'PolicyError';
  }
}

const textOf = (policy) => (typeof policy === 'string' ? policy : JSON.stringify(policy));

// Validates a policy document: its version, or a PolicyError.
export function parsePolicy(policy) {
  try {
    return { version: engine().loadPolicy(textOf(policy)) };
  } catch (err) {
    throw new PolicyError(err.message);
  }
}

export class PolicyStore {
  static fromFile(file) {
    return new PolicyStore(readPolicy(file), file);
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
}

function readPolicy(file) {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    throw new PolicyError(`cannot read policy ${file}: ${err.message}`);
  }
}
