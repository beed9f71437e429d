"""The API server's cache of authenticated tokens: upstream's 10 s success TTL, no failure caching, a
bound on entries, and keys that are not the token."""

from __future__ import annotations

from controlplane.apiserver.authn import Authenticator, UserInfo
from controlplane.apiserver.tokencache import SUCCESS_TTL, TokenCache


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_success_is_remembered_for_the_ttl_per_audience_set() -> None:
    clock = Clock()
    cache: TokenCache[str] = TokenCache(clock=clock)
    assert SUCCESS_TTL == 10.0
    cache.put("tok", ("api",), "alice")
    assert cache.get("tok", ("api",)) == "alice"
    assert cache.get("tok", ("vault",)) is None  # another audience is another question
    assert cache.get("other", ("api",)) is None
    clock.now += SUCCESS_TTL - 0.01
    assert cache.get("tok", ("api",)) == "alice"
    clock.now += 0.02
    assert cache.get("tok", ("api",)) is None and len(cache) == 0


def test_bounded_oldest_first_and_never_holds_the_token() -> None:
    cache: TokenCache[int] = TokenCache(max_entries=3, clock=Clock())
    for i in range(5):
        cache.put(f"secret-token-{i}", (), i)
    assert len(cache) == 3
    assert cache.get("secret-token-0", ()) is None and cache.get("secret-token-4", ()) == 4
    assert not any(b"secret-token" in key for key in cache._entries.keys())


def test_zero_ttl_caches_nothing() -> None:
    cache: TokenCache[int] = TokenCache(ttl=0)
    cache.put("t", (), 1)
    assert cache.get("t", ()) is None and len(cache) == 0


def test_the_authenticator_caches_successes_only() -> None:
    authn = Authenticator({"good": UserInfo("alice")}, api_audiences=("api",))
    first = authn.authenticate_token("good")
    assert first.user is not None and first.user.name == "alice"
    authn._tokens.clear()  # the static file no longer has it: the cached success still answers
    assert authn.authenticate_token("good") is first
    assert authn.authenticate_token("bad").user is None
    authn._tokens["bad"] = UserInfo("bob")
    assert authn.authenticate_token("bad").user is not None  # a failure was not remembered
