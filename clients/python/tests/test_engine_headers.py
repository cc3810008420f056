"""The headers of a typed decision, rendered by the engine (clients/SPEC.md section 3): the
fields every gateway sends, from the one rendering."""

import pytest
import redis_rl_engine as engine


def _rate(name, limit, period_ms, capacity):
    return {"name": name, "limit": limit, "period_ms": period_ms, "capacity": capacity,
            "remaining": 1, "reset_after_ms": 1500}


def test_sub_second_periods_are_scaled_and_names_are_structured_field_strings():
    rules = [_rate("fast", 5, 250, 5), _rate("odd", 3, 700, 30), _rate('a"b\\c\u00e9', 2, 60_000, 2)]
    assert engine.render_headers(rules) == [
        ("RateLimit-Policy", '"fast";q=20;w=1;rl-burst=5, "odd";q=30;w=7, "a\\"b\\\\c_";q=2;w=60'),
        ("RateLimit", '"fast";r=1;t=2, "odd";r=1;t=2, "a\\"b\\\\c_";r=1;t=2'),
    ]


def test_a_semaphore_shows_its_slots_and_legacy_fields_name_the_longest_refusal():
    rules = [{"name": "s", "limit": 3, "capacity": 3, "semaphore": True, "remaining": 0,
              "reset_after_ms": 0, "retry_after_ms": 900},
             {"name": "r", "limit": 10, "period_ms": 60_000, "capacity": 10, "remaining": 0,
              "reset_after_ms": 30_000, "retry_after_ms": 4_001}]
    assert engine.render_headers(rules, legacy=True) == [
        ("RateLimit-Policy", '"s";q=3;qu="concurrent-requests", "r";q=10;w=60'),
        ("RateLimit", '"s";r=0;t=1, "r";r=0;t=5'),
        ("X-RateLimit-Limit", "10"),
        ("X-RateLimit-Remaining", "0"),
        ("X-RateLimit-Reset", "5"),
    ]
    assert engine.render_headers([]) == []


def test_a_rule_missing_a_field_is_refused_by_name():
    with pytest.raises(ValueError, match='rule 0: no "remaining"'):
        engine.render_headers([{"name": "x", "limit": 1, "period_ms": 1000, "capacity": 1,
                                "reset_after_ms": 0}])
