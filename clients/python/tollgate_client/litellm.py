"""LiteLLM's proxy on tollgate: a callback that puts a call's model, key, team and user limits on
tollgate, exact across proxy replicas (extra `[litellm]`: LiteLLM's proxy, 1.110).

In the proxy's config:

    litellm_settings:
      callbacks: ["tollgate_client.litellm.callback"]

with `TOLLGATE_ADDR` (and the other `TOLLGATE_LITELLM_*` variables below) in the proxy's
environment, or a module of your own next to the config that builds a `TollgateCallback`
(`callbacks: ["my_limits.handler"]`).

Before the call (`async_pre_call_hook`) it reserves, in one tollgate call, the request's
estimate (the prompt's tokens as LiteLLM counts them + `max_tokens`, or `default_max_tokens`)
on every descriptor `descriptors(call)` gives: by default the model group's requests and tokens,
the key's, the team's tokens and money, the user's money. A refusal is LiteLLM's 429 with
`Retry-After` from tollgate's answer, at once (`max_wait`, default 0). When the call ends it
settles with the usage the provider reported: requests 1, tokens their count, money by token
kind. See clients/python/README.md, "LiteLLM's proxy".
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

try:
    from fastapi import HTTPException
    from litellm.integrations.custom_logger import CustomLogger
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "tollgate_client.litellm needs LiteLLM's proxy: pip install 'litellm[proxy]'"
    ) from e

from ._model import AcquireTimeout, CostNeverFits, Decision, Descriptor, TollgateError
from .aio import AsyncClient

log = logging.getLogger(__name__)

Measure = Literal["requests", "tokens", "spend"]

#: Where the reservation travels from the pre-call hook to the success and failure hooks: an
#: entry of the request's `metadata` (LiteLLM hands it to its logging callbacks).
METADATA_KEY = "tollgate_reservation"


@dataclass(frozen=True)
class Call:
    """What the descriptor mapping sees of one call."""

    #: The model group the request names (`model` in the request body).
    model_group: str
    #: The virtual key: its alias when it has one, else LiteLLM's hash of it; None without one.
    key: str | None
    team: str | None
    user: str | None
    #: The class for guaranteed shares: the key's metadata `priority`, else the team's; None
    #: when neither says (tollgate then uses the limit's `default` class). Never the request's
    #: own metadata: a caller must not choose its class.
    priority: str | None


@dataclass(frozen=True)
class Limited:
    """One descriptor the callback sends, and what it counts: `requests` (1 a call), `tokens`
    (the call's tokens: the estimate, then the total used) or `spend` (money: the estimate
    priced at the output price, then one descriptor per token kind with the kind entry added,
    priced by the domain's `prices`)."""

    entries: tuple[tuple[str, str], ...]
    measure: Measure


def default_descriptors(call: Call) -> list[Limited]:
    """The default mapping (clients/python/README.md): the model group's requests and tokens
    (with the priority, for guaranteed shares), the key's requests and tokens, the team's tokens
    and money, the user's money. A descriptor no rule matches costs nothing."""
    prio: tuple[tuple[str, str], ...] = (("priority", call.priority),) if call.priority else ()
    g = call.model_group
    out = [
        Limited((("model_requests", g), *prio), "requests"),
        Limited((("model_tokens", g), *prio), "tokens"),
    ]
    if call.key:
        out.append(Limited((("key_requests", call.key),), "requests"))
        out.append(Limited((("key_tokens", call.key),), "tokens"))
    if call.team:
        out.append(Limited((("team_tokens", call.team),), "tokens"))
        out.append(Limited((("team_spend", call.team), ("model", g)), "spend"))
    if call.user:
        out.append(Limited((("user_spend", call.user), ("model", g)), "spend"))
    return out


@dataclass(frozen=True)
class Usage:
    """What a call used, as the provider reported it."""

    prompt: int = 0
    completion: int = 0
    #: Of `prompt`, the tokens read from the provider's prompt cache.
    cached: int = 0

    @property
    def total(self) -> int:
        return self.prompt + self.completion


class TollgateCallback(CustomLogger):
    """A LiteLLM `CustomLogger` that reserves each call's estimate on tollgate and settles it with
    the provider's usage.

    - `addr`: tollgate's gRPC address (`host:port`); or `client=` an `AsyncClient` (its event
      loop must be the proxy's).
    - `domain`: the tollgate domain of the descriptors (default `litellm`).
    - `descriptors`: the mapping, `Call -> [Limited]` (default `default_descriptors`).
    - `default_max_tokens`: the completion's part of the estimate when the request sets no
      `max_tokens` / `max_completion_tokens` (default 4096).
    - `max_wait`: seconds a call may wait for its estimate to fit before it is refused (default
      0: refused at once with tollgate's retry time).
    - `fail_open`: tollgate unreachable (or slower than `timeout`) lets calls through
      uncharged; the default, False, refuses them with a 503.
    - `failed_calls_count`: a failed call keeps its request charged (default True: the request
      may have reached the provider); its tokens and money settle to the usage reported, 0
      without one.
    - `kind_key`, `cached_kind`: the entry naming a token kind in `spend` descriptors
      (default `kind`, as tollgate's `prices.kind_key`) and the kind cached prompt tokens are
      charged as (default `cached_input`; None charges them as `input`).
    """

    def __init__(
        self,
        addr: str | None = None,
        *,
        client: AsyncClient | None = None,
        domain: str = "litellm",
        descriptors: Callable[[Call], Sequence[Limited]] = default_descriptors,
        default_max_tokens: int = 4096,
        max_wait: float = 0.0,
        timeout: float = 0.5,
        fail_open: bool = False,
        failed_calls_count: bool = True,
        kind_key: str = "kind",
        cached_kind: str | None = "cached_input",
    ) -> None:
        super().__init__()
        if client is None and addr is None:
            raise ValueError("TollgateCallback needs addr= (tollgate's host:port) or client=")
        if default_max_tokens < 1:
            raise ValueError(f"default_max_tokens must be positive, got {default_max_tokens!r}")
        if not max_wait >= 0:
            raise ValueError(f"max_wait must be 0 or more seconds, got {max_wait!r}")
        self.addr = addr
        self.domain = domain
        self.descriptors = descriptors
        self.default_max_tokens = int(default_max_tokens)
        self.max_wait = float(max_wait)
        self.timeout = timeout
        self.fail_open = fail_open
        self.failed_calls_count = failed_calls_count
        self.kind_key = kind_key
        self.cached_kind = cached_kind
        self._client = client
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def from_env(cls) -> TollgateCallback:
        """Built from the environment: `TOLLGATE_ADDR` (default `127.0.0.1:8081`),
        `TOLLGATE_LITELLM_DOMAIN` (`litellm`), `TOLLGATE_LITELLM_DEFAULT_MAX_TOKENS` (4096),
        `TOLLGATE_LITELLM_MAX_WAIT` (0), `TOLLGATE_LITELLM_TIMEOUT` (0.5) and
        `TOLLGATE_LITELLM_FAIL_OPEN` (`false`)."""
        env = os.environ
        return cls(
            env.get("TOLLGATE_ADDR", "127.0.0.1:8081"),
            domain=env.get("TOLLGATE_LITELLM_DOMAIN", "litellm"),
            default_max_tokens=int(env.get("TOLLGATE_LITELLM_DEFAULT_MAX_TOKENS", "4096")),
            max_wait=float(env.get("TOLLGATE_LITELLM_MAX_WAIT", "0")),
            timeout=float(env.get("TOLLGATE_LITELLM_TIMEOUT", "0.5")),
            fail_open=env.get("TOLLGATE_LITELLM_FAIL_OPEN", "false").lower() in ("1", "true", "yes"),
        )

    # ------------------------------------------------------------------ the client
    def client(self) -> AsyncClient:
        """The AsyncClient, made in the running event loop on first use (gRPC's asyncio channel
        belongs to one loop)."""
        loop = asyncio.get_running_loop()
        if self._client is None or (self.addr is not None and self._loop is not loop):
            assert self.addr is not None
            self._client = AsyncClient(self.addr, timeout=self.timeout, fail_open=self.fail_open)
            self._loop = loop
        return self._client

    # ------------------------------------------------------------------ what a call is
    def call_of(self, data: Mapping[str, Any], user_api_key_dict: Any) -> Call:
        key_meta = _mapping(getattr(user_api_key_dict, "metadata", None))
        team_meta = _mapping(getattr(user_api_key_dict, "team_metadata", None))
        priority = key_meta.get("priority") or team_meta.get("priority")
        key = getattr(user_api_key_dict, "key_alias", None) or getattr(
            user_api_key_dict, "api_key", None
        )
        return Call(
            model_group=str(data.get("model") or ""),
            key=_str_or_none(key),
            team=_str_or_none(getattr(user_api_key_dict, "team_id", None)),
            user=_str_or_none(getattr(user_api_key_dict, "user_id", None)),
            priority=_str_or_none(priority),
        )

    def estimate(self, data: Mapping[str, Any]) -> int:
        """The prompt's tokens as LiteLLM counts them + the completion's `max_tokens` (or
        `max_completion_tokens`, else `default_max_tokens`)."""
        import litellm

        completion = data.get("max_tokens") or data.get("max_completion_tokens")
        if not isinstance(completion, int) or isinstance(completion, bool) or completion < 1:
            completion = self.default_max_tokens
        prompt = 0
        messages = data.get("messages")
        try:
            if messages:
                prompt = int(litellm.token_counter(model=str(data.get("model") or ""), messages=messages))
            elif data.get("prompt") is not None:
                prompt = int(litellm.token_counter(model=str(data.get("model") or ""), text=str(data["prompt"])))
        except Exception as err:  # a prompt LiteLLM cannot count: the completion part only
            log.warning("tollgate: could not count the prompt's tokens (%s); estimating without them", err)
        return max(1, prompt + int(completion))

    # ------------------------------------------------------------------ the hooks
    async def async_pre_call_hook(
        self,
        user_api_key_dict: Any,
        cache: Any,
        data: dict[str, Any],
        call_type: str,
    ) -> dict[str, Any]:
        """Reserves the call's estimate on every descriptor, all or nothing; refuses with a 429
        (`Retry-After`: tollgate's wait) when it does not fit."""
        if call_type not in ("completion", "acompletion", "text_completion", "atext_completion"):
            return data
        call = self.call_of(data, user_api_key_dict)
        limited = list(self.descriptors(call))
        if not limited:
            return data
        estimate = self.estimate(data)
        sent = [
            Descriptor(lim.entries, hits=1 if lim.measure == "requests" else estimate)
            for lim in limited
        ]
        try:
            r = await self.client().reserve(self.domain, sent, estimate, max_wait=self.max_wait)
        except AcquireTimeout as err:
            raise _refused(err.decision, limited) from None
        except CostNeverFits as err:
            raise HTTPException(
                status_code=429,
                detail=f"tollgate: this call's estimate ({estimate} tokens) is more than the limit "
                f"of {_names(err.decision, limited)} can ever grant; lower max_tokens",
            ) from None
        except TollgateError as err:  # unavailable with fail_open False, or a request error
            log.error("tollgate: reserve failed: %s", err)
            raise HTTPException(
                status_code=503, detail=f"rate limiter unavailable: {err}"
            ) from None
        if r.id:
            metadata = data.get("metadata")
            if not isinstance(metadata, dict):  # absent or null: the settle needs it
                metadata = data["metadata"] = {}
            metadata[METADATA_KEY] = {
                "id": r.id,
                "domain": self.domain,
                "limits": [[[list(e) for e in lim.entries], lim.measure] for lim in limited],
            }
        return data

    async def async_log_success_event(
        self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        """Settles with the usage the provider reported (streamed calls: the final chunk's)."""
        await self._settle(_reservation_in(kwargs), usage_of(kwargs, response_obj), ok=True)

    # No settle in `async_log_failure_event`: LiteLLM calls it for every failed attempt, also
    # one that a retry or a fallback then serves, and settles are idempotent (the first one
    # wins), so settling there would give back the tokens the fallback then used. The proxy's
    # `async_post_call_failure_hook` runs once, when the request has failed for good.

    async def async_post_call_failure_hook(
        self,
        request_data: dict[str, Any],
        original_exception: Exception,
        user_api_key_dict: Any,
        traceback_str: str | None = None,
    ) -> None:
        """The request failed for good (the provider failed and no retry or fallback served it,
        or a later hook refused it): settled as a failure, with no usage."""
        await self._settle(_reservation_in({"metadata": request_data.get("metadata")}), Usage(), ok=False)
        return None

    # ------------------------------------------------------------------ the settle
    def settle_descriptors(
        self, limits: Sequence[Limited], usage: Usage, *, ok: bool
    ) -> list[Descriptor]:
        """What a call used, on each descriptor it reserved: requests 1 (a failure: 1 when
        `failed_calls_count`, else 0), tokens the total, money one descriptor per token kind."""
        out = []
        for lim in limits:
            if lim.measure == "requests":
                out.append(Descriptor(lim.entries, hits=1 if ok or self.failed_calls_count else 0))
            elif lim.measure == "tokens":
                out.append(Descriptor(lim.entries, hits=usage.total))
            else:
                cached = usage.cached if self.cached_kind else 0
                kinds = [("input", usage.prompt - cached), ("output", usage.completion)]
                if cached and self.cached_kind:
                    kinds.append((self.cached_kind, cached))
                for kind, n in kinds:
                    out.append(Descriptor((*lim.entries, (self.kind_key, kind)), hits=max(0, n)))
        return out

    async def _settle(self, held: Mapping[str, Any] | None, usage: Usage, *, ok: bool) -> None:
        if held is None:
            return
        try:
            limits = [
                Limited(tuple((str(k), str(v)) for k, v in entries), measure)
                for entries, measure in held["limits"]
            ]
            settled = await self.client().settle_id(
                str(held["domain"]), str(held["id"]), self.settle_descriptors(limits, usage, ok=ok)
            )
        except Exception as err:  # a hook must not fail the call: the estimate stays charged
            log.error("tollgate: settle of %s failed, its estimate stays charged: %s", held.get("id"), err)
            return
        if settled.error:
            log.error("tollgate: settle of %s failed, its estimate stays charged: %s", held.get("id"), settled.error)


def usage_of(kwargs: Mapping[str, Any], response_obj: Any) -> Usage:
    """The usage the provider reported: the response's `usage` (a streamed call's assembled
    response holds the final chunk's), else LiteLLM's standard logging object; none: 0."""
    for source in (
        response_obj,
        kwargs.get("complete_streaming_response"),
        kwargs.get("async_complete_streaming_response"),
    ):
        usage = _get(source, "usage")
        if usage is not None:
            prompt = _int(_get(usage, "prompt_tokens"))
            completion = _int(_get(usage, "completion_tokens"))
            cached = _int(_get(_get(usage, "prompt_tokens_details"), "cached_tokens"))
            if prompt or completion:
                return Usage(prompt, completion, min(cached, prompt))
    slo = kwargs.get("standard_logging_object")
    if isinstance(slo, Mapping):
        return Usage(_int(slo.get("prompt_tokens")), _int(slo.get("completion_tokens")))
    return Usage()


def _refused(decision: Decision, limited: Sequence[Limited]) -> HTTPException:
    wait = decision.wait
    headers = {} if wait is None else {"retry-after": str(max(1, math.ceil(wait)))}
    return HTTPException(
        status_code=429,
        detail=f"tollgate: over the limit of {_names(decision, limited)}"
        + ("" if wait is None else f"; retry in {math.ceil(wait)} s"),
        headers=headers,
    )


def _names(decision: Decision, limited: Sequence[Limited]) -> str:
    names = []
    for status, lim in zip(decision.statuses, limited):
        if not status.allowed:
            name = status.limit.name if status.limit is not None and status.limit.name else None
            names.append(name or ",".join(f"{k}={v}" for k, v in lim.entries))
    return "; ".join(names) or "a limit"


def _reservation_in(kwargs: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for meta in (
        kwargs.get("metadata"),
        _get(kwargs.get("litellm_params"), "metadata"),
        _get(kwargs.get("litellm_params"), "litellm_metadata"),
    ):
        held = _get(meta, METADATA_KEY)
        if isinstance(held, Mapping) and held.get("id"):
            return held
    return None


def _get(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _int(v: Any) -> int:
    try:
        return max(0, int(v or 0))
    except (TypeError, ValueError):
        return 0


def _mapping(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _str_or_none(v: Any) -> str | None:
    return None if v is None or v == "" else str(v)


#: The instance `litellm_settings.callbacks: ["tollgate_client.litellm.callback"]` names,
#: configured from the environment (`TollgateCallback.from_env`) when the proxy imports it.
callback = TollgateCallback.from_env()
