// Prometheus text exposition 0.0.4 with clients/SPEC.md "Gateway behaviour" 4's names; every
// event is also handed to the application's hook.
export const OUTCOMES = ['admit', 'refuse', 'refuse_cached', 'unavailable_deny', 'fallback_admit', 'fallback_refuse',
  'open_admit', 'shadow_refuse', 'unreplicated_admit'];
const RESULTS = ['ok', 'error', 'timeout'];
const BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1];
const BREAKER_STATES = ['closed', 'open', 'half_open', 'ramping'];
const MODES = ['deny', 'fallback', 'allow'];

const escape = (v) => String(v).replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
const cmp = (a, b) => (a < b ? -1 : a > b ? 1 : 0);

export class Metrics {
  constructor(hook) {
    this.hook = hook;
    this.decisions = new Map();
    this.calls = new Map(RESULTS.map((r) => [r, { buckets: BUCKETS.map(() => 0), sum: 0, count: 0 }]));
    this.refills = new Map();
    this.breaker = 'closed';
    this.version = 0;
    this.routeModes = new Map();
    this.storeMode = null;
  }

  emit(event) {
    this.hook?.(event);
  }

  decision(route, rule, outcome) {
    const id = JSON.stringify([route, rule, outcome]);
    this.decisions.set(id, (this.decisions.get(id) ?? 0) + 1);
    this.emit({ type: 'decision', route, rule, outcome });
  }

  storeCall(result, seconds) {
    const h = this.calls.get(result);
    BUCKETS.forEach((b, i) => {
      if (seconds <= b) h.buckets[i] += 1;
    });
    h.sum += seconds;
    h.count += 1;
    this.emit({ type: 'store_call', result, seconds });
  }

  grantRefill(rule) {
    this.refills.set(rule, (this.refills.get(rule) ?? 0) + 1);
    this.emit({ type: 'grant_refill', rule });
  }

  breakerState(state) {
    this.breaker = state;
    this.emit({ type: 'breaker_state', state });
  }

  policy(policy) {
    this.version = policy.version;
    this.routeModes = new Map(policy.routes.map((r) => [r.name, r.onStoreError.mode]));
    this.emit({ type: 'policy_version', version: policy.version });
    for (const [route, mode] of this.routeModes) this.emit({ type: 'route_mode', route, mode });
  }

  mode(mode) {
    this.storeMode = mode;
    this.emit({ type: 'store_mode', mode });
  }

  count(route, rule, outcome) {
    return this.decisions.get(JSON.stringify([route, rule, outcome])) ?? 0;
  }

  render() {
    const out = [];
    const family = (name, type, help) => out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    family('rl_gateway_decisions_total', 'counter', 'Rule decisions by route, rule and outcome.');
    const rows = [...this.decisions].map(([id, n]) => [...JSON.parse(id), n]);
    rows.sort((a, b) => cmp(a[0], b[0]) || cmp(a[1], b[1]) || OUTCOMES.indexOf(a[2]) - OUTCOMES.indexOf(b[2]));
    for (const [route, rule, outcome, n] of rows) {
      out.push(`rl_gateway_decisions_total{route="${escape(route)}",rule="${escape(rule)}",outcome="${outcome}"} ${n}`);
    }
    family('rl_gateway_store_call_duration_seconds', 'histogram', 'Store call latency by result.');
    for (const result of RESULTS) {
      const h = this.calls.get(result);
      if (h.count === 0) continue;
      BUCKETS.forEach((b, i) => out.push(`rl_gateway_store_call_duration_seconds_bucket{result="${result}",le="${b}"} ${h.buckets[i]}`));
      out.push(`rl_gateway_store_call_duration_seconds_bucket{result="${result}",le="+Inf"} ${h.count}`);
      out.push(`rl_gateway_store_call_duration_seconds_sum{result="${result}"} ${h.sum}`);
      out.push(`rl_gateway_store_call_duration_seconds_count{result="${result}"} ${h.count}`);
    }
    family('rl_gateway_grant_refills_total', 'counter', 'RL.GRANT calls by rule.');
    for (const [rule, n] of [...this.refills].sort((a, b) => cmp(a[0], b[0]))) {
      out.push(`rl_gateway_grant_refills_total{rule="${escape(rule)}"} ${n}`);
    }
    family('rl_gateway_breaker_state', 'gauge', 'The store breaker: 1 for the current state.');
    for (const s of BREAKER_STATES) out.push(`rl_gateway_breaker_state{state="${s}"} ${s === this.breaker ? 1 : 0}`);
    family('rl_gateway_policy_version', 'gauge', 'Version of the policy in force.');
    out.push(`rl_gateway_policy_version ${this.version}`);
    family('rl_gateway_route_mode', 'gauge', 'Each route\'s posture when the store cannot answer.');
    for (const [route, mode] of [...this.routeModes].sort((a, b) => cmp(a[0], b[0]))) {
      for (const m of MODES) out.push(`rl_gateway_route_mode{route="${escape(route)}",mode="${m}"} ${m === mode ? 1 : 0}`);
    }
    family('rl_gateway_store_mode', 'gauge', 'How commands reach the store: the module, or the script.');
    for (const m of ['module', 'script']) {
      if (this.storeMode !== null) out.push(`rl_gateway_store_mode{mode="${m}"} ${m === this.storeMode ? 1 : 0}`);
    }
    return `${out.join('\n')}\n`;
  }
}
