"""The README's FastAPI app, run as written (only the server's address replaced)."""

import json
import re
from pathlib import Path

import httpx

README = Path(__file__).resolve().parents[1] / "README.md"


def _example() -> str:
    text = README.read_text()
    section = text[text.index("## A FastAPI app with the middleware"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


async def test_the_readme_fastapi_app(server, tmp_path, monkeypatch):
    code = _example()
    assert len([l for l in code.splitlines() if l.strip()]) <= 10
    policy = {"version": 1, "default": {"rules": []}, "identity": {"user": "x-user"},
              "rules": {"read": {"key": "readme:${user}", "limit": 2, "period": "1h"}},
              "routes": [{"method": "GET", "path": "/catalog", "rules": ["read"]}]}
    (tmp_path / "policy.json").write_text(json.dumps(policy))
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(code.replace("redis://127.0.0.1:6379", server.url), scope)
    # What the middleware does at an ASGI server's startup (httpx's transport sends none).
    await scope["store"].prepare()
    transport = httpx.ASGITransport(app=scope["app"])
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as c:
        codes = [(await c.get("/catalog", headers={"x-user": "readme"})).status_code
                 for _ in range(3)]
        ok = await c.get("/catalog", headers={"x-user": "other"})
    assert codes == [200, 200, 429]
    assert ok.json() == {"items": []} and ok.headers["ratelimit"] == '"read";r=1;t=1800'
