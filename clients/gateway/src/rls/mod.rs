//! Envoy rate limit service v3 (CONTRACT.md section 10).
