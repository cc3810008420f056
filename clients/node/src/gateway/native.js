// The gateway's engine is the Rust crate clients/engine, as a napi-rs addon. It is loaded on
// first use, by the gateway only: the typed clients, RLStore and RateLimiterRL work without it.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { PACKAGE_ROOT } from '../client.js';

// napi-rs's platform names: the suffix of the built file and of the prebuilt package.
export function platform() {
  const { platform: os, arch } = process;
  if (os === 'linux') {
    const musl = !process.report?.getReport?.().header?.glibcVersionRuntime;
    return `linux-${arch}-${musl ? 'musl' : 'gnu'}`;
  }
  if (os === 'win32') return `win32-${arch}-msvc`;
  return `${os}-${arch}`;
}

// What builds the addon where no prebuilt package fits: a repository checkout has its source.
function fromSource() {
  return existsSync(join(PACKAGE_ROOT, 'native', 'Cargo.toml'))
    ? `build it with Rust (https://rustup.rs): npm run build:native in ${PACKAGE_ROOT}`
    : 'install redis-rl from its repository with Rust (npm install <repository>/clients/node), which builds it';
}

let addon = null;

// The addon built in this package (from the repository), else the prebuilt package of a
// release (an optional dependency, one per platform).
export function engine() {
  if (addon) return addon;
  const name = platform();
  const load = createRequire(join(PACKAGE_ROOT, 'package.json'));
  const tried = [];
  for (const id of [join(PACKAGE_ROOT, 'native', `redis-rl.${name}.node`), `redis-rl-${name}`]) {
    try {
      addon = load(id);
      return addon;
    } catch (err) {
      tried.push(`${id}: ${err.message.split('\n')[0]}`);
    }
  }
  throw new Error(`redis-rl: the gateway's native engine is not installed for ${name} (tried ${tried.join('; ')}); `
    + `install the prebuilt package (npm install redis-rl-${name}), or ${fromSource()}`);
}
