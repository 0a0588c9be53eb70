"""The fake provider's connections: kept alive as a real provider's are (a new connection per
call would be a cost of the fake charged to Capstan in `bench/`), a cut stream still just stops,
and a stopped fake is dead even to a client holding a kept-alive connection."""

from __future__ import annotations

import json

import httpx
import pytest

from capstan.testing.fake_provider import FakeProvider, Fault, call, say

BODY = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def events(response: httpx.Response) -> list[str]:
    return [line for line in response.text.splitlines() if line.startswith("data: ")]


def test_streams_are_chunked_on_one_kept_alive_connection() -> None:
    peers: set[tuple[str, int]] = set()
    with FakeProvider([say(call("list_dir"), content="hello")] * 3) as fake, httpx.Client() as http:
        for _ in range(3):
            with http.stream("POST", f"{fake.base_url}/chat/completions", json=BODY) as r:
                r.read()
                stream = r.extensions["network_stream"]
                peers.add(stream.get_extra_info("socket").getsockname())
            assert r.headers["transfer-encoding"] == "chunked"
            assert events(r)[-1] == "data: [DONE]"
            assert all(json.loads(e[6:]) for e in events(r)[:-1]) and "hello" in r.text
    assert len(peers) == 1  # one connection served all three calls


def test_a_cut_stream_ends_early_without_a_protocol_error() -> None:
    with FakeProvider(
        [say(content="a reply long enough to cut")], faults={0: Fault(cut=True)}
    ) as fake:
        r = httpx.post(f"{fake.base_url}/chat/completions", json=BODY)
        assert r.status_code == 200 and "transfer-encoding" not in r.headers
        assert events(r) and "data: [DONE]" not in events(r)


def test_a_stopped_fake_drops_kept_alive_connections() -> None:
    with httpx.Client() as http:
        with FakeProvider([say(content="one")] * 2) as fake:
            assert http.post(f"{fake.base_url}/chat/completions", json=BODY).status_code == 200
        with pytest.raises(httpx.TransportError):
            http.post(f"{fake.base_url}/chat/completions", json=BODY)
