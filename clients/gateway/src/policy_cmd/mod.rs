//! `rl-gateway policy check` and `policy diff` (CONTRACT.md section 11).
