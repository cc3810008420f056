// Builds the gateway's addon from this repository: native/redis-rl.<platform>.node. It runs at
// `npm install` in this folder and at `npm install <path to clients/node>` elsewhere (the
// package's `prepare`), and as `npm run build:native`. With @napi-rs/cli installed (a development
// checkout) `napi build` also writes native/index.d.ts from the Rust source; a linked folder has
// no devDependencies, and there cargo alone builds the same library, copied under the addon's
// name. The typed clients, RLStore and RateLimiterRL need no addon: without cargo (and no
// prebuilt redis-rl-<platform> package) this says what the gateway needs and lets the install go on.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { platform } from '../src/gateway/native.js';

const here = dirname(fileURLToPath(import.meta.url));
const pkg = join(here, '..');
const name = platform();
const output = join(here, `redis-rl.${name}.node`);

function run(command, args) {
  const { status, error } = spawnSync(command, args, { cwd: pkg, stdio: 'inherit' });
  if (error) throw error;
  if (status !== 0) process.exit(status ?? 1);
}

if (spawnSync('cargo', ['--version'], { stdio: 'ignore' }).status !== 0) {
  let prebuilt = null;
  try {
    prebuilt = createRequire(join(pkg, 'package.json')).resolve(`redis-rl-${name}`);
  } catch {
    // not installed: said below
  }
  if (!prebuilt && !existsSync(output)) {
    console.warn(`redis-rl: no cargo on the PATH, so the gateway's native engine was not built for ${name}. `
      + 'Everything but the gateway works. For the gateway, install Rust (https://rustup.rs) and run '
      + `\`npm run build:native\` in ${pkg}, or install the prebuilt package: npm install redis-rl-${name}`);
  }
  process.exit(0);
}
// CARGO_TARGET_DIR, when set, shares compiled dependencies with other builds.
const targetDir = process.env.CARGO_TARGET_DIR ?? join(here, 'target');
const napi = join(pkg, 'node_modules', '.bin', 'napi');
if (existsSync(napi)) {
  run(napi, ['build', '--platform', '--release', '--manifest-path', 'native/Cargo.toml', '--output-dir', 'native',
    '--no-js', '--target-dir', targetDir]);
} else {
  run('cargo', ['build', '--release', '--locked', '--manifest-path', join(here, 'Cargo.toml'), '--target-dir', targetDir]);
  const lib = process.platform === 'win32' ? 'redis_rl_node.dll'
    : process.platform === 'darwin' ? 'libredis_rl_node.dylib' : 'libredis_rl_node.so';
  copyFileSync(join(targetDir, 'release', lib), output);
}
